"""``det trial``: a trial's state, metrics, log, checkpoints and files
(Determined's harness/determined/cli/trial.py of 0.38.1, with det_sdk's ``files``)."""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import (
    FILES_DIR,
    METRICS_LIMIT,
    QUIET,
    SORT,
    TRIAL,
    download_checkpoint,
    files_download,
    num,
    post,
    refused,
    trial_table,
)
from det_sdk.cli.log_records_cmd import RECORD_OPTIONS, print_trial_log
from det_sdk.cli.render import escape, print_json, table
from det_sdk.errors import UsageError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS"]


def trial_describe(args: Namespace) -> int:
    client = common.connect(args)
    t = client.trial(args.id)
    limit = None if args.all else METRICS_LIMIT
    metrics = client.trial_metrics(args.id, limit=limit)
    # several fits in the script (det_sdk.stages): each stage's series after the default's
    stages = t.get("stages") or []
    staged = len(stages) > 1 or any(s["name"] != "fit" for s in stages)
    for s in stages:
        if s["name"] != "fit":
            metrics += client.trial_metrics(args.id, limit=limit, stage=s["name"])
    if args.json:
        print_json({**t, "metrics": metrics})
        return 0
    print(table(*trial_table([t])))
    if staged:
        print()
        print(table(["STAGE", "STATE", "SEARCHED", "BATCHES", "EPOCHS", "BEST",
                     "LAST CHECKPOINT"],
                    [[s["name"], s["state"], "yes" if s["searched"] else "",
                      s["steps_completed"], s["epoch"],
                      num(s["best_metric"]) if s["best_metric"] is not None else "",
                      s["latest_checkpoint"] or ""] for s in stages]))
    rows = [([m.get("stage") or "fit"] if staged else []) + [
        m["group"], m["steps_completed"], m["epoch"],
        " ".join(f"{k}={num(v)}" for k, v in m["metrics"].items())] for m in metrics]
    if rows:
        print()
        print(table((["STAGE"] if staged else []) + ["GROUP", "BATCHES", "EPOCH", "METRICS"],
                    rows))
        if not args.all and len(metrics) >= METRICS_LIMIT:
            print(f"showing the first {len(metrics)} metric reports; --all for everything")
    if t.get("checkpoint_note"):
        print(f"\n{escape(t['checkpoint_note'], multiline=True)}")
    if t["last_error"]:
        print(f"\n{escape(t['last_error'], multiline=True)}")
    return 0


def trial_logs(args: Namespace) -> int:
    """Determined's ``det t logs ID [-f] [--head N | --tail N]`` with its filters
    (``det_sdk.cli.log_records_cmd``): exit 0 when the log ends (its state is
    ``det t describe``'s)."""
    client = common.connect(args)
    print_trial_log(client, args.trial_id, lambda: client.trial(args.trial_id)["state"], args)
    return 0


def trial_download(args: Namespace) -> int:
    """Determined's ``det t download ID --best|--latest|--uuid U [-o DIR]``: a
    checkpoint of the trial (the working directory's files: ``det trial files``)."""
    if [args.latest, args.best, args.uuid is not None].count(True) != 1:
        raise UsageError("exactly one of --latest, --best, or --uuid must be set")
    if args.sort_by is not None and not args.best:
        raise UsageError("--sort-by and --smaller-is-better flags can only be used with --best")
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise UsageError("--sort-by and --smaller-is-better must be set together")
    client = common.connect(args)
    if args.uuid is not None:
        uuid = args.uuid
    elif args.latest:
        uuid = client.trial_checkpoint(args.trial_id)["uuid"]
    elif args.sort_by is None:
        uuid = client.trial_checkpoint(args.trial_id, best=True)["uuid"]
    else:
        trial = client.trial(args.trial_id)
        ranked = common.ranked(client, trial["experiment_id"],
                               client.checkpoints(trial_id=args.trial_id), args.sort_by,
                               args.smaller_is_better)
        if not ranked:
            raise UsageError(f"no checkpoint of trial {args.trial_id} has validation metric "
                             f"{args.sort_by!r}")
        uuid = ranked[0]["uuid"]
    download_checkpoint(client, uuid, args.output_dir, args.quiet)
    return 0


def trial_files(args: Namespace) -> int:
    return files_download(args, "trials")


def trial_kill(args: Namespace) -> int:
    return post(args, f"/api/v1/trials/{args.trial_id}/kill", f"Killed trial {args.trial_id}")


#: ``det trial``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "describe": (trial_describe, "state and metrics of a trial",
                 [("id",), ("--all", {"action": "store_true",
                                      "help": "every metric report (default: the first "
                                              f"{METRICS_LIMIT})"}),
                  ("--metrics", refused("det_sdk's describe always shows the metric "
                                         "reports (the first 1000; --all for every one)")),
                  ("--metrics-summary", refused("det t describe shows each report; "
                                                 "--json for a script")),
                  ("--csv", refused("det t describe ID --json"))]),
    "logs": (trial_logs, "a trial's log", [TRIAL, *RECORD_OPTIONS]),
    "download": (trial_download, "a checkpoint of the trial (--best, --latest, --uuid)",
                 [TRIAL, ("--best", {"action": "store_true"}),
                  ("--latest", {"action": "store_true"}), ("--uuid", {}),
                  (("-o", "--output-dir"), {"help": "default: checkpoints/UUID"}),
                  *SORT, QUIET]),
    "files": (trial_files, "det_sdk's: copy the files the trial wrote into its working "
              "directory into DIR (kept when it ended)", [("id",), FILES_DIR]),
    "kill": (trial_kill, "stop this trial now (CANCELED); the others go on", [TRIAL]),
}
