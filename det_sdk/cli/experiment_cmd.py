"""``det experiment``: Determined's verbs with its flags and defaults
(harness/determined/cli/experiment.py of 0.38.1): what they print, where downloads go,
and a refusal naming what to use instead for what det_sdk cannot do.
"""

from __future__ import annotations

import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli import common
from det_sdk.cli.common import (
    CSV,
    DESCRIBE_LIMIT,
    ID,
    PAGES,
    QUIET,
    SORT,
    TERMINAL,
    YES,
    download_checkpoint,
    follow,
    pack_directory,
    parse_ids,
    parse_overrides,
    post,
    read_config,
    refused,
    trial_table,
    yes,
)
from det_sdk.cli.log_records_cmd import RECORD_OPTIONS, print_trial_log
from det_sdk.cli.logs_cmd import print_log
from det_sdk.cli.render import escape, page_footer, print_json, print_rows, progress_bar, table
from det_sdk.errors import UsageError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from typing import Any

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS"]


# --- listing and describing -----------------------------------------------------------------


def _all_experiments(client: Any, archived: bool | None, page: int,
                     users: list[str] | None = None) -> list[dict[str, Any]]:
    """Every experiment, oldest first (Determined's order), ``page`` a request;
    ``users``: only those these users own."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {} if archived is None else {
            "archived": str(archived).lower()}
        if users is not None:
            params["users"] = users
        out = client.page("/api/v1/experiments", min(page, 1000), cursor, **params)
        rows += out["experiments"]
        cursor = out["next_cursor"]
        if cursor is None:
            return rows[::-1]


def experiment_list(args: Namespace) -> int:
    """Determined's ``det e list``: the signed-in user's experiments (``--limit`` is the
    page size, every page fetched; ``--pages 1`` one page from ``--offset``); ``--all``:
    every user's, archived ones too (as Determined's)."""
    client = common.connect(args)
    users = None if args.all else [client.request("GET", "/api/v1/me")["user"]["username"]]
    exps = _all_experiments(client, None if args.all else False, args.limit, users)
    end = args.offset + args.limit if args.pages == "1" else None
    exps = exps[args.offset:end]
    if args.json:
        print_json(exps)
        return 0
    headers = ["ID", "Owner", "Name", "State", "Progress", "Trials"] + (
        ["Archived"] if args.all else [])
    rows = [[e["id"], e.get("username", ""), e["name"] or "", e["state"],
             f"{100 * e['progress']:.0f}%", e["num_trials"]]
            + ([e.get("archived", False)] if args.all else []) for e in exps]
    if args.show_project:  # Determined's two columns first (issue 59)
        headers = ["Workspace", "Project", *headers]
        rows = [[e.get("workspace_name", ""), e.get("project_name", ""), *r]
                for e, r in zip(exps, rows, strict=True)]
    print_rows(headers, rows, args.csv)
    return 0


def experiment_describe(args: Namespace) -> int:
    """Determined's ``det e describe 1,2``: each experiment (``--json``: a list; one id:
    its object, as det_sdk's scripts read it)."""
    ids = parse_ids(args.experiment_ids)
    if args.json:  # det_sdk's schema: one id, its object; a comma list, a list of them
        client = common.connect(args)
        got = [client.experiment(i, all_trials=args.all) for i in ids]
        print_json(got if "," in args.experiment_ids else got[0])
        return 0
    for n, exp_id in enumerate(ids):
        if n:
            print()
        _describe_one(Namespace(**{**vars(args), "id": exp_id}))
    return 0


