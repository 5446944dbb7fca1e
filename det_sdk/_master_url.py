"""Master addresses as Determined's users write them (standard library only: the ``det``
CLI reads one on every command)."""

from __future__ import annotations

from urllib.parse import urlsplit

from det_sdk.errors import UsageError

__all__ = ["master_url"]


def master_url(url: str) -> str:
    """A master address as users write it, as a URL: Determined's ``host:port`` (``det -m
    127.0.0.1:8080``, ``DET_MASTER=...``) means ``http://host:port``; a bare ``host`` is
    port 8080, Determined's default. A URL with a scheme is kept (less a trailing ``/``).

    >>> master_url("127.0.0.1:18482"), master_url("node7"), master_url("https://m.example/")
    ('http://127.0.0.1:18482', 'http://node7:8080', 'https://m.example')
    """
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
        try:
            default_port = urlsplit(url).port is None
        except ValueError:
            default_port = False  # a bad port: said below
        parts = urlsplit(url)
        if default_port and parts.hostname:
            url = f"http://{parts.netloc}:8080{parts.path}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError as err:
        raise UsageError(f"master address {url!r}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"master address {url!r}: expected host:port or an http(s):// URL "
                         "(e.g. 127.0.0.1:8080)")
    return url.rstrip("/")
