"""Determined's webhooks on det_sdk's master: what they are, which events fire them, and
what each delivery became.

A webhook (``POST /api/v1/webhooks``, ``det webhook create``) has a name, a URL, a kind
(``DEFAULT``: Determined's signed JSON event; ``SLACK``: a Slack message), a mode and
triggers:

- ``EXPERIMENT_STATE_CHANGE`` with ``{"state": S}``: an experiment reaches S (COMPLETED,
  ERROR, CANCELED, PAUSED, ACTIVE, STOPPING_...): :meth:`Webhooks.experiment_state`,
  called by the lifecycle where states change;
- ``CUSTOM``: a trial's script calls ``core_context.alert(...)`` (``POST
  /api/v1/webhooks/custom``): :meth:`Webhooks.custom`;
- ``TASK_LOG`` with ``{"regex": R}``: a trial logs a line RE2's ``R`` matches, once per
  trial and trigger (det_sdk.master.webhook_logs, which reads the trials' logs).

Which experiments a webhook hears, as Determined decides without workspaces: mode
``WORKSPACE`` (the default): every experiment; ``SPECIFIC``: those whose config names it
(``integrations.webhooks.webhook_id`` or ``webhook_name``); an experiment with
``integrations.webhooks.exclude: true`` fires none. A custom alert, as in Determined,
goes only to the webhooks its experiment's config names.

Each webhook has a signing key the master makes at creation and answers once, in the
create's answer; it is never listed nor logged. URLs must be http or https (the
master runs on a team's machine: no ``file:``, ``gopher:`` or other scheme reaches
it); private and loopback addresses are allowed, as receivers on the team's network are
what webhooks are for (docs/webhooks.md).

Deliveries (det_sdk.master.webhook_delivery) are recorded in the master's database,
QUEUED, SENDING, then DELIVERED or FAILED with the last status or error
(``GET /api/v1/webhooks/deliveries``, ``det webhook deliveries``), each unfinished one
with its body: a restarted master resumes what the stopped one left unsent, its retries
counted on (an attempt cut short by the stop may be sent again: at least once).

>>> check_url("file:///etc/passwd")
Traceback (most recent call last):
...
det_sdk.master.errors.InvalidRequest: url: 'file' is not allowed (http:// or https:// only)
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from det_sdk.api import ExperimentState
from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.store.database import Database
from det_sdk.master.store.webhooks import WebhookTables
from det_sdk.master.webhook_delivery import Deliverer, Job, post_once, signed_headers
from det_sdk.master.webhook_logs import LogWatcher, Running, compile_regex
from det_sdk.master.webhook_payloads import (
    custom_data,
    default_body,
    log_default_body,
    log_slack_body,
    ping_body,
    slack_body,
)

__all__ = ["LEVELS", "MODES", "TRIGGER_TYPES", "WEBHOOK_TYPES", "Webhooks", "check_url",
           "short"]

log = logging.getLogger("det_sdk.master.webhooks")

WEBHOOK_TYPES = ("DEFAULT", "SLACK")
MODES = ("WORKSPACE", "SPECIFIC")
#: the triggers det_sdk fires (Determined's METRIC_THRESHOLD_EXCEEDED is fired by nothing
#: in Determined either)
TRIGGER_TYPES = ("EXPERIMENT_STATE_CHANGE", "CUSTOM", "TASK_LOG")
#: a custom alert's levels (Determined's LogLevel names, LOG_LEVEL_ prefix optional)
LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_PREFIXES = {"webhook_type": "WEBHOOK_TYPE_", "mode": "WEBHOOK_MODE_",
             "trigger_type": "TRIGGER_TYPE_", "state": "STATE_", "level": "LOG_LEVEL_"}
MAX_URL = 2048
MAX_NAME = 128
MAX_TRIGGERS = 50
MAX_TEXT = 10_000


def short(field: str, value: str) -> str:
    """A Determined enum value without its proto prefix (``WEBHOOK_TYPE_SLACK`` and
    ``SLACK`` are the same).

    >>> short("trigger_type", "TRIGGER_TYPE_CUSTOM"), short("level", "warn")
    ('CUSTOM', 'WARN')
    """
    value = str(value).upper()
    prefix = _PREFIXES[field]
    return value[len(prefix):] if value.startswith(prefix) else value


def proto(field: str, value: str) -> str:
    """The proto spelling Determined's API answers with.

    >>> proto("webhook_type", "SLACK")
    'WEBHOOK_TYPE_SLACK'
    """
    return _PREFIXES[field] + value


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: expected one of {', '.join(choices)}, got {value!r}")
    v = short(field.rsplit(".", 1)[-1].split("[")[0], value)
    if v not in choices:
        raise InvalidRequest(f"{field}: expected one of {', '.join(choices)}, got {value!r}")
    return v


def check_url(url: Any) -> str:
    """``url`` if a webhook may POST to it: http(s), a host, no whitespace or control
    characters, at most :data:`MAX_URL` characters; :class:`InvalidRequest` naming what
    is wrong otherwise.

    >>> check_url("http://127.0.0.1:8000/hook")
    'http://127.0.0.1:8000/hook'
    """
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url:
        raise InvalidRequest("url: expected an http:// or https:// URL")
    if len(url) > MAX_URL:
        raise InvalidRequest(f"url: {len(url)} characters, at most {MAX_URL}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InvalidRequest("url: contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError as err:
        raise InvalidRequest(f"url: not a URL ({err})") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidRequest(f"url: {parts.scheme!r} is not allowed (http:// or https:// "
                             "only)")
    if not parts.hostname:
        raise InvalidRequest("url: no host (expected e.g. https://hooks.example.com/path)")
    return url


def _text(field: str, value: Any, limit: int, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidRequest(f"{field}: expected a {'non-empty ' if required else ''}string")
    if len(value) > limit:
        raise InvalidRequest(f"{field}: {len(value)} characters, at most {limit}")
    if required and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidRequest(f"{field}: contains control characters")
    return value


def _triggers(raw: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("triggers: expected a non-empty list of {trigger_type, condition}")
    if len(raw) > MAX_TRIGGERS:
        raise InvalidRequest(f"triggers: {len(raw)} triggers, at most {MAX_TRIGGERS}")
    out = []
    for i, t in enumerate(raw):
        where = f"triggers[{i}]"
        if not isinstance(t, Mapping):
            raise InvalidRequest(f"{where}: expected an object {{trigger_type, condition}}")
        unknown = set(t) - {"trigger_type", "condition", "id", "webhook_id"}
        if unknown:
            raise InvalidRequest(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        kind = _choice(f"{where}.trigger_type", t.get("trigger_type"), TRIGGER_TYPES)
        cond = t.get("condition") or {}
        if not isinstance(cond, Mapping):
            raise InvalidRequest(f"{where}.condition: expected an object")
        if kind == "EXPERIMENT_STATE_CHANGE":
            states = tuple(s.value for s in ExperimentState)
            if set(cond) != {"state"}:
                raise InvalidRequest(f"{where}.condition: expected {{\"state\": S}}, S one of "
                                     f"{', '.join(states)}")
            cond = {"state": _choice(f"{where}.condition.state", cond["state"], states)}
        elif kind == "TASK_LOG":
            if set(cond) != {"regex"}:
                raise InvalidRequest(f"{where}.condition: expected {{\"regex\": R}} (RE2)")
            compile_regex(cond["regex"], f"{where}.condition.regex")
            cond = {"regex": cond["regex"]}
        else:
            cond = {}  # a custom trigger has no condition
        out.append((kind, cond))
    return out


def _public(hook: Mapping[str, Any]) -> dict[str, Any]:
    """A webhook as Determined's API answers it (proto enum names), without its key."""
    return {"id": hook["id"], "name": hook["name"], "url": hook["url"],
            "webhook_type": proto("webhook_type", hook["webhook_type"]),
            "mode": proto("mode", hook["mode"]), "workspace_id": hook.get("workspace_id") or 0,
            "triggers": [{"id": t["id"], "webhook_id": hook["id"],
                          "trigger_type": proto("trigger_type", t["trigger_type"]),
                          "condition": t["condition"]} for t in hook["triggers"]]}


