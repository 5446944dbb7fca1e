"""Where the sign-in page sends a browser once it is signed in (``/ui/signin?next=...``):
only a path of this master, never another site.

A browser that opens a notebook (``/proxy/notebooks/ID/...``) without the UI's session is
sent to the sign-in page with the path it asked for as ``next``; once signed in it is sent
back there. ``next`` is the one value of a sign-in that a stranger's link can choose, so
anything that a browser could read as another origin is refused: a scheme
(``https://evil.example``), a scheme-relative ``//evil.example``, a backslash (browsers
read ``/\\evil.example`` as ``//evil.example``), control characters and whitespace.

>>> safe_next("/proxy/notebooks/3/lab?reset")
'/proxy/notebooks/3/lab?reset'
>>> safe_next("//evil.example")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
det_sdk.master.ui.next_path.BadNext: next: expected a path of this master ...
"""

from __future__ import annotations

import urllib.parse

from det_sdk.errors import DetSdkError

__all__ = ["MAX_NEXT", "BadNext", "safe_next", "signin_location"]

#: the longest ``next`` taken (a path and its query; longer is no page of this master's)
MAX_NEXT = 2048


class BadNext(DetSdkError, ValueError):
    """A ``next`` that is not a path of this master.

    >>> issubclass(BadNext, DetSdkError)
    True
    """


def safe_next(value: str) -> str:
    """``value`` if it is a path of this master (one leading ``/``, no scheme or host, no
    backslash, whitespace or control character, at most :data:`MAX_NEXT` characters);
    :class:`BadNext` naming the field otherwise.

    >>> safe_next("/ui/")
    '/ui/'
    >>> for bad in ("https://evil.example", "/\\\\evil.example", "evil", "/%0d/x"):
    ...     try:
    ...         safe_next(bad)
    ...     except BadNext:
    ...         print("refused", bad)
    refused https://evil.example
    refused /\\evil.example
    refused evil
    refused /%0d/x
    """
    text = value if isinstance(value, str) else ""
    decoded = urllib.parse.unquote(text)
    ok = (text.startswith("/") and not text.startswith("//") and 0 < len(text) <= MAX_NEXT
          # browsers turn "\" into "/" and drop tabs and newlines: either could make a host
          and not any(c == "\\" or c.isspace() or ord(c) < 32 or ord(c) == 127
                      for c in text)
          # decoded, a space is a file's name; a control character or backslash is no page's
          and not any(c == "\\" or ord(c) < 32 or ord(c) == 127 for c in decoded)
          and not decoded.startswith("//"))
    if ok:
        parts = urllib.parse.urlsplit(text)
        ok = not parts.scheme and not parts.netloc
    if not ok:
        raise BadNext(f"next: expected a path of this master (one leading '/', no scheme "
                      f"or host), got {text[:100]!r}")
    return text


def signin_location(path: str) -> str:
    """The sign-in page's address that comes back to ``path`` (a path of this master).

    >>> signin_location("/proxy/notebooks/3/lab")
    '/ui/signin?next=%2Fproxy%2Fnotebooks%2F3%2Flab'
    """
    return "/ui/signin?" + urllib.parse.urlencode({"next": safe_next(path)})
