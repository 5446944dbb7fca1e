"""The master's REST API (FastAPI): JSON over HTTP, bearer tokens, OpenAPI at /docs.

FastAPI because the request and response models are the pydantic models of
``det_sdk.api`` that the SDK and CLI also use: validation, error messages and the
OpenAPI document come from one source. Starlette alone would need all of that by
hand; the cost is FastAPI's import time, paid by the server only.

Every route under ``/api/`` needs ``Authorization: Bearer <token>``: a user token
(from ``det master up``) may do anything; a task token (one per launched process)
works while its process runs, and may only report for its own trial and
allocation, and read checkpoints (batch inference).

``create_app`` only composes: the guard in front of ``/api/`` (the token and the
body's size, before any byte of the body is read: ``routes.guard``), the browser-facing
security headers, the error-to-status mapping (``routes.errors``: the master's domain
errors map to statuses there, in one place) and one router per resource
(``det_sdk.master.routes``). Every status and media type the API answers with is in the
OpenAPI document.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI

from det_sdk.master.core import Master
from det_sdk.master.permissions import permission_dependency
from det_sdk.master.routes.admin import admin_router
from det_sdk.master.routes.agent_users import agent_users_router
from det_sdk.master.routes.checkpoints import checkpoints_router
from det_sdk.master.routes.cluster import cluster_router
from det_sdk.master.routes.commands import commands_router
from det_sdk.master.routes.common import RESPONSES, auth_dependencies
from det_sdk.master.routes.compare import compare_router
from det_sdk.master.routes.docs import docs_router
from det_sdk.master.routes.errors import add_error_handlers
from det_sdk.master.routes.experiments import experiments_router
from det_sdk.master.routes.guard import Guard
from det_sdk.master.routes.jobs import jobs_router
from det_sdk.master.routes.logs import logs_router
from det_sdk.master.routes.models import models_router
from det_sdk.master.routes.notebook_proxy import notebook_proxy_router, notebook_ws_route
from det_sdk.master.routes.notebook_signin import NotebookSignIn
from det_sdk.master.routes.notebooks import notebooks_router
from det_sdk.master.routes.profiler import profiler_router
from det_sdk.master.routes.prom import prom_router
from det_sdk.master.routes.queue import queue_router
from det_sdk.master.routes.rbac import rbac_router
from det_sdk.master.routes.shells import shells_router
from det_sdk.master.routes.tasks import tasks_router
from det_sdk.master.routes.tensorboards import tensorboards_router
from det_sdk.master.routes.trials import trials_router
from det_sdk.master.routes.ui import ui_router
from det_sdk.master.routes.ui_data import ui_data_router
from det_sdk.master.routes.ui_tasks import ui_tasks_router
from det_sdk.master.routes.ui_webhooks import ui_webhooks_router
from det_sdk.master.routes.users import users_router
from det_sdk.master.routes.webhooks import webhooks_router
from det_sdk.master.routes.workspaces import workspaces_router
from det_sdk.master.security import SecurityHeaders, Sessions

__all__ = ["create_app"]

def create_app(master: Master) -> FastAPI:
    """The ASGI app serving ``master``."""
    # /docs and /openapi.json are served by docs_router, behind the user token (or the UI's
    # session)
    app = FastAPI(title="det_sdk master", version="1", responses=RESPONSES, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, master=master)
    # the browser-facing headers go around everything Starlette builds, its error
    # handler's 500 included (add_middleware would place them inside that handler)
    build_stack = app.build_middleware_stack
    # (ignore: Starlette has no hook around the outermost stack; this is the only way in)
    app.build_middleware_stack = lambda: SecurityHeaders(build_stack())  # type: ignore[method-assign]
    add_error_handlers(app)

    principal, user = auth_dependencies(master)
    sessions = Sessions(master.store)
    # who may call each route: one table and one check before every route (issue 59)
    app.router.dependencies.append(Depends(permission_dependency(master, sessions)))
    # The routes a running task calls at every report come first: FastAPI (0.16x) keeps
    # each included router as a branch that a request walks in order, matching every
    # route of each branch before its own (twice), so behind four routers a metric report
    # cost 0.13 ms more of the master's CPU (0.65 against 0.52 ms in the app). No path of
    # the tasks' routes is another router's with the same method: the order changes which
    # route answers nothing, only the order of the OpenAPI document's paths.
    app.include_router(tasks_router(master, principal))
    app.include_router(cluster_router(master, principal))
    app.include_router(experiments_router(master, user))
    app.include_router(trials_router(master, principal, user))
    app.include_router(checkpoints_router(master, principal))
    app.include_router(jobs_router(master, principal, user))  # det job ... (issue 40)
    app.include_router(models_router(master, user))  # the model registry (issue 38)
    # Determined's CLI verbs on finished work and the master's log (issue 48)
    app.include_router(admin_router(master, user))
    app.include_router(tensorboards_router(master, user))  # det tensorboard start (issue 48)
    app.include_router(webhooks_router(master, principal, user))  # webhooks (issue 60)
    app.include_router(commands_router(master, principal, user))  # det cmd run (issue 58)
    app.include_router(shells_router(master, principal, user))  # det shell start (issue 58)
    # det notebook start (issue 58): its API, and JupyterLab behind the master's proxy
    app.include_router(notebooks_router(master, principal, user))
    app.include_router(notebook_proxy_router(master))
    # a browser not yet signed in that opens a notebook: to the sign-in page and back
    app.add_middleware(NotebookSignIn, sessions=sessions)
    app.router.routes.append(notebook_ws_route(master, sessions))
    app.include_router(queue_router(master, user))  # priority, weight, max_slots (issue 59)
    app.include_router(agent_users_router(master, user))  # link-with-agent-user (issue 59)
    app.include_router(rbac_router(master, user))  # roles (issue 59)
    # the web UI (pages at /ui/, their data at /ui/api/): det_sdk.master.ui, issue 12
    app.include_router(ui_router(master, sessions))
    app.include_router(ui_data_router(master, sessions))
    app.include_router(ui_tasks_router(master, sessions))  # the Tasks page (issue 58)
    app.include_router(docs_router(app, master, sessions))
    # a trial's log as filtered records; the Prometheus scrape (issue 60)
    app.include_router(logs_router(master, user, sessions))
    app.include_router(prom_router(master, user))
    # experiments side by side, for the API and the UI (issue 60)
    app.include_router(compare_router(master, user, sessions))
    app.include_router(ui_webhooks_router(master, sessions))  # the Webhooks page (issue 60)
    app.include_router(users_router(master, user))  # users, sign-in (issue 59)
    # the profiler's system metrics: reported, read, charted (issue 60)
    app.include_router(profiler_router(master, principal, user, sessions))
    app.include_router(workspaces_router(master, user))  # workspaces, projects (issue 59)
    return app
