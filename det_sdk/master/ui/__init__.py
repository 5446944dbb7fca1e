"""The master's web UI: pages at ``/ui/``, their data at ``/ui/api/``, same port as the API.

The front end is plain HTML, CSS and JavaScript modules under ``static/`` (no build
step: edit a file, reload the page), with uPlot vendored under ``static/vendor/``.
Nothing is fetched from elsewhere: the UI works with no internet.

Sign-in: ``det ui`` asks ``POST /ui/api/signin-codes`` (with the user token) for a
one-time code and prints ``/ui/signin?code=...``; opening it sets the session
cookie. The sign-in page also takes a pasted user token. Task tokens cannot sign in.

Here: the queries behind the pages (``views``, ``series``), the HTTP pieces the UI's
routes share (``web``: the session cookie, static files, JSON answers) and the static
files. The routes are ``det_sdk.master.routes.ui`` and ``det_sdk.master.routes.ui_data``.

>>> # app.include_router(ui_router(master, sessions))   (what create_app does)
"""
