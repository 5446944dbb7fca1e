"""``det webhook create/list/delete/test/deliveries``: the master's webhooks
(det_sdk.master.webhooks).

Determined 0.38 has no ``det webhook`` command (its web UI and its REST API,
``/api/v1/webhooks``, manage them); these verbs call that same API. ``create`` prints
the webhook's signing key once: the master never shows it again.

>>> sorted(COMMANDS)
['create', 'delete', 'deliveries', 'list', 'test']
"""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.render import escape, print_json, table
from det_sdk.errors import UsageError

# `det --help` builds this command table: typing (4 ms) only for the type checker
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["COMMANDS"]

#: the experiment states a trigger may name (det_sdk.api.ExperimentState)
STATES = ("ACTIVE", "PAUSED", "STOPPING_PAUSED", "STOPPING_CANCELED", "CANCELED",
          "COMPLETED", "ERROR")


def _bare(value: str, prefix: str) -> str:
    """Determined's enum name without its proto prefix.

    >>> _bare("WEBHOOK_TYPE_SLACK", "WEBHOOK_TYPE_")
    'SLACK'
    """
    return value[len(prefix):] if value.startswith(prefix) else value


def _trigger_text(t: dict[str, Any]) -> str:
    kind = _bare(t["trigger_type"], "TRIGGER_TYPE_")
    condition = t.get("condition") or {}
    value = condition.get("state") or condition.get("regex")
    return f"{kind}:{value}" if value else kind


def webhook_create(args: Namespace) -> int:
    triggers: list[dict[str, Any]] = [
        {"trigger_type": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", "condition": {"state": s}}
        for s in dict.fromkeys(s.upper() for s in args.state or [])]
    if args.custom:
        triggers.append({"trigger_type": "TRIGGER_TYPE_CUSTOM", "condition": {}})
    triggers += [{"trigger_type": "TRIGGER_TYPE_TASK_LOG", "condition": {"regex": r}}
                 for r in args.log_regex or []]
    if not triggers:
        raise UsageError("no trigger: give --state STATE (e.g. --state COMPLETED --state "
                         "ERROR), --custom (core_context.alert) and/or --log-regex REGEX")
    body = {"name": args.name, "url": args.url,
            "webhook_type": f"WEBHOOK_TYPE_{args.type.upper()}",
            "mode": f"WEBHOOK_MODE_{args.mode.upper()}", "triggers": triggers}
    client = common.connect(args)
    if args.workspace:
        body["workspace_id"] = common.workspace_by_name(client, args.workspace)["id"]
    hook = client.request("POST", "/api/v1/webhooks", json=body)["webhook"]
    if args.json:
        print_json(hook)
        return 0
    print(escape(f"Created webhook {hook['id']} ({hook['name']})"))
    print("Its signing key (X-Determined-AI-Signature: HMAC-SHA256 of 'TIMESTAMP,BODY'), "
          "shown only now:")
    print(hook["signing_key"])
    return 0


def webhook_list(args: Namespace) -> int:
    hooks = common.connect(args).request("GET", "/api/v1/webhooks")["webhooks"]
    if args.json:
        print_json(hooks)
        return 0
    print(table(["ID", "NAME", "TYPE", "MODE", "WORKSPACE", "TRIGGERS", "URL"],
                [[h["id"], h["name"], _bare(h["webhook_type"], "WEBHOOK_TYPE_"),
                  _bare(h["mode"], "WEBHOOK_MODE_"), h.get("workspace_id") or "(all)",
                  ",".join(_trigger_text(t) for t in h["triggers"]), h["url"]]
                 for h in hooks]))
    return 0


def webhook_delete(args: Namespace) -> int:
    common.connect(args).request("DELETE", f"/api/v1/webhooks/{args.id}")
    if args.json:
        print_json({"id": args.id, "deleted": True})
    else:
        print(f"Deleted webhook {args.id}")
    return 0


def webhook_test(args: Namespace) -> int:
    """Send a test event now; exit 1 unless the receiver answered 2xx."""
    done = common.connect(args).request("POST", f"/api/v1/webhooks/{args.id}/test")
    if args.json:
        print_json(done)
    else:
        print(f"webhook {args.id}: " + ("delivered" if done["completed"] else
                                        "failed (det webhook deliveries says why)"))
    return 0 if done["completed"] else 1


def webhook_deliveries(args: Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.webhook is not None:
        params["webhook_id"] = args.webhook
    rows = common.connect(args).request("GET", "/api/v1/webhooks/deliveries",
                                        params=params)["deliveries"]
    if args.json:
        print_json(rows)
        return 0
    print(table(["ID", "WEBHOOK", "EVENT", "EXPERIMENT", "STATE", "ATTEMPTS", "STATUS",
                 "ERROR"],
                [[d["id"], d["webhook_id"], d["event_type"], d["experiment_id"], d["state"],
                  d["attempts"], d["status_code"], d["error"]] for d in rows[::-1]]))
    return 0


_ID = ("id", {"type": int, "help": "the webhook's id"})
#: ``det webhook``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, tuple[Callable[[Namespace], int], str, list[tuple[Any, ...]]]] = {
    "create": (webhook_create, "create a webhook (its signing key is printed once)",
               [("name", {"help": "the webhook's name (unique)"}),
                ("url", {"help": "where events are POSTed (http:// or https://)"}),
                ("--type", {"default": "default", "choices": ["default", "slack"],
                            "type": str.lower,
                            "help": "default: Determined's signed JSON event; slack: a "
                                    "Slack message (an incoming-webhook URL)"}),
                ("--state", {"action": "append", "metavar": "STATE", "type": str.upper,
                             "choices": STATES,
                             "help": "fire when an experiment reaches STATE (repeatable)"}),
                ("--custom", {"action": "store_true",
                              "help": "fire on a script's core_context.alert(...) (its "
                                      "experiment's config names the webhook under "
                                      "integrations.webhooks)"}),
                ("--log-regex", {"action": "append", "metavar": "REGEX",
                                 "help": "fire once per trial when it logs a line this RE2 "
                                         "regex matches (repeatable)"}),
                ("--mode", {"default": "workspace", "choices": ["workspace", "specific"],
                            "type": str.lower,
                            "help": "workspace: every experiment (of --workspace if "
                                    "given); specific: only those whose config names it "
                                    "(integrations.webhooks)"}),
                ("--workspace", {"metavar": "NAME",
                                 "help": "hear only this workspace's experiments "
                                         "(default: every workspace's)"})]),
    "list": (webhook_list, "the master's webhooks (never their signing keys)", []),
    "delete": (webhook_delete, "delete a webhook (and its deliveries' records)", [_ID]),
    "test": (webhook_test, "send a test event now; exit 1 unless it was answered 2xx",
             [_ID]),
    "deliveries": (webhook_deliveries, "the newest deliveries and what became of them",
                   [("--webhook", {"type": int, "help": "only this webhook's"}),
                    ("--limit", {"type": int, "default": 100,
                                 "help": "how many (at most 1000)"})]),
}