def _describe_one(args: Namespace) -> int:
    exp = common.connect(args).experiment(args.id, all_trials=args.all)
    if args.json:
        print_json(exp)
        return 0
    searcher = (exp["config"].get("searcher") or {})
    print(f"Experiment {exp['id']} {escape(exp['name'] or '')}: {exp['state']}, "
          f"{100 * exp['progress']:.0f}% (searcher {searcher.get('name', 'single')}, "
          f"metric {searcher.get('metric', 'val_loss')})")
    if exp.get("username"):
        print(f"Owner: {escape(exp['username'])}")
    print(table(*trial_table(exp["trials"])))
    footer = page_footer(len(exp["trials"]), exp["num_trials"], "trials", newest=False)
    if footer:
        print(footer)
    for t in exp["trials"]:
        if t.get("checkpoint_note"):
            print(f"\ntrial {t['id']}: {escape(t['checkpoint_note'], multiline=True)}")
        if t["last_error"]:
            print(f"\ntrial {t['id']}: {escape(t['last_error'], multiline=True)}")
    return 0


def experiment_config(args: Namespace) -> int:
    """``det e config ID``: the experiment's config as YAML (as stored by the master)."""
    import yaml

    config = common.connect(args).experiment(args.id)["config"]
    if args.json:
        print_json(config)
    else:
        sys.stdout.write(yaml.safe_dump(config, sort_keys=False))
    return 0


def _first_trial(client: Any, exp_id: int, wait: bool = False) -> int:
    while True:
        trials = client.trials(exp_id)
        if trials:
            return min(t["id"] for t in trials)
        if not wait:
            raise UsageError(f"experiment {exp_id} has no trials")
        time.sleep(0.2)


def experiment_logs(args: Namespace) -> int:
    """Determined's ``det e logs ID``: the first trial's log (``-f``, ``--head``,
    ``--tail`` as ``det t logs``); every trial: ``det t logs`` each."""
    client = common.connect(args)
    trial_id = _first_trial(client, args.id)
    print_trial_log(client, trial_id, lambda: client.trial(trial_id)["state"], args)
    return 0


def experiment_list_trials(args: Namespace) -> int:
    trials = common.connect(args).trials(args.id)
    if args.json:
        print_json(trials)
    else:
        print_rows(*trial_table(trials), args.csv)
    return 0


def _experiment_checkpoints(client: Any, exp_id: int) -> list[dict[str, Any]]:
    out = []
    for t in client.trials(exp_id):
        out += client.checkpoints(trial_id=t["id"])
    return out


def experiment_list_checkpoints(args: Namespace) -> int:
    client = common.connect(args)
    rows = _experiment_checkpoints(client, args.id)
    if args.best is not None:
        rows = common.ranked(client, args.id, rows, None, None)[:args.best]
    else:
        rows.sort(key=lambda c: (c["trial_id"], c["steps_completed"]))
    if args.json:
        print_json(rows)
        return 0
    headers = ["Trial ID", "Batch #", "UUID", "Size", "Metrics"]
    cells = [[c["trial_id"], c["steps_completed"], c["uuid"], c["size"],
              " ".join(f"{k}={v}" for k, v in c["metrics"].items())] for c in rows]
    print_rows(headers, cells, args.csv)
    return 0


# --- creating -------------------------------------------------------------------------------


def _test_config(config: dict[str, Any]) -> dict[str, Any]:
    """Determined's test mode: one trial, one scheduling unit of batches."""
    searcher = dict(config.get("searcher") or {})
    searcher.update(name="single", max_length={"batches": int(config.get("scheduling_unit",
                                                                            100))})
    for key in ("max_trials", "time_metric", "max_time", "max_concurrent_trials"):
        searcher.pop(key, None)
    return {**config, "searcher": searcher, "max_restarts": 0}


