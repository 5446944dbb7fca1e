"""Who may call each route: one table, :data:`RULES`, and one check, :func:`check`,
run before every route by the app-wide dependency :func:`permission_dependency`.

The rule wherever roles say nothing (every workspace without a role assignment, and
everything that is in no workspace):

- an **admin** may do everything;
- any other **user** may see everything, and change (kill, pause, archive, delete, edit)
  only what they own: a 403 names what they lack;
- user management is for admins, except one's own password and ``whoami``;
- a **task**'s token keeps its narrow rights: the routes marked ``TOKEN``, where the
  route itself holds it to its own trial and allocation (routes.common.own_trial).

Roles (issue 59): :data:`ROLES` (det_sdk.master.roles) says what ClusterAdmin,
WorkspaceAdmin, Editor and Viewer may do; :func:`role_check`, part of the same check,
applies it to every route whose path names an experiment, trial, project or workspace,
once that thing's workspace has a role assignment (roles are opt-in per workspace).

A route missing from the table is refused (fail closed), and
tests/integration/test_permissions.py walks the app's routes so that a new route
without a rule fails the tests.

>>> RULES[("POST", "/api/v1/experiments/{exp_id}/kill")]
Owner(kind='experiment', param='exp_id')
>>> rule_for("GET", "/api/v1/experiments")
'user'
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from det_sdk.master.core import Master
from det_sdk.master.errors import RequestError
from det_sdk.master.roles import ROLES  # what each role may do: one table (issue 59)
from det_sdk.master.routes.common import Principal, SessionExpired, authenticate
from det_sdk.master.security import Sessions
from det_sdk.master.ui.web import COOKIE

__all__ = ["ADMIN", "PUBLIC", "ROLES", "RULES", "TOKEN", "USER", "Forbidden", "Owner", "Self",
           "check", "may_change", "permission_dependency", "role_check", "route_rules",
           "rule_for"]

#: anyone, no token (the route checks what it needs itself: sign-in, static files)
PUBLIC = "public"
#: any valid token, a task's included (the route holds a task to its own trial)
TOKEN = "token"
#: any active user: to see
USER = "user"
#: admins only
ADMIN = "admin"


@dataclass(frozen=True)
class Owner:
    """An admin, or the user who owns the ``kind`` named by path parameter ``param``."""

    kind: str  # experiment | trial | job | model | tensorboard | command | workspace | project
    param: str


@dataclass(frozen=True)
class Self:
    """An admin, or the user whose id is path parameter ``param``."""

    param: str


Rule = str | Owner | Self


class Forbidden(RequestError):
    """A caller who may not do this: 403, naming what they lack."""

    default_status = 403


_EXP = Owner("experiment", "exp_id")
_TRIAL = Owner("trial", "trial_id")
_JOB = Owner("job", "job_id")
_MODEL = Owner("model", "ident")
_TB = Owner("tensorboard", "tb_id")
_CMD = Owner("command", "cmd_id")
_WS = Owner("workspace", "ws_id")
_PROJECT = Owner("project", "project_id")

#: (method, route path) -> rule
RULES: dict[tuple[str, str], Rule] = {
    # the master itself, its documents, the web UI's pages and sign-in
    ("GET", "/health"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,  # the route asks for a user token or UI session
    ("GET", "/docs"): PUBLIC,  # the same
    ("GET", "/api/v1/master"): TOKEN,
    ("GET", "/api/v1/master/logs"): USER,
    ("GET", "/"): PUBLIC,
    ("GET", "/ui"): PUBLIC,
    ("GET", "/ui/"): PUBLIC,  # the page checks the session
    ("GET", "/ui/signin"): PUBLIC,
    ("POST", "/ui/signin"): PUBLIC,
    ("POST", "/ui/signout"): PUBLIC,
    ("GET", "/ui/static/{name:path}"): PUBLIC,
    ("POST", "/ui/api/signin-codes"): PUBLIC,  # the route asks for a user token
    # users (det_sdk.master.routes.users)
    ("POST", "/api/v1/auth/login"): PUBLIC,
    ("POST", "/api/v1/auth/logout"): USER,
    ("GET", "/api/v1/me"): USER,
    ("GET", "/api/v1/users"): USER,
    ("POST", "/api/v1/users"): ADMIN,
    ("GET", "/api/v1/users/{user_id}"): USER,
    ("GET", "/api/v1/users/{username}/by-username"): USER,
    ("PATCH", "/api/v1/users/{user_id}"): ADMIN,
    ("POST", "/api/v1/users/{user_id}/password"): Self("user_id"),
    ("PUT", "/api/v1/users/{user_id}/agent-user"): ADMIN,  # link-with-agent-user (issue 59)
    # experiments
    ("POST", "/api/v1/experiments"): USER,
    ("GET", "/api/v1/experiments"): USER,
    ("GET", "/api/v1/experiments/{exp_id}"): USER,
    ("GET", "/api/v1/experiments/{exp_id}/trials"): USER,
    ("POST", "/api/v1/experiments/{exp_id}/pause"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/activate"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/kill"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/archive"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/unarchive"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/cancel"): _EXP,
    ("POST", "/api/v1/experiments/{exp_id}/continue"): _EXP,
    ("PATCH", "/api/v1/experiments/{exp_id}"): _EXP,
    ("DELETE", "/api/v1/experiments/{exp_id}"): _EXP,
    # trials: a task reports for its own trial only (the routes check)
    ("GET", "/api/v1/trials/{trial_id}"): TOKEN,
    ("GET", "/api/v1/trials/{trial_id}/metrics"): TOKEN,
    ("GET", "/api/v1/trials/{trial_id}/checkpoints"): TOKEN,
    ("GET", "/api/v1/trials/{trial_id}/logs"): USER,
    ("GET", "/api/v1/trials/{trial_id}/files"): USER,
    ("POST", "/api/v1/trials/{trial_id}/kill"): _TRIAL,
    ("POST", "/api/v1/trials/{trial_id}/metrics"): TOKEN,
    ("POST", "/api/v1/trials/{trial_id}/progress"): TOKEN,
    ("GET", "/api/v1/trials/{trial_id}/searcher/operation"): TOKEN,
    ("POST", "/api/v1/trials/{trial_id}/searcher/completed_operation"): TOKEN,
    # checkpoints (DELETE: the route checks each checkpoint's owner, may_change)
    ("POST", "/api/v1/checkpoints"): TOKEN,
    ("GET", "/api/v1/checkpoints"): TOKEN,
    ("GET", "/api/v1/checkpoints/{uuid}"): TOKEN,
    ("GET", "/api/v1/checkpoints/{uuid}/download"): TOKEN,
    ("DELETE", "/api/v1/checkpoints"): USER,
    # a task's allocation (the routes hold a task to its own)
    ("GET", "/api/v1/allocations/{alloc_id}/signals/preemption"): TOKEN,
    ("POST", "/api/v1/allocations/{alloc_id}/signals/ack_preemption"): TOKEN,
    ("POST", "/api/v1/allocations/{alloc_id}/progress"): TOKEN,
    ("POST", "/api/v1/allocations/{alloc_id}/metrics"): TOKEN,
    # batch jobs, the queue, tasks
    ("POST", "/api/v1/jobs"): USER,
    ("GET", "/api/v1/jobs"): USER,
    ("GET", "/api/v1/jobs/{job_id}"): USER,
    ("GET", "/api/v1/jobs/{job_id}/logs"): USER,
    ("GET", "/api/v1/jobs/{job_id}/files"): USER,
    ("POST", "/api/v1/jobs/{job_id}/pause"): _JOB,
    ("POST", "/api/v1/jobs/{job_id}/activate"): _JOB,
    ("POST", "/api/v1/jobs/{job_id}/kill"): _JOB,
    # the queue's steering (issue 59): priority, weight, max_slots
    ("PATCH", "/api/v1/experiments/{exp_id}/resources"): _EXP,
    ("POST", "/api/v1/jobs/{job_id}/priority"): _JOB,
    ("GET", "/api/v1/job-queue"): USER,
    ("GET", "/api/v1/tasks"): USER,
    # the model registry
    ("POST", "/api/v1/models"): USER,
    ("GET", "/api/v1/models"): USER,
    ("GET", "/api/v1/models/{ident}"): USER,
    ("DELETE", "/api/v1/models/{ident}"): _MODEL,
    ("POST", "/api/v1/models/{ident}/versions"): _MODEL,
    ("GET", "/api/v1/models/{ident}/versions"): USER,
    ("GET", "/api/v1/models/{ident}/versions/{version}"): USER,
    # TensorBoards
    ("POST", "/api/v1/tensorboards"): USER,
    ("GET", "/api/v1/tensorboards"): USER,
    ("GET", "/api/v1/tensorboards/{tb_id}"): USER,
    ("POST", "/api/v1/tensorboards/{tb_id}/kill"): _TB,
    ("GET", "/api/v1/tensorboards/{tb_id}/logs"): USER,
    # the web UI's data (det_sdk.master.routes.ui_data)
    ("GET", "/ui/api/experiments"): USER,
    ("GET", "/ui/api/experiments/{exp_id}"): USER,
    ("GET", "/ui/api/experiments/{exp_id}/curves"): USER,
    ("POST", "/ui/api/experiments/{exp_id}/{verb}"): _EXP,
    ("GET", "/ui/api/trials/{trial_id}"): USER,
    ("GET", "/ui/api/trials/{trial_id}/metrics"): USER,
    ("GET", "/ui/api/trials/{trial_id}/logs"): USER,
    ("GET", "/ui/api/checkpoints/{uuid}/download"): USER,
    ("GET", "/ui/api/jobs"): USER,
    ("GET", "/ui/api/models"): USER,
    ("GET", "/ui/api/jobs/{job_id}"): USER,
    ("GET", "/ui/api/jobs/{job_id}/metrics"): USER,
    ("POST", "/ui/api/jobs/{job_id}/{verb}"): _JOB,
    ("GET", "/ui/api/jobs/{job_id}/logs"): USER,
    ("GET", "/ui/api/tensorboard-dirs"): USER,
    ("POST", "/ui/api/tensorboards"): USER,
    ("GET", "/ui/api/tensorboards"): USER,
    # webhooks (issue 60): every experiment's events, URLs that may hold credentials:
    # admins manage and list them until workspaces scope them; a task sends its own
    # trial's custom alert (the route holds it to its trial)
    ("GET", "/api/v1/webhooks"): ADMIN,
    ("POST", "/api/v1/webhooks"): ADMIN,
    ("GET", "/api/v1/webhooks/deliveries"): ADMIN,
    ("POST", "/api/v1/webhooks/custom"): TOKEN,
    ("DELETE", "/api/v1/webhooks/{webhook_id:int}"): ADMIN,
    ("PATCH", "/api/v1/webhooks/{webhook_id:int}"): ADMIN,
    ("POST", "/api/v1/webhooks/{webhook_id:int}/test"): ADMIN,
    # ... and the web UI's Webhooks page (routes.ui_webhooks), admin only as they are
    ("GET", "/ui/api/webhooks"): ADMIN,
    ("POST", "/ui/api/webhooks"): ADMIN,
    ("DELETE", "/ui/api/webhooks/{webhook_id:int}"): ADMIN,
    ("POST", "/ui/api/webhooks/{webhook_id:int}/test"): ADMIN,
    # commands (issue 58): a command reports its own metrics (the route holds it to its own)
    ("POST", "/api/v1/commands"): USER,
    ("GET", "/api/v1/commands"): USER,
    ("GET", "/api/v1/commands/{cmd_id}"): USER,
    ("POST", "/api/v1/commands/{cmd_id}/kill"): _CMD,
    ("POST", "/api/v1/commands/{cmd_id}/metrics"): TOKEN,
    ("GET", "/api/v1/commands/{cmd_id}/files"): USER,
    ("GET", "/api/v1/commands/{cmd_id}/logs"): USER,
    # shells (issue 58): a shell's key is its owner's (the route says 403 to anyone else: a
    # read, which the Owner rule words as a change); its task reports its sshd (its own)
    ("POST", "/api/v1/shells"): USER,
    ("GET", "/api/v1/shells"): USER,
    ("GET", "/api/v1/shells/{shell_id}"): USER,
    ("GET", "/api/v1/shells/{shell_id}/key"): USER,
    ("POST", "/api/v1/shells/{shell_id}/kill"): Owner("command", "shell_id"),
    ("POST", "/api/v1/shells/{shell_id}/ready"): TOKEN,
    # notebooks (issue 58): a notebook is a command; JupyterLab behind the proxy is its
    # owner's or an admin's only (the proxy's websocket route applies the same rule)
    ("POST", "/api/v1/notebooks"): USER,
    ("GET", "/api/v1/notebooks"): USER,
    ("GET", "/api/v1/notebooks/{nb_id}"): USER,
    ("POST", "/api/v1/notebooks/{nb_id}/kill"): Owner("command", "nb_id"),
    ("POST", "/api/v1/notebooks/{nb_id}/ready"): TOKEN,
    **{(m, "/proxy/notebooks/{nb_id}/{path:path}"): Owner("command", "nb_id")
       for m in ("GET", "POST", "PUT", "PATCH", "DELETE")},
    # a trial's log as records; the Prometheus scrape; experiments compared (issue 60)
    ("GET", "/api/v1/trials/{trial_id}/logs/records"): USER,
    ("GET", "/ui/api/trials/{trial_id}/log-records"): USER,
    ("GET", "/prom/det-state-metrics"): USER,
    ("GET", "/api/v1/compare"): USER,
    ("GET", "/ui/api/compare"): USER,
    # the profiler's system metrics: a trial reports its own (the route holds a task to
    # its trial); the slots and who holds them (issue 60)
    ("POST", "/api/v1/trials/{trial_id}/system-metrics"): TOKEN,
    ("GET", "/api/v1/trials/{trial_id}/system-metrics"): TOKEN,
    ("GET", "/ui/api/trials/{trial_id}/system-metrics"): USER,
    ("GET", "/api/v1/slots"): USER,
    # the web UI's Tasks page (issue 58): its kills as the API's (a shell is a command)
    ("GET", "/ui/api/tasks"): USER,
    ("GET", "/ui/api/commands/{cmd_id}/logs"): USER,
    ("POST", "/ui/api/commands/{cmd_id}/kill"): _CMD,
    ("GET", "/ui/api/tensorboards/{tb_id}/logs"): USER,
    ("POST", "/ui/api/tensorboards/{tb_id}/kill"): _TB,
    # workspaces and projects (issue 59): any user makes one (Determined's basic
    # authorization); its owner or an admin archives or deletes it; an experiment's
    # owner moves it (into any project that takes experiments)
    ("GET", "/api/v1/workspaces"): USER,
    ("POST", "/api/v1/workspaces"): USER,
    ("GET", "/api/v1/workspaces/{ws_id}"): USER,
    ("DELETE", "/api/v1/workspaces/{ws_id}"): _WS,
    ("POST", "/api/v1/workspaces/{ws_id}/archive"): _WS,
    ("POST", "/api/v1/workspaces/{ws_id}/unarchive"): _WS,
    ("GET", "/api/v1/workspaces/{ws_id}/projects"): USER,
    ("POST", "/api/v1/workspaces/{ws_id}/projects"): USER,
    ("GET", "/api/v1/projects/{project_id}"): USER,
    ("DELETE", "/api/v1/projects/{project_id}"): _PROJECT,
    ("POST", "/api/v1/projects/{project_id}/archive"): _PROJECT,
    ("POST", "/api/v1/projects/{project_id}/unarchive"): _PROJECT,
    ("POST", "/api/v1/experiments/{exp_id}/move"): _EXP,
    # roles (issue 59): anyone lists them and sees who holds what; assigning is checked
    # by the route (admins, ClusterAdmins, a workspace's WorkspaceAdmins and creator)
    ("POST", "/api/v1/roles/search"): USER,
    ("GET", "/api/v1/roles/search/by-user/{user_id}"): USER,
    ("GET", "/api/v1/permissions/summary"): USER,
    ("POST", "/api/v1/roles/add-assignments"): USER,
    ("POST", "/api/v1/roles/remove-assignments"): USER,
}


def rule_for(method: str, path: str) -> Rule | None:
    """The rule of route ``path`` (its template) for ``method`` (HEAD as GET)."""
    return RULES.get(("GET" if method == "HEAD" else method, path))


def route_rules(app: FastAPI) -> Iterator[tuple[str, str, Rule | None]]:
    """Every (method, path, rule) of ``app``'s routes, included routers' too."""
    stack: list[Any] = list(app.router.routes)
    while stack:
        route = stack.pop(0)
        inner = getattr(route, "original_router", None)
        if inner is not None:  # FastAPI 0.16x keeps an included router as a branch
            stack[:0] = list(inner.routes)
            continue
        path = getattr(route, "path", None)
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD" and path is not None:
                yield method, path, rule_for(method, path)


def may_change(p: Principal, owner_id: int | None, what: str) -> None:
    """Forbidden unless ``p`` is an admin or the owner (``owner_id``) of ``what``."""
    if p.kind != "user":
        raise Forbidden(f"changing {what} needs a user token, not a task's")
    if p.admin or owner_id == p.user_id:
        return
    raise Forbidden(f"user {p.username!r} may not change {what}: it is another user's "
                    "(its owner or an admin may)")


def _owner(master: Master, kind: str, ident: str) -> int | bool | None:
    """The owner id of ``kind`` ``ident``; False: there is none such (the route's 404)."""
    if kind == "tensorboard":
        try:
            rec = master.tensorboards.get(ident)
        except RequestError:
            return False
        return master.accounts.owner(rec.get("user_id"))[0]
    if kind in ("workspace", "project"):  # issue 59: their rows keep their creator
        found = (master.store.workspace if kind == "workspace" else master.store.project)(
            int(ident)) if ident.isdigit() else None
        return False if found is None else master.store.owner_or_first(found["owner_id"])
    return master.accounts.owner_of(kind, ident)


def check(master: Master, p: Principal | None, rule: Rule | None,
          params: dict[str, Any], route: str) -> None:
    """Raise unless ``p`` may call the route whose rule is ``rule``.

    >>> check(None, Principal("user", user_id=1, username="a", admin=True), ADMIN, {}, "/x")
    >>> check(None, Principal("user", user_id=2, username="b"), ADMIN, {}, "/x")
    Traceback (most recent call last):
    ...
    det_sdk.master.permissions.Forbidden: user 'b' is not an admin: /x is for admins
    """
    if rule is None:  # fail closed: a route nobody gave a rule to answers nobody
        raise Forbidden(f"{route} has no permission rule (det_sdk.master.permissions)")
    if rule == PUBLIC:
        return
    if p is None:
        raise HTTPException(401, "needs a user token (Authorization: Bearer <token>) or a "
                                 "web UI session")
    if rule == TOKEN:
        return
    if p.kind != "user":
        raise HTTPException(403, "this needs a user token, not a task's")
    if rule == USER or p.admin:
        return
    if rule == ADMIN:
        raise Forbidden(f"user {p.username!r} is not an admin: {route} is for admins")
    if isinstance(rule, Self):
        if str(params.get(rule.param)) == str(p.user_id):
            return
        raise Forbidden(f"user {p.username!r} may change only their own account here "
                        "(an admin may change anyone's)")
    if isinstance(rule, Owner):
        ident = str(params.get(rule.param, ""))
        owner = _owner(master, rule.kind, ident)
        if owner is False:
            return  # none such: the route answers 404
        may_change(p, owner if isinstance(owner, int) else None, f"{rule.kind} {ident}")


#: a route's path parameter -> the kind of thing it names, whose workspace roles govern
_SCOPED = {"exp_id": "experiment", "trial_id": "trial", "ws_id": "workspace",
           "project_id": "project"}


def role_check(master: Master, p: Principal | None, method: str,
               params: dict[str, Any], route: str) -> bool:
    """Roles' part of the one check (issue 59): True when a role grants the call (the
    owner rule is then not asked), False when roles say nothing (the rules from before
    roles decide); NotFound when ``p`` may not see the thing, Forbidden naming the
    permission when ``p`` may see but not change it.

    >>> role_check(None, None, "GET", {}, "/x")
    False
    """
    from det_sdk.master import roles

    if p is None or p.kind != "user" or p.admin:
        return False
    found = next(((k, str(params[n])) for n, k in _SCOPED.items() if n in params), None)
    if found is None or not master.store.any_role_assignments():
        return False
    kind, ident = found
    ws = master.roles.workspace_of(kind, ident)
    perms = None if ws is None else master.roles.workspace_permissions(p, ws)
    if perms is None:
        return False  # none such (the route's 404) or a workspace without roles
    if roles.VIEW not in perms:
        raise roles.hidden_error(kind, ident)
    if method in ("GET", "HEAD"):
        return True
    need = roles.UPDATE_EXPERIMENT
    if kind in ("workspace", "project"):
        need = (roles.CREATE_EXPERIMENT if route.endswith("/projects")
                else roles.UPDATE_WORKSPACE)
    if need in perms:
        return True
    raise Forbidden(f"user {p.username!r} lacks {need} on workspace {ws} for {kind} "
                    f"{ident} (their roles there: see det rbac my-permissions)")


def _with_cluster_admin(master: Master, p: Principal | None) -> Principal | None:
    """``p`` as an admin when they hold ClusterAdmin (Determined's cluster role)."""
    from dataclasses import replace


    if (p is None or p.kind != "user" or p.admin
            or not master.store.any_role_assignments()
            or not master.roles.is_cluster_admin(p.user_id)):
        return p
    return replace(p, admin=True)


def _ui_principal(master: Master, sessions: Sessions, request: Request) -> Principal | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        try:
            p = authenticate(master, header)
        except SessionExpired:
            raise  # outside /api/ too (a Prometheus scrape), the holder learns to sign in
        except HTTPException:
            return None
        return p if p.kind == "user" else None
    user = sessions.user_of(request.cookies.get(COOKIE))
    if user is None:
        return None
    return Principal("user", user_id=user["id"], username=user["username"],
                     admin=user["admin"])


def permission_dependency(master: Master, sessions: Sessions
                          ) -> Callable[[Request], Awaitable[None]]:
    """The app-wide dependency: :func:`check` with the matched route's rule."""

    async def permission(request: Request) -> None:
        route = request.scope.get("route")
        path = getattr(route, "path", request.url.path)
        rule = rule_for(request.method, path)
        if rule == PUBLIC:
            return
        state = request.scope.get("state", {})
        p = state.get("det_principal")
        if p is None:
            p = _ui_principal(master, sessions, request)
            # the web UI's routes filter their lists by it (roles, issue 59)
            request.scope.setdefault("state", {})["det_ui_principal"] = p
        if p is not None and p.kind == "user":  # a task keeps its narrow rights
            from starlette.concurrency import run_in_threadpool

            # roles (issue 59): short SQLite reads, off the event loop
            p = await run_in_threadpool(_with_cluster_admin, master, p)
            if p is not None and p.admin:
                state["det_principal"] = p
            if await run_in_threadpool(role_check, master, p, request.method,
                                       request.path_params, path):
                return
        if rule == TOKEN or (rule == USER and p is not None and p.kind == "user"):
            return  # no lookup: the hot path (a task's reports) pays a dict lookup
        if isinstance(rule, Owner):
            # the owner's lookups are short SQLite reads: off the event loop all the same
            from starlette.concurrency import run_in_threadpool

            await run_in_threadpool(check, master, p, rule, request.path_params, path)
            return
        check(master, p, rule, request.path_params, path)

    return permission
