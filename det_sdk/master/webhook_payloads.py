"""The bodies webhooks POST: Determined's JSON event (DEFAULT) and Slack's Block Kit
message (SLACK), built from an experiment's row as the master keeps it.

DEFAULT, as Determined 0.38 sends it::

    {"event_id": "<uuid>", "event_type": "EXPERIMENT_STATE_CHANGE" | "CUSTOM" | "TASK_LOG",
     "timestamp": <unix seconds>, "condition": {"state": "COMPLETED"},
     "event_data": {"experiment": {"id", "state", "name", "duration", "resource_pool",
                                   "slots_per_trial", "workspace", "project", "trial_id"?},
                    "custom_data": {"title", "description", "level"}?}}

SLACK: ``{"blocks": [...], "attachments": [{"color", "blocks": [...]}]}`` with the
status line, the experiment's name and id, its status and duration (and a custom
alert's level, title and description), as Determined words them.

>>> exp = {"id": 3, "name": "mnist", "state": "COMPLETED", "created": 0.0, "ended": 3700.0,
...        "config": {"resources": {"slots_per_trial": 1}}}
>>> event = json.loads(default_body("EXPERIMENT_STATE_CHANGE", exp, now=3700))
>>> event["condition"], event["event_data"]["experiment"]["duration"]
({'state': 'COMPLETED'}, 3700)
>>> json.loads(slack_body(exp, now=3700))["attachments"][0]["blocks"][0]["text"]["text"]
'✅ mnist (#3)'
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "custom_data",
    "default_body",
    "log_default_body",
    "log_slack_body",
    "ping_body",
    "slack_body",
]


def _experiment(exp: Mapping[str, Any], now: float, trial_id: int | None) -> dict[str, Any]:
    config = exp.get("config") or {}
    end = exp.get("ended") or now
    out: dict[str, Any] = {
        "id": exp["id"], "state": exp["state"], "name": exp.get("name") or "",
        "duration": max(0, int(end - exp.get("created", end))),
        # det_sdk has one pool and no workspaces nor projects: Determined's defaults
        "resource_pool": "default",
        "slots_per_trial": int((config.get("resources") or {}).get("slots_per_trial", 1)),
        "workspace": "", "project": "",
    }
    if trial_id:
        out["trial_id"] = trial_id
    return out


def custom_data(title: str, description: str, level: str) -> dict[str, str]:
    """A custom alert's ``custom_data`` (Determined's CustomTriggerData).

    >>> custom_data("t", "d", "INFO")
    {'title': 't', 'description': 'd', 'level': 'INFO'}
    """
    return {"title": title, "description": description, "level": level}


def default_body(event_type: str, exp: Mapping[str, Any], *, now: float | None = None,
                 custom: Mapping[str, str] | None = None, trial_id: int | None = None) -> bytes:
    """A DEFAULT webhook's body for an event of ``exp`` (its state as the condition)."""
    now = time.time() if now is None else now
    data: dict[str, Any] = {"experiment": _experiment(exp, now, trial_id)}
    if custom is not None:
        data["custom_data"] = dict(custom)
    return _json({"event_id": str(uuid.uuid4()), "event_type": event_type,
                  "timestamp": int(now), "condition": {"state": exp["state"]},
                  "event_data": data})


def ping_body(webhook_type: str, now: float | None = None) -> bytes:
    """What ``POST /api/v1/webhooks/{id}/test`` sends, as Determined: a COMPLETED
    condition with ``event_data: {"data": "test"}``, or Slack's ``test`` section.

    >>> json.loads(ping_body("SLACK"))["blocks"][0]["text"]["text"]
    'test'
    """
    if webhook_type == "SLACK":
        return _json({"blocks": [{"type": "section",
                                  "text": {"type": "plain_text", "text": "test"}}]})
    now = time.time() if now is None else now
    return _json({"event_id": str(uuid.uuid4()), "event_type": "EXPERIMENT_STATE_CHANGE",
                  "timestamp": int(now), "condition": {"state": "COMPLETED"},
                  "event_data": {"data": "test"}})


def _duration(seconds: int) -> str:
    """Determined's Slack duration.

    >>> _duration(3700)
    '1h 1min'
    """
    return f"{seconds // 3600}h {seconds % 3600 // 60}min"


def slack_body(exp: Mapping[str, Any], *, now: float | None = None,
               custom: Mapping[str, str] | None = None, trial_id: int | None = None) -> bytes:
    """A SLACK webhook's message about ``exp`` (a custom alert's fields with it)."""
    now = time.time() if now is None else now
    e = _experiment(exp, now, trial_id)
    title = f"{e['name']} (#{e['id']})"
    state = e["state"]
    if state == "COMPLETED":
        status, link, color, shown = ("Your experiment completed successfully 🎉",
                                      f"✅ {title}", "#13B670", "Completed")
    elif state == "ERROR":
        status, link, color, shown = ("Your experiment has stopped with errors",
                                      f"❌ {title}", "#DD5040", "Errored")
    else:
        status, link, color, shown = (f"The status of your experiment is {state}", title,
                                      "#009bde", state)
    fields = [{"type": "mrkdwn", "text": f"*Status*: {shown}"},
              {"type": "mrkdwn", "text": f"*Duration*: {_duration(e['duration'])}"}]
    if trial_id:
        fields.append({"type": "mrkdwn", "text": f"*Trial ID*: {trial_id}"})
    message: dict[str, Any] = {"type": "section", "text": {"type": "plain_text", "text": status}}
    if custom is not None:
        message["fields"] = [{"type": "mrkdwn", "text": f"*Level*: {custom['level']}"},
                             {"type": "mrkdwn", "text": f"*Title*: {custom['title']}"},
                             {"type": "mrkdwn",
                              "text": f"*Description*: {custom['description']}"}]
    experiment = {"type": "section", "text": {"type": "mrkdwn", "text": link}, "fields": fields}
    return _json({"blocks": [message],
                  "attachments": [{"color": color, "blocks": [experiment]}]})


def log_default_body(regex: str, task_id: str, node: str, line: str,
                     now: float | None = None) -> bytes:
    """A DEFAULT webhook's TASK_LOG event, as Determined's (``condition: {regex}``,
    ``event_data.task_log``).

    >>> json.loads(log_default_body("bo+m", "a1", "host", "boom"))["event_data"]
    {'task_log': {'task_id': 'a1', 'node_name': 'host', 'triggering_log': 'boom'}}
    """
    now = time.time() if now is None else now
    return _json({"event_id": str(uuid.uuid4()), "event_type": "TASK_LOG",
                  "timestamp": int(now), "condition": {"regex": regex},
                  "event_data": {"task_log": {"task_id": task_id, "node_name": node,
                                              "triggering_log": line}}})


def log_slack_body(exp_id: int, trial_id: int, line: str, regex: str,
                   node: str = "master") -> bytes:
    """A SLACK webhook's message about a log line that matched ``regex``, as Determined
    words it.

    >>> "matched the regex" in json.loads(log_slack_body(1, 2, "boom", "bo+m"))[
    ...     "blocks"][0]["text"]["text"]
    True
    """
    text = (f"Experiment ID `{exp_id}`, Trial ID `{trial_id}`, running on node `{node}`, "
            f"reported a log\n```{line}```\nThis log matched the regex\n```{regex}```\n")
    return _json({"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]})


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