def experiment_create(args: Namespace) -> int:
    """Determined's ``det e create CONFIG [DIR] [--config K=V] [--paused] [-t] [-f]``."""
    import tempfile

    if args.paused and args.follow_first_trial:
        raise UsageError("--paused with --follow-first-trial: a paused experiment has no "
                         "trial running to follow (activate it with `det e activate ID`)")
    raw = read_config(args.config_file, "experiment")
    raw = parse_overrides(raw, args.config)
    if args.config:  # validate what is sent, not only the file
        from det_sdk.config import parse_experiment_config

        parse_experiment_config(raw)
    if args.test_mode:
        raw = _test_config(raw)
    if args.model_def is None:
        with tempfile.TemporaryDirectory() as empty:
            archive = pack_directory(empty)
    else:
        archive = pack_directory(args.model_def)
    client = common.connect(args)
    direct = args.paused or args.project_id is not None  # fields the upload path lacks
    created = client.submit_experiment(raw, archive, progress_bar("uploading model directory"),
                                       ) if not direct else _create_paused(
        client, raw, archive, activate=not args.paused, project_id=args.project_id)
    exp_id = created["id"]
    for warning in created["warnings"]:
        print(f"warning: {escape(warning, multiline=True)}", file=sys.stderr)
    if args.json:
        print_json({"id": exp_id})
    else:
        print(f"Created {'test ' if args.test_mode else ''}experiment {exp_id}")
    if args.test_mode:
        return _run_test(client, exp_id)
    if args.follow_first_trial:
        trial_id = _first_trial(client, exp_id, wait=True)
        print(f"Following first trial with ID {trial_id}", file=sys.stderr)
        print_log(client, "trials", trial_id, lambda: client.trial(trial_id)["state"],
                  Namespace(follow=True, head=None, tail=None))
        return 0
    return 0


def _create_paused(client: Any, config: dict[str, Any], archive: bytes,
                   activate: bool = False, project_id: int | None = None) -> dict[str, Any]:
    """Determined's ``activate: false``: created PAUSED, no trial started (and
    ``--project_id``: in that project)."""
    import base64

    out = client.request("POST", "/api/v1/experiments", json={
        "config": config, "model_definition": base64.b64encode(archive).decode(),
        "activate": activate, "project_id": project_id})
    return {"id": int(out["id"]), "warnings": list(out.get("warnings") or [])}


def _run_test(client: Any, exp_id: int) -> int:
    """Follow the test experiment to its end; archived (as Determined's); exit 0 if it
    completed."""
    trial_id = _first_trial(client, exp_id, wait=True)
    final = print_log(client, "trials", trial_id, lambda: client.trial(trial_id)["state"],
                      Namespace(follow=True, head=None, tail=None))
    while client.experiment(exp_id)["state"] not in TERMINAL:
        time.sleep(0.5)
    client.request("POST", f"/api/v1/experiments/{exp_id}/archive")
    ok = client.experiment(exp_id)["state"] == "COMPLETED"
    print(f"Test experiment {exp_id}: {'passed' if ok else 'failed'} (trial {trial_id}: "
          f"{final}); archived", file=sys.stderr)
    return 0 if ok else 1


def experiment_continue(args: Namespace) -> int:
    """Determined's ``det e continue ID [--config-file F] [--config K=V] [-f]``: an ended
    experiment trains further with the same ids (its trial from its latest checkpoint),
    its config with the file's and the ``--config`` settings over it."""
    import yaml

    override: dict[str, Any] = {}
    if args.config_file is not None:
        try:
            text = Path(args.config_file).read_text()
        except OSError as err:
            raise UsageError(f"--config-file: cannot read {args.config_file}: "
                             f"{err.strerror}") from None
        loaded = yaml.safe_load(text)
        if loaded is not None and not isinstance(loaded, dict):
            raise UsageError(f"--config-file: expected a YAML mapping in {args.config_file}")
        override = loaded or {}
    override = parse_overrides(override, args.config)
    client = common.connect(args)
    out = client.request("POST", f"/api/v1/experiments/{args.id}/continue",
                         json={"override_config": override})
    if getattr(args, "json", False):
        print_json(out)
    else:
        print(f"Continued experiment {args.id}")
    if args.follow_first_trial:
        trial_id = _first_trial(client, args.id)
        print_log(client, "trials", trial_id, lambda: client.trial(trial_id)["state"],
                  Namespace(follow=True, head=None, tail=None))
    return 0


# --- lifecycle and attributes ---------------------------------------------------------------


