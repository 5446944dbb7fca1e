"""The master's HTTP routes, one module per resource; ``det_sdk.master.app.create_app``
composes them.

Each module has one function ``<resource>_router(master, ...) -> APIRouter`` taking the
``Master`` (``det_sdk.master.core``) and the dependencies that admit a caller
(``common.auth_dependencies``: ``principal``, any valid token; ``user``, the user's only):

- ``cluster``: ``/health`` and ``/api/v1/master``;
- ``experiments``: ``/api/v1/experiments`` (create, list, describe, pause/activate/kill);
- ``trials``: ``/api/v1/trials/{id}`` (describe, metrics, checkpoints, logs, files);
- ``checkpoints``: ``/api/v1/checkpoints`` (list, describe, download);
- ``tasks``: what a running task calls (metric, progress, searcher and checkpoint
  reports; the preemption long-poll and its acknowledgement);
- ``models``: the model registry, ``/api/v1/models``;
- ``ui`` and ``ui_data``: the web UI's pages and sign-in, and the pages' data
  (``/ui/api/``);
- ``docs``: ``/openapi.json`` and ``/docs``, for the user.

Shared: ``common`` (who is asking, the path and page parameters, the documented error
answers, file and page answers), ``guard`` (the ASGI guard in front of ``/api/``: token,
then body size) and ``errors`` (the error-to-status mapping). Routes call ``Master``'s
methods only, never its store.

>>> from det_sdk.master.routes.common import Principal
>>> Principal("task").kind
'task'
"""