class Webhooks:
    """The master's webhooks over ``db`` (the master's :class:`Store`). ``deliverer``
    options (``attempts``, ``backoff``, ``timeout``...) bound the deliveries."""

    def __init__(self, db: Database,
                 workspace_of: Callable[[Mapping[str, Any]], int | None] = lambda exp: None,
                 workspace_exists: Callable[[int], bool] = lambda ws: False,
                 **deliverer: Any) -> None:
        self.tables = WebhookTables(db)
        # where an experiment belongs, and which workspaces exist (the master's
        # workspaces, issue 59): a webhook of a workspace hears only its experiments
        self.workspace_of = workspace_of
        self.workspace_exists = workspace_exists
        self.deliverer = Deliverer(self._record, **deliverer)
        self._cache: list[dict[str, Any]] | None = None  # with keys: read on every event
        self._cache_lock = threading.Lock()
        self._regexes: dict[int, Any] = {}  # TASK_LOG trigger id -> its compiled regex
        self.logs: LogWatcher | None = None
        self._experiment: Callable[[int], Mapping[str, Any] | None] = lambda e: None

    def watch_logs(self, running: Callable[[], Iterable[Running]],
                   experiment: Callable[[int], Mapping[str, Any] | None]) -> None:
        """Fire TASK_LOG triggers on the logs of ``running()``'s trials (read from
        :meth:`start` on); ``experiment(id)``: an experiment's row (its config)."""
        self.logs = LogWatcher(self._log_triggers, running, self._log_matched)
        self._experiment = experiment

    def trial_ended(self, trial: Running) -> None:
        """A trial ended: the rest of its log is matched too."""
        if self.logs is not None:
            self.logs.trial_ended(trial)

    def start(self) -> None:
        """Resume what a previous master left unsent (its attempts counted so far), mark
        what it left without a body FAILED; start the workers."""
        self._resume()
        left = self.tables.fail_unfinished("the master stopped before it was delivered")
        if left:
            log.info("webhooks: %d delivery(ies) left by the previous master marked failed",
                     left)
        self.deliverer.start()
        if self.logs is not None:
            self.logs.start()

    def stop(self) -> None:
        if self.logs is not None:
            self.logs.stop()
        self.deliverer.stop()

    # --- the API ----------------------------------------------------------------------------

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A webhook from Determined's ``Webhook`` message; the answer holds its
        ``signing_key``, shown this once."""
        unknown = set(body) - {"name", "url", "webhook_type", "triggers", "mode",
                               "workspace_id", "id"}
        if unknown:
            raise InvalidRequest(f"unknown field(s) {', '.join(sorted(unknown))}")
        name = _text("name", body.get("name"), MAX_NAME, required=True)
        url = check_url(body.get("url"))
        kind = _choice("webhook_type", body.get("webhook_type"), WEBHOOK_TYPES)
        mode = _choice("mode", body.get("mode") or "WORKSPACE", MODES)
        workspace = self._workspace(body.get("workspace_id"))
        triggers = _triggers(body.get("triggers"))
        key = secrets.token_hex(32)
        try:
            wid = self.tables.create_webhook(name, url, kind, mode, key, triggers, workspace)
        except sqlite3.IntegrityError:
            raise Conflict(f"name: a webhook named {name!r} exists already") from None
        self._forget()
        hook = self.tables.webhook(wid)
        assert hook is not None  # just created
        log.info("webhook %d (%s) created", wid, name)
        return {**_public(hook), "signing_key": key}

    def _workspace(self, raw: Any) -> int | None:
        """A new webhook's ``workspace_id``: None (0 or absent) hears every workspace's
        experiments, as Determined's global webhooks; else a workspace that exists."""
        if raw in (None, 0) and not isinstance(raw, bool):
            return None
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise InvalidRequest(f"workspace_id: a workspace's id (or 0: every workspace) "
                                 f"is expected, got {raw!r}")
        if not self.workspace_exists(raw):
            raise InvalidRequest(f"workspace_id: there is no workspace {raw}")
        return raw

    def listed(self) -> list[dict[str, Any]]:
        """Every webhook as Determined's API answers it (never its signing key)."""
        return [_public(h) for h in self.tables.webhooks()]

    def get(self, webhook_id: int) -> dict[str, Any]:
        hook = self.tables.webhook(webhook_id)
        if hook is None:
            raise NotFound(f"no webhook {webhook_id}")
        return _public(hook)

    def delete(self, webhook_id: int) -> None:
        if not self.tables.delete_webhook(webhook_id):
            raise NotFound(f"no webhook {webhook_id}")
        self._forget()
        log.info("webhook %d deleted", webhook_id)

    def set_url(self, webhook_id: int, url: Any) -> None:
        """Determined's PatchWebhook: a new URL, checked as at creation."""
        if not self.tables.set_webhook_url(webhook_id, check_url(url)):
            raise NotFound(f"no webhook {webhook_id}")
        self._forget()

    def deliveries(self, webhook_id: int | None, limit: int) -> list[dict[str, Any]]:
        if webhook_id is not None:
            self.get(webhook_id)
        return self.tables.deliveries(webhook_id, limit)

    def test(self, webhook_id: int) -> bool:
        """Determined's TestWebhook: one test event sent now (one bounded attempt, in the
        caller's thread), recorded as a TEST delivery; whether it was answered 2xx."""
        hook = self.tables.webhook(webhook_id, with_key=True)
        if hook is None:
            raise NotFound(f"no webhook {webhook_id}")
        body = ping_body(hook["webhook_type"])
        did = self.tables.add_delivery(webhook_id, str(uuid.uuid4()), "TEST", None)
        status, error = post_once(hook["url"], body, signed_headers(hook["signing_key"], body),
                                  self.deliverer.timeout)
        ok = status is not None and 200 <= status < 300
        if status is not None and not ok:
            error = f"answered {status}"
        self._record(did, "DELIVERED" if ok else "FAILED", 1, status, error)
        return ok

    # --- events -----------------------------------------------------------------------------

    def experiment_state(self, exp: Mapping[str, Any]) -> None:
        """Experiment ``exp`` (its row, ``state`` the new one) changed state: queue the
        events of the webhooks that hear it. Called under the master's lock: reads a
        cache, writes one row per delivery, never waits on a network; never raises (a
        webhook's trouble must not stop a state change)."""
        try:
            self._state_events(exp)
        except Exception:
            log.exception("webhooks: the events of experiment %s's state %s were lost",
                          exp.get("id"), exp.get("state"))

    def _state_events(self, exp: Mapping[str, Any]) -> None:
        config = _webhooks_config(exp)
        workspace = self.workspace_of(exp)
        for hook in self._hooks():
            if not _hears(hook, config, workspace):
                continue
            for t in hook["triggers"]:
                if t["trigger_type"] == "EXPERIMENT_STATE_CHANGE" and \
                        t["condition"].get("state") == exp["state"]:
                    self._queue(hook, "EXPERIMENT_STATE_CHANGE", exp)
                    break  # one event per webhook and change, whatever its triggers

    def custom(self, exp: Mapping[str, Any], trial_id: int | None, title: Any,
               description: Any, level: Any) -> int:
        """A script's alert (``core_context.alert``): queued to each webhook with a CUSTOM
        trigger that ``exp``'s config names (as Determined); how many."""
        data = custom_data(_text("data.title", title, MAX_TEXT),
                           _text("data.description", description, MAX_TEXT),
                           _choice("data.level", level or "INFO", LEVELS))
        config = _webhooks_config(exp)
        if config.get("exclude"):
            return 0
        ids = set(config.get("webhook_id") or [])
        names = set(config.get("webhook_name") or [])
        workspace = self.workspace_of(exp)
        sent = 0
        for hook in self._hooks():
            named = (hook["id"] in ids or hook["name"] in names) and \
                _in_scope(hook, workspace)
            if named and any(t["trigger_type"] == "CUSTOM" for t in hook["triggers"]):
                self._queue(hook, "CUSTOM", exp, custom=data, trial_id=trial_id)
                sent += 1
        return sent

    def _log_triggers(self) -> list[tuple[dict[str, Any], Any]]:
        """Each TASK_LOG trigger (with its ``hook``) and its compiled regex."""
        out = []
        for hook in self._hooks():
            for t in hook["triggers"]:
                if t["trigger_type"] == "TASK_LOG":
                    rx = self._regexes.get(t["id"])
                    if rx is None:
                        rx = self._regexes[t["id"]] = compile_regex(t["condition"]["regex"])
                    out.append(({**t, "hook": hook}, rx))
        return out

    def _log_matched(self, trial_id: int, exp_id: int, task_id: str, line: str,
                     trigger: dict[str, Any]) -> None:
        """A line of trial ``trial_id`` matched ``trigger``: its webhook's event, if the
        webhook hears the experiment."""
        import socket

        hook, regex = trigger["hook"], trigger["condition"]["regex"]
        exp = self._experiment(exp_id)
        if exp is None or not _hears(hook, _webhooks_config(exp), self.workspace_of(exp)):
            return
        node = socket.gethostname()
        body = (log_slack_body(exp_id, trial_id, line, regex, node)
                if hook["webhook_type"] == "SLACK"
                else log_default_body(regex, task_id or f"trial {trial_id}", node, line))
        self._queue(hook, "TASK_LOG", exp, body=body)

    def _queue(self, hook: Mapping[str, Any], event_type: str, exp: Mapping[str, Any],
               custom: Mapping[str, str] | None = None, trial_id: int | None = None,
               body: bytes | None = None) -> None:
        if body is not None:
            pass  # built by the caller (a log line's event)
        elif hook["webhook_type"] == "SLACK":
            body = slack_body(exp, custom=custom, trial_id=trial_id)
        else:
            body = default_body(event_type, exp, custom=custom, trial_id=trial_id)
        event_id = json.loads(body).get("event_id") or str(uuid.uuid4())
        did = self.tables.add_delivery(hook["id"], event_id, event_type, exp["id"], body=body)
        job = Job(did, hook["url"], body, hook["signing_key"], f"{hook['id']} ({hook['name']})")
        if not self.deliverer.submit(job):
            log.warning("webhook %s: delivery %d dropped: %d deliveries wait already",
                        job.label, did, self.deliverer.capacity)
            self._record(did, "FAILED", 0, None, "dropped: the master's webhook queue was "
                         f"full ({self.deliverer.capacity} waiting)")

    def _resume(self) -> None:
        """Queue again each delivery a previous master left QUEUED or SENDING, to its
        webhook's URL and key as they are now. An attempt under way when that master
        stopped was not counted: its event may arrive twice (at least once, never lost;
        the body's ``event_id`` is the same both times)."""
        hooks = {h["id"]: h for h in self._hooks()}
        resumed = 0
        for d in self.tables.unfinished():
            hook = hooks.get(d["webhook_id"])
            if hook is None:  # its webhook is gone (deleted under an older master)
                self._record(d["id"], "FAILED", d["attempts"], None, "the webhook was deleted")
                continue
            job = Job(d["id"], hook["url"], d["body"], hook["signing_key"],
                      f"{hook['id']} ({hook['name']})", attempts=d["attempts"])
            if not self.deliverer.submit(job):
                self._record(d["id"], "FAILED", d["attempts"], None, "dropped: the master's "
                             f"webhook queue was full ({self.deliverer.capacity} waiting)")
                continue
            resumed += 1
        if resumed:
            log.info("webhooks: %d delivery(ies) left by the previous master resumed", resumed)

    def _record(self, delivery_id: int, state: str, attempts: int, status: int | None,
                error: str | None) -> None:
        self.tables.update_delivery(delivery_id, state, attempts, status, error)

    def _hooks(self) -> list[dict[str, Any]]:
        with self._cache_lock:
            if self._cache is None:
                self._cache = self.tables.webhooks(with_key=True)
            return self._cache

    def _forget(self) -> None:
        with self._cache_lock:
            self._cache = None