def experiment_wait(args: Namespace) -> int:
    client = common.connect(args)

    def state() -> str:
        return client.experiment(args.id)["state"]

    if getattr(args, "logs", False):
        trials = client.trials(args.id)
        for t in trials:
            follow(client, "trials", t["id"], lambda tid=t["id"]: client.trial(tid)["state"])
    final = state()
    while final not in TERMINAL:
        time.sleep(getattr(args, "polling_interval", 0.5))
        final = state()
    print(f"experiment {args.id}: {final}", file=sys.stderr)
    if final != "COMPLETED":
        _print_trial_errors(client, args.id)
    return 0 if final == "COMPLETED" else 1


def _print_trial_errors(client: Any, exp_id: int, limit: int = 3) -> None:
    """The root cause of each failed trial (its last_error's first paragraph), to stderr."""
    failed = [t for t in client.trials(exp_id) if t["state"] == "ERROR" and t["last_error"]]
    for t in failed[:limit]:
        lead = escape(t["last_error"].split("\n\n", 1)[0], multiline=True)
        print(f"trial {t['id']}: {lead}\n  (det trial describe {t['id']} for the rest)",
              file=sys.stderr)
    if len(failed) > limit:
        print(f"... and {len(failed) - limit} more failed trials", file=sys.stderr)


def experiment_kill(args: Namespace) -> int:
    out = common.connect(args).kill_experiment(args.id)
    print(f"experiment {args.id}: {out['state']}")
    return 0


def experiment_pause(args: Namespace) -> int:
    out = common.connect(args).pause_experiment(args.id)
    note = (" (running trials checkpoint and stop; PAUSED once all have)"
            if out["state"] == "STOPPING_PAUSED" else "")
    print(f"experiment {args.id}: {out['state']}{note}")
    return 0


def experiment_activate(args: Namespace) -> int:
    out = common.connect(args).activate_experiment(args.id)
    print(f"experiment {args.id}: {out['state']}")
    return 0


def experiment_archive(args: Namespace) -> int:
    return post(args, f"/api/v1/experiments/{args.id}/archive", f"Archived experiment {args.id}")


def experiment_unarchive(args: Namespace) -> int:
    return post(args, f"/api/v1/experiments/{args.id}/unarchive",
                 f"Unarchived experiment {args.id}")


def experiment_move(args: Namespace) -> int:
    """Determined's ``det e move ID WORKSPACE PROJECT`` (issue 59)."""
    client = common.connect(args)
    project = common.project_by_name(client, args.workspace_name, args.project_name)
    client.request("POST", f"/api/v1/experiments/{args.id}/move",
                   json={"destinationProjectId": project["id"], "experimentId": args.id})
    print(f'Moved experiment {args.id} to project "{args.project_name}"')
    return 0


def experiment_cancel(args: Namespace) -> int:
    return post(args, f"/api/v1/experiments/{args.id}/cancel", f"Canceled experiment {args.id}")


def experiment_delete(args: Namespace) -> int:
    if not yes(args, "Deleting an experiment will result in the unrecoverable deletion of all "
                      "associated logs, checkpoints, and other metadata associated with the "
                      "experiment. For a recoverable alternative, see the 'det e archive' "
                      "command. Do you still wish to proceed?"):
        print("Aborting experiment deletion.")
        return 0
    common.connect(args).request("DELETE", f"/api/v1/experiments/{args.id}")
    print(f"Deleted experiment {args.id}")  # at once: Determined's is "in progress"
    return 0


def _edit(args: Namespace, **fields: Any) -> dict[str, Any]:
    return dict(common.connect(args).request("PATCH", f"/api/v1/experiments/{args.id}",
                                             json=fields))


def experiment_set_name(args: Namespace) -> int:
    _edit(args, name=args.name)
    print(f"Set name of experiment {args.id} to '{args.name}'")
    return 0


def experiment_set_description(args: Namespace) -> int:
    _edit(args, description=args.description)
    print(f"Set description of experiment {args.id} to '{args.description}'")
    return 0


