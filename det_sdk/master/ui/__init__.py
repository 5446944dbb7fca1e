"""The master's web UI: pages at ``/ui/``, their data at ``/ui/api/``, same port as the API.

The front end is plain HTML, CSS and JavaScript modules under ``static/`` (no build
step: edit a file, reload the page), with uPlot vendored under ``static/vendor/``.
Nothing is fetched from elsewhere: the UI works with no internet.

Sign-in: ``det ui`` asks ``POST /ui/api/signin-codes`` (with the user token) for a
one-time code and prints ``/ui/signin?code=...``; opening it sets the session
cookie. The sign-in page also takes a pasted user token. Task tokens cannot sign in.

>>> from fastapi import FastAPI
>>> # app.include_router(ui_router(master))   (what create_app does)
"""

from det_sdk.master.ui.routes import ui_router

__all__ = ["ui_router"]
