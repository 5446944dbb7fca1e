"""Headless Chromium for the web UI's page tests and benchmark: Playwright on Debian's build.

Playwright's own browser download cannot happen here, so it drives the system
``chromium`` (``scripts/setup_browser.sh`` installs it) through ``executable_path``.

>>> path = chromium_path()  # None when no chromium is installed
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

__all__ = ["chromium_path", "missing_reason", "open_browser"]


def chromium_path() -> str | None:
    """The system Chromium (``DET_CHROMIUM`` overrides), or None."""
    for name in (os.environ.get("DET_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (found := shutil.which(name)):
            return found
    return None


def missing_reason() -> str | None:
    """Why the page tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "no chromium on PATH (bash scripts/setup_browser.sh installs Debian's)"
    return None


@contextlib.contextmanager
def open_browser() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()


def signed_in_context(browser: Any, url: str, token: str, enforce_csp: bool = False,
                      **kwargs: Any) -> Any:
    """A browser context signed in to the UI of the master at ``url`` with the user
    ``token`` (the sign-in form's POST: the context keeps the session cookie).

    The UI's Content-Security-Policy refuses ``eval``, which Playwright's
    ``wait_for_function`` polls with: unless ``enforce_csp``, the context bypasses the
    policy (the tests of the policy itself enforce it and wait with selectors).
    """
    context = browser.new_context(viewport={"width": 1400, "height": 900},
                                  bypass_csp=not enforce_csp, **kwargs)
    answer = context.request.post(f"{url}/ui/signin", form={"token": token},
                                  max_redirects=0)
    if answer.status != 303:
        raise RuntimeError(f"sign-in at {url} answered {answer.status}: {answer.text()[:200]}")
    return context