def _set_resource(args: Namespace, field: str, value: Any) -> int:
    """Determined's ``det e set priority|weight|max-slots``: PATCH the experiment's
    resources (det_sdk.master.queue_admin); the queue follows at once."""
    common.connect(args).request("PATCH", f"/api/v1/experiments/{args.id}/resources",
                                 json={field: value})
    print(f"Set `{field}` of experiment {args.id} to {value}")
    return 0


def experiment_set_priority(args: Namespace) -> int:
    return _set_resource(args, "priority", args.priority)


def experiment_set_weight(args: Namespace) -> int:
    return _set_resource(args, "weight", args.weight)


def experiment_set_max_slots(args: Namespace) -> int:
    return _set_resource(args, "max_slots", args.max_slots)


def _labels(args: Namespace) -> list[str]:
    return list(common.connect(args).experiment(args.id)["config"].get("labels") or [])


def experiment_label_add(args: Namespace) -> int:
    labels = _labels(args)
    _edit(args, labels=[*labels, args.label])
    print(f"Added label '{args.label}' to experiment {args.id}")
    return 0


def experiment_label_remove(args: Namespace) -> int:
    _edit(args, labels=[x for x in _labels(args) if x != args.label])
    print(f"Removed label '{args.label}' from experiment {args.id}")
    return 0


def experiment_download(args: Namespace) -> int:
    """Determined's ``det e download ID``: the best checkpoint of each of the top-N
    trials (by --sort-by, default the searcher metric), under OUTPUT_DIR/UUID."""
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise UsageError("--sort-by and --smaller-is-better must be set together")
    client = common.connect(args)
    ranked = common.ranked(client, args.id, _experiment_checkpoints(client, args.id),
                           args.sort_by, args.smaller_is_better)
    best_per_trial: dict[int, dict[str, Any]] = {}
    for c in ranked:
        best_per_trial.setdefault(c["trial_id"], c)
    for c in list(best_per_trial.values())[:args.top_n]:
        download_checkpoint(client, c["uuid"], str(Path(args.output_dir, c["uuid"])), args.quiet)
    return 0