def _webhooks_config(exp: Mapping[str, Any]) -> dict[str, Any]:
    """The experiment config's ``integrations.webhooks`` ({} when none)."""
    config = exp.get("config") or {}
    integrations = config.get("integrations") or {}
    return dict(integrations.get("webhooks") or {})


def _in_scope(hook: Mapping[str, Any], workspace: int | None) -> bool:
    """Whether an experiment of ``workspace`` is within ``hook``'s: a webhook of a
    workspace hears that workspace's experiments only; one without, every workspace's.

    >>> _in_scope({"workspace_id": 2}, 2), _in_scope({"workspace_id": 2}, 1)
    (True, False)
    >>> _in_scope({"workspace_id": None}, 1)
    True
    """
    scope = hook.get("workspace_id")
    return not scope or scope == workspace


def _hears(hook: Mapping[str, Any], config: Mapping[str, Any],
           workspace: int | None = None) -> bool:
    """Whether ``hook`` hears an experiment of ``workspace`` with this
    ``integrations.webhooks`` config (Determined's matchWebhook).

    >>> hook = {"id": 1, "name": "ops", "mode": "SPECIFIC"}
    >>> _hears(hook, {}), _hears(hook, {"webhook_name": ["ops"]})
    (False, True)
    >>> _hears({**hook, "mode": "WORKSPACE"}, {"exclude": True})
    False
    >>> _hears({**hook, "mode": "WORKSPACE", "workspace_id": 2}, {}, workspace=1)
    False
    """
    if config.get("exclude") or not _in_scope(hook, workspace):
        return False
    if hook["mode"] == "SPECIFIC":
        return hook["id"] in (config.get("webhook_id") or []) or \
            hook["name"] in (config.get("webhook_name") or [])
    return True

