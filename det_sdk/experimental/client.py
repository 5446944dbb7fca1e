"""Determined 0.38's Python SDK (``determined.experimental.client``) over det_sdk's master.

Log in once (``DET_MASTER`` / ``det -m``'s address and the token ``det master up`` or
``det user login`` saved, or ``DET_USER_TOKEN``; or ``user`` and ``password``), then the
module's functions act on that master::

    from det_sdk.experimental import client

    client.login(master="127.0.0.1:8080")
    exp = client.create_experiment("const.yaml", ".")
    exp.wait()
    best = exp.top_checkpoint()
    model = client.create_model("mnist")
    model.register_version(best.uuid)
    path = client.get_model("mnist").get_version(1).checkpoint.download("ckpt")

Users as Determined's (``whoami``, ``create_user``, ``get_user_by_name``, ``list_users``,
:class:`User`); workspaces and projects (``create_workspace``, ``get_workspace``,
``list_workspaces``, ``delete_workspace``, :class:`Workspace`, :class:`Project`;
``create_experiment(project_id=)``, ``list_experiments(project_id=)``). Not provided:
``list_oauth_clients``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from det_sdk.experimental._compare import Comparison
from det_sdk.experimental._compare import compare as _compare
from det_sdk.experimental._logs import LogLevel
from det_sdk.experimental._models import Model, ModelVersion
from det_sdk.experimental._objects import (
    Checkpoint,
    ClientError,
    Experiment,
    ExperimentState,
    OrderBy,
    Trial,
    TrialMetrics,
)
from det_sdk.experimental._users import User
from det_sdk.experimental._workspaces import Project, Workspace

__all__ = ["Checkpoint", "ClientError", "Comparison", "Determined", "Experiment",
           "ExperimentState", "Model", "ModelVersion", "OrderBy", "Trial", "TrialMetrics", "User",
           "compare", "create_experiment", "create_model", "create_user", "get_checkpoint",
           "get_experiment", "get_model", "get_trial", "get_user_by_id", "get_user_by_name",
           "iter_trials_metrics", "list_experiments", "list_models", "list_users", "login",
           "logout", "whoami"]
__all__ += ["LogLevel"]  # Trial.iter_logs's min_level (issue 60)
__all__ += ["Project", "Workspace", "create_workspace", "delete_workspace", "get_workspace",
            "list_workspaces"]  # issue 59


class Determined:
    """A connection to one master (Determined's ``Determined`` object): what the module
    functions use after :func:`login`.

    >>> # d = Determined("127.0.0.1:8080"); d.get_experiment(1).wait()
    """

    def __init__(self, master: str | None = None, user: str | None = None,
                 password: str | None = None, cert_path: str | None = None,
                 cert_name: str | None = None, noverify: bool = False) -> None:
        from det_sdk.cli.main import DEFAULT_MASTER
        from det_sdk.client import MasterClient, load_token, master_url
        from det_sdk.env import setting

        url = master_url(master or setting("DET_MASTER") or DEFAULT_MASTER)
        if user is not None and password is not None:  # sign in, as Determined's login
            from det_sdk.client import MasterError

            anonymous = MasterClient(url, None)
            try:
                token = anonymous.request("POST", "/api/v1/auth/login", json={
                    "username": user, "password": password})["token"]
            except MasterError as err:
                raise ClientError(f"login as {user!r} refused: {err}") from None
            finally:
                anonymous.close()
        else:
            token = load_token(url)
        if token is None:
            raise ClientError(f"no token for {url}: start it with `det master up`, sign in "
                              "with `det user login`, set DET_USER_TOKEN, or pass user and "
                              "password")
        self._session = MasterClient(url, token)

    # users (issue 59)
    def whoami(self) -> User:
        return User(self._session, self._session.request("GET", "/api/v1/me")["user"])

    def get_session_username(self) -> str:
        return self.whoami().username

    def create_user(self, username: str, admin: bool, password: str | None = None,
                    remote: bool = False) -> User:
        if remote:
            raise ClientError("create_user: no external identity provider here (remote)")
        out = self._session.request("POST", "/api/v1/users", json={
            "user": {"username": username, "admin": admin}, "password": password})
        return User(self._session, out["user"])

    def get_user_by_id(self, user_id: int) -> User:
        return User(self._session, self._session.request("GET", f"/api/v1/users/{user_id}")
                    ["user"])

    def get_user_by_name(self, user_name: str) -> User:
        return User(self._session, self._session.request(
            "GET", f"/api/v1/users/{user_name}/by-username")["user"])

    def list_users(self, active: bool | None = None) -> list[User]:
        rows = self._session.request("GET", "/api/v1/users")["users"]
        return [User(self._session, r) for r in rows
                if active is None or r["active"] == active]

    def logout(self) -> None:
        """End this session's token on the master (`det master up`'s own token stays)."""
        self._session.request("POST", "/api/v1/auth/logout")

    # experiments
    def create_experiment(self, config: str | Path | dict[str, Any],
                          model_dir: str | None = None, includes: Iterable[Any] | None = None,
                          project_id: int | None = None, template: str | None = None
                          ) -> Experiment:
        """Submit an experiment: ``config`` (a YAML path or a dict) with ``model_dir``
        uploaded as its context (as ``det experiment create``)."""
        from det_sdk.cli.common import pack_directory, read_config

        if isinstance(config, dict):
            import tempfile

            import yaml

            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                yaml.safe_dump(config, f)
            try:
                parsed = read_config(f.name, "experiment")
            finally:
                os.unlink(f.name)
        else:
            parsed = read_config(str(config), "experiment")
        if model_dir is None:
            raise ClientError("create_experiment: model_dir is required (the directory the "
                              "entrypoint runs in)")
        if project_id is None:
            exp_id = self._session.create_experiment(parsed, pack_directory(model_dir))
            return Experiment(self._session, exp_id)
        import base64  # into a project: the JSON request, with its project_id

        out = self._session.request("POST", "/api/v1/experiments", json={
            "config": parsed, "project_id": project_id,
            "model_definition": base64.b64encode(pack_directory(model_dir)).decode()})
        return Experiment(self._session, int(out["id"]))

    def get_experiment(self, experiment_id: int) -> Experiment:
        return Experiment(self._session, experiment_id)

    def list_experiments(self, sort_by: Any = None, order_by: OrderBy | None = None,
                         experiment_ids: list[int] | None = None, labels: Any = None,
                         users: Any = None, states: list[ExperimentState] | None = None,
                         name: str | None = None, project_id: int | None = None
                         ) -> list[Experiment]:
        """Experiments, oldest first (``order_by=OrderBy.DESC``: newest first), filtered
        by ids, states, name, ``users`` (their owners' names) and ``project_id``."""
        rows = sorted(self._session.experiments(), key=lambda r: r["id"])
        rows = [r for r in rows if project_id is None or r.get("project_id") == project_id]
        want = {s.value if isinstance(s, ExperimentState) else str(s) for s in states or []}
        rows = [r for r in rows if (users is None or r.get("username") in users)
                and (experiment_ids is None or r["id"] in experiment_ids)
                and (not want or r["state"] in want) and (name is None or r["name"] == name)]
        if order_by == OrderBy.DESC:
            rows = rows[::-1]
        return [Experiment(self._session, r["id"]) for r in rows]

    # workspaces (issue 59)
    def create_workspace(self, name: str) -> Workspace:
        out = self._session.request("POST", "/api/v1/workspaces", json={"name": name})
        return Workspace(self._session, out["workspace"])

    def get_workspace(self, name: str) -> Workspace:
        """The workspace named ``name`` (a MasterError with status 404 if none)."""
        from det_sdk.client import MasterError

        rows = self._session.request("GET", "/api/v1/workspaces",
                                     params={"name": name})["workspaces"]
        if not rows:
            raise MasterError(404, f"no workspace named {name!r} (HTTP 404)")
        return Workspace(self._session, rows[0])

    def list_workspaces(self) -> list[Workspace]:
        rows = self._session.request("GET", "/api/v1/workspaces")["workspaces"]
        return [Workspace(self._session, r) for r in rows]

    def delete_workspace(self, name: str) -> None:
        """Delete the workspace (the master refuses one whose projects hold experiments)."""
        self._session.request("DELETE", f"/api/v1/workspaces/{self.get_workspace(name).id}")

    # trials and checkpoints
    def get_trial(self, trial_id: int) -> Trial:
        return Trial(self._session, trial_id)

    def iter_trials_metrics(self, trial_ids: list[int], group: str,
                            limit: int | None = None) -> Iterator[TrialMetrics]:
        """The reports of ``group`` of every trial in ``trial_ids``, trial by trial."""
        n = 0
        for trial_id in trial_ids:
            for m in Trial(self._session, trial_id).iter_metrics(group):
                if limit is not None and n >= limit:
                    return
                n += 1
                yield m

    stream_trials_metrics = iter_trials_metrics

    def compare(self, experiment_ids: Iterable[int] | None = None,
                trial_ids: Iterable[int] | None = None, best: int | None = None,
                max_points: int = 5000) -> Comparison:
        """Trials side by side (det_sdk's own; Determined 0.38's SDK has none): every
        trial of ``experiment_ids`` (or each one's ``best`` few) and ``trial_ids`` of
        any experiment, at most 50. ``.records`` is a list of dicts, one per trial, group
        and step, for ``pandas.DataFrame``; ``.differences()`` the hyperparameters and
        config fields that differ (``det_sdk.experimental._compare``)."""
        return _compare(self._session, experiment_ids, trial_ids, best, max_points)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        return Checkpoint(self._session, self._session.checkpoint(uuid))

    # the model registry
    def create_model(self, name: str, description: str | None = "",
                     metadata: dict[str, Any] | None = None) -> Model:
        row = self._session.request("POST", "/api/v1/models", json={
            "name": name, "description": description or "", "metadata": metadata or {}})
        return Model(self._session, row)

    def get_model(self, identifier: str | int) -> Model:
        return Model(self._session, self._session.request("GET",
                                                          f"/api/v1/models/{identifier}"))

    def get_model_by_id(self, model_id: int) -> Model:
        return self.get_model(model_id)

    def list_models(self, sort_by: Any = None, order_by: OrderBy = OrderBy.ASC,
                    name: str | None = None, description: str | None = None,
                    model_id: int | None = None, **_: Any) -> list[Model]:
        rows = self._session.request("GET", "/api/v1/models")["models"]
        rows = [r for r in rows if (name is None or r["name"] == name)
                and (model_id is None or r["id"] == model_id)
                and (description is None or description in r["description"])]
        if order_by == OrderBy.DESC:
            rows = rows[::-1]
        return [Model(self._session, r) for r in rows]

    get_models = list_models


_client: Determined | None = None


def login(master: str | None = None, user: str | None = None, password: str | None = None,
          cert_path: str | None = None, cert_name: str | None = None,
          noverify: bool = False) -> Determined:
    """Connect the module's functions to ``master`` (default ``DET_MASTER``); ``user`` and
    ``password``: sign in as that user (else the saved token, as the CLI's)."""
    global _client
    _client = Determined(master, user, password, cert_path, cert_name, noverify)
    return _client


def _the() -> Determined:
    # Determined logs in on first use with the defaults: so does this
    return _client if _client is not None else login()


def create_experiment(config: str | Path | dict[str, Any], model_dir: str | None = None,
                      includes: Iterable[Any] | None = None, project_id: int | None = None,
                      template: str | None = None) -> Experiment:
    return _the().create_experiment(config, model_dir, includes, project_id, template)


def get_experiment(experiment_id: int) -> Experiment:
    return _the().get_experiment(experiment_id)


def list_experiments(sort_by: Any = None, order_by: OrderBy | None = None,
                     experiment_ids: list[int] | None = None, labels: Any = None,
                     users: Any = None, states: list[ExperimentState] | None = None,
                     name: str | None = None, project_id: int | None = None
                     ) -> list[Experiment]:
    return _the().list_experiments(sort_by, order_by, experiment_ids, labels, users, states,
                                   name, project_id)


def get_trial(trial_id: int) -> Trial:
    return _the().get_trial(trial_id)


def iter_trials_metrics(trial_ids: list[int], group: str,
                        limit: int | None = None) -> Iterator[TrialMetrics]:
    return _the().iter_trials_metrics(trial_ids, group, limit)


stream_trials_metrics = iter_trials_metrics


def compare(experiment_ids: Iterable[int] | None = None, trial_ids: Iterable[int] | None = None,
            best: int | None = None, max_points: int = 5000) -> Comparison:
    """Trials side by side: ``Determined.compare`` on the logged-in master."""
    return _the().compare(experiment_ids, trial_ids, best, max_points)


def get_checkpoint(uuid: str) -> Checkpoint:
    return _the().get_checkpoint(uuid)


def create_model(name: str, description: str | None = "",
                 metadata: dict[str, Any] | None = None) -> Model:
    return _the().create_model(name, description, metadata)


def get_model(identifier: str | int) -> Model:
    return _the().get_model(identifier)


def get_model_by_id(model_id: int) -> Model:
    return _the().get_model_by_id(model_id)


def list_models(sort_by: Any = None, order_by: OrderBy = OrderBy.ASC, name: str | None = None,
                description: str | None = None, model_id: int | None = None,
                **kwargs: Any) -> list[Model]:
    return _the().list_models(sort_by, order_by, name, description, model_id, **kwargs)


get_models = list_models


def whoami() -> User:
    return _the().whoami()


def create_user(username: str, admin: bool, password: str | None = None,
                remote: bool = False) -> User:
    return _the().create_user(username, admin, password, remote)


def get_user_by_id(user_id: int) -> User:
    return _the().get_user_by_id(user_id)


def get_user_by_name(user_name: str) -> User:
    return _the().get_user_by_name(user_name)


def list_users(active: bool | None = None) -> list[User]:
    return _the().list_users(active)


def logout() -> None:
    """End the session's token on the master; the module logs in again on next use."""
    global _client
    if _client is not None:
        _client.logout()
    _client = None


def create_workspace(name: str) -> Workspace:
    return _the().create_workspace(name)


def get_workspace(name: str) -> Workspace:
    return _the().get_workspace(name)


def list_workspaces() -> list[Workspace]:
    return _the().list_workspaces()


def delete_workspace(name: str) -> None:
    _the().delete_workspace(name)