#: ``det experiment``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "create": (experiment_create, "submit an experiment: CONFIG [DIR]", [
        ("config_file", {"help": "experiment config file (.yaml)"}),
        ("model_def", {"nargs": "?", "help": "the directory to upload (default: none)"}),
        ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                      "help": "a config setting over the file's, e.g. "
                              "searcher.max_length.epochs=2"}),
        (("-f", "--follow-first-trial"), {"action": "store_true",
                                          "help": "follow the first trial's log"}),
        ("--paused", {"action": "store_true", "help": "do not activate the experiment"}),
        (("-t", "--test-mode"), {"action": "store_true",
                                 "help": "a one-trial run of one scheduling unit, "
                                         "followed, then archived"}),
        (("-i", "--include"), refused("det_sdk uploads one directory: put the extra "
                                       "files in the model directory", True)),
        ("--local", refused("run the script on this machine instead: python train.py "
                             "(docs/local-runs.md)")),
        ("--template", refused("det_sdk has no config templates: merge the template "
                                "into the config file", True)),
        ("--project_id", {"type": int, "metavar": "ID",
                          "help": "place this experiment inside this project"}),
        (("-p", "--publish"), refused("det_sdk does not publish task ports: a task's "
                                       "ports are on the machine it runs on", True)),
    ]),
    "continue": (experiment_continue, "train an ended single-searcher experiment's "
                 "trial further from its latest checkpoint (same ids), e.g. --config "
                 "searcher.max_length.epochs=5; a grid or random search: its unfinished "
                 "trials again", [
        ("id", {"type": int, "help": "the experiment's id (COMPLETED, CANCELED, ERROR)"}),
        ("--config-file", {"metavar": "FILE", "help": "an override config (.yaml) merged "
                                                      "over the experiment's"}),
        ("--config", {"action": "append", "default": [], "metavar": "KEY=VALUE",
                      "help": "a setting over the experiment's config, e.g. "
                              "searcher.max_length.epochs=5"}),
        (("-f", "--follow-first-trial"), {"action": "store_true",
                                          "help": "follow the continued trial's log"})]),
    "list": (experiment_list, "list your experiments (every user's and archived: --all)", [
        (("--all", "-a"), {"action": "store_true",
                           "help": "every user's experiments, archived ones too"}),
        ("--show_project", {"action": "store_true",
                            "help": "show the workspace and project of each experiment"}),
        *PAGES, CSV]),
    "describe": (experiment_describe, "trials, states and metrics: IDS (1,2,3)", [
        ("experiment_ids", {"help": "comma-separated experiment ids"}),
        ("--all", {"action": "store_true",
                   "help": f"every trial (default: the first {DESCRIBE_LIMIT})"}),
        ("--metrics", refused("det_sdk's describe shows each trial's best metric; every "
                               "report: det trial describe TRIAL_ID")),
        ("--csv", refused("det e describe --json, or det e lt ID --csv")),
        ("--outdir", refused("redirect the output: det e describe ID --json > FILE",
                              True))]),
    "config": (experiment_config, "its config (YAML)", [ID]),
    "logs": (experiment_logs, "the first trial's log (det t logs for the others)",
             [ID, *RECORD_OPTIONS]),
    "list-trials": (experiment_list_trials, "its trials", [ID, *PAGES, CSV]),
    "list-checkpoints": (experiment_list_checkpoints, "its checkpoints", [
        ID, ("--best", {"type": int, "metavar": "N",
                         "help": "the best N by the searcher metric"}), CSV]),
    "wait": (experiment_wait, "wait until it ends (exit 0 if COMPLETED)", [
        ID, ("--polling-interval", {"type": float, "default": 0.5,
                                     "help": "seconds between checks (default 0.5; "
                                             "Determined's: 5)"})]),
    "kill": (experiment_kill, "stop its trials now (CANCELED)", [("id",)]),
    "cancel": (experiment_cancel, "ask its trials to stop (CANCELED)", [ID]),
    "pause": (experiment_pause, "checkpoint and stop its trials (PAUSED)", [("id",)]),
    "activate": (experiment_activate, "continue a paused experiment", [("id",)]),
    "archive": (experiment_archive, "hide an ended experiment from `e list`", [ID]),
    "unarchive": (experiment_unarchive, "show it in `e list` again", [ID]),
    "move": (experiment_move, "move it to another project (issue 59)", [
        ID, ("workspace_name", {"help": "name of the destination workspace"}),
        ("project_name", {"help": "name of the destination project"})]),
    "delete": (experiment_delete, "delete it with its checkpoints and logs",
               [ID, YES]),
    "download": (experiment_download, "the best checkpoints of its top-N trials", [
        ID, (("-o", "--output-dir"), {"default": "checkpoints",
                                       "help": "checkpoints go to OUTPUT_DIR/UUID"}),
        ("--top-n", {"type": int, "default": 1, "help": "how many trials' best"}),
        *SORT, QUIET]),
    "set": {
        "name": (experiment_set_name, "set its name",
                 [ID, ("name", {"help": "the new name"})]),
        "description": (experiment_set_description, "set its description",
                        [ID, ("description", {"help": "the new description"})]),
        "max-slots": (experiment_set_max_slots, "the most slots its trials hold at once",
                      [ID, ("max_slots", {"type": int, "help": "the most slots"})]),
        "weight": (experiment_set_weight, "its weight in the fair share between users "
                   "(det master up --scheduler fair_share)",
                   [ID, ("weight", {"type": float, "help": "the weight (> 0)"})]),
        "priority": (experiment_set_priority, "its place in the queue: 1-99, lower first; "
                     "may preempt lower-priority trials",
                     [ID, ("priority", {"type": int, "help": "1-99, lower runs first"})]),
    },
    "label": {
        "add": (experiment_label_add, "add a label",
                [ID, ("label", {"help": "the label"})]),
        "remove": (experiment_label_remove, "remove a label",
                   [ID, ("label", {"help": "the label"})]),
    },
}
