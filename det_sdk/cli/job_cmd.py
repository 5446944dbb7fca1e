"""``det job``: the scheduler's queue (Determined's ``det job list``), and det_sdk's generic
jobs (batch inference): run, follow, describe, pause, activate, kill, download their files.

>>> job_progress_text(0.5)
'50.0%'
"""

from __future__ import annotations

import sys
from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import (
    ALL,
    CSV,
    FILES_DIR,
    LIMIT,
    LIST_LIMIT,
    files_download,
    follow,
    newest,
    pack_directory,
    positive_int,
    print_logs,
    read_config,
    refused,
)
from det_sdk.cli.render import escape, page_footer, print_json, print_rows, progress_bar, table

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from typing import Any

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS", "JOB_HEADERS", "job_describe_lines", "job_progress_text", "job_rows"]


def job_queue(args: Namespace) -> int:
    """Determined's ``det job list``: the scheduler's queue in the order it runs
    (priority, then submission time); ID as ``det job update`` takes it."""
    import datetime

    jobs = common.connect(args).request("GET", "/api/v1/job-queue")["jobs"]
    jobs = jobs[args.offset:args.offset + args.limit] if args.pages == "1" \
        else jobs[args.offset:]
    if args.reverse:
        jobs = jobs[::-1]
    if args.json:
        print_json(jobs)
        return 0
    if args.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(jobs, sort_keys=False))
        return 0
    headers = ["#", "ID", "Type", "Job Name", "Priority", "Submitted",
               "Slots (acquired/needed)", "Status"]
    rows = [[n, j["job_id"], j["type"], j["name"] or "", j["priority"],
             datetime.datetime.fromtimestamp(j["submitted"]).strftime("%Y-%m-%d %H:%M:%S"),
             f"{j['acquired']}/{j['needed']}", j["state"]] for n, j in enumerate(jobs)]
    print_rows(headers, rows, args.csv)
    return 0


def job_update(args: Namespace) -> int:
    """Determined's ``det job update ID --priority N``: ID as ``det job list`` shows it
    (``experiment-3``, ``job-5``) or an experiment's number."""
    if args.priority is None:
        raise common.UsageError("det job update: --priority N is required (det_sdk's queue "
                                "orders by priority; --weight: det e set weight)")
    kind, _, number = args.job_id.strip().rpartition("-")
    if kind not in ("", "experiment", "job") or not number.isdigit():
        raise common.UsageError(f"job id: expected experiment-N or job-N (as `det job list` "
                                f"shows it) or an experiment's number, got {args.job_id!r}")
    client = common.connect(args)
    if kind == "job":
        client.request("POST", f"/api/v1/jobs/{number}/priority",
                       json={"priority": args.priority})
    else:
        client.request("PATCH", f"/api/v1/experiments/{number}/resources",
                       json={"priority": args.priority})
    print(f"Set priority of {kind or 'experiment'} {number} to {args.priority}")
    return 0


def job_run(args: Namespace) -> int:
    config = read_config(args.config, "job")
    archive = pack_directory(args.model_dir)
    client = common.connect(args)
    job_id = client.create_job(config, archive, progress_bar("uploading directory"))
    print(f"Created job {job_id}")
    if args.follow:
        final = follow(client, "jobs", job_id, lambda: client.job(job_id)["state"])
        print(f"job {job_id}: {final}", file=sys.stderr)
        return 0 if final == "COMPLETED" else 1
    return 0


def job_progress_text(progress: float | None) -> str:
    """A job's progress in a table: ``42.0%``; ``-`` while its total is unknown.

    >>> job_progress_text(0.4204), job_progress_text(None)
    ('42.0%', '-')
    """
    return "-" if progress is None else f"{100 * progress:.1f}%"


def _duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def job_rows(jobs: list[dict[str, Any]]) -> list[list[Any]]:
    """``det job list``'s rows (summaries of GET /api/v1/jobs)."""
    return [[j["id"], j["name"] or "", j["state"], job_progress_text(j.get("progress")),
             j["exit_code"], j["entrypoint"], j.get("username", "")] for j in jobs]


JOB_HEADERS = ["ID", "NAME", "STATE", "PROGRESS", "EXIT", "ENTRYPOINT", "OWNER"]


def job_batches(args: Namespace) -> int:
    jobs, total = newest(common.connect(args), "/api/v1/jobs", "jobs", args)
    if args.json:
        print_json(jobs)
        return 0
    print(table(JOB_HEADERS, job_rows(jobs)))
    footer = page_footer(len(jobs), total, "jobs")
    if footer:
        print(footer)
    return 0


def job_logs(args: Namespace) -> int:
    return print_logs(args, "jobs")


def job_describe_lines(j: dict[str, Any]) -> list[str]:
    """``det job describe``: one ``field: value`` line each (GET /api/v1/jobs/{id})."""
    rows = "-" if j.get("rows_done") is None else (
        f"{j['rows_done']} of {j['rows_total'] if j.get('rows_total') is not None else '?'}")
    rate = j.get("rows_per_second")
    return [f"job {j['id']}" + (f" ({j['name']})" if j.get("name") else ""),
            f"  state:     {j['state']}" + (f" (exit code {j['exit_code']})"
                                            if j.get("exit_code") else ""),
            f"  progress:  {job_progress_text(j.get('progress'))}",
            f"  rows:      {rows}",
            f"  rows/s:    {'-' if rate is None else f'{rate:.4g}'}",
            f"  time left: {_duration(j.get('eta_seconds'))}",
            f"  output:    {j.get('output') or '-'}",
            f"  restarts:  {j.get('restarts', 0)} of "
            f"{(j.get('config') or {}).get('max_restarts', 0)}",
            *([f"  owner:     {j['username']}"] if j.get("username") else []),
            # the job script's report_metrics: each group's latest report
            *(f"  {escape(group)}: " + ", ".join(f"{escape(k)}={_metric_text(v)}"
                                         for k, v in m["metrics"].items())
              + f" (step {m['steps_completed']})"
              for group, m in (j.get("latest_metrics") or {}).items())]


def _metric_text(v: Any) -> str:
    """A metric as the describe line shows it: 4 significant digits; NaN and the
    infinities as the wire's strings.

    >>> _metric_text(0.123456), _metric_text("NaN"), _metric_text(3)
    ('0.1235', 'NaN', '3')
    """
    return f"{v:.4g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def job_describe(args: Namespace) -> int:
    j = common.connect(args).job(args.id)
    if args.json:
        print_json(j)
        return 0
    # what the job and its script sent (a name, an output path) may hold control characters
    print("\n".join(escape(line) for line in job_describe_lines(j)))
    return 0


def _job_command(args: Namespace, command: str, notes: dict[str, str]) -> int:
    out = common.connect(args).job_command(args.id, command)
    if args.json:
        print_json(out)
        return 0
    print(f"job {args.id}: {out['state']}{notes.get(out['state'], '')}")
    return 0


def job_pause(args: Namespace) -> int:
    return _job_command(args, "pause", {"STOPPING_PAUSED": " (it stops at its next progress "
                                        "checkpoint; PAUSED once it has)"})


def job_activate(args: Namespace) -> int:
    return _job_command(args, "activate", {"STOPPING_PAUSED": " (still stopping: it runs "
                                           "again once stopped)"})


def job_kill(args: Namespace) -> int:
    return _job_command(args, "kill", {"STOPPING_CANCELED": " (its process is being "
                                       "stopped; CANCELED once it has exited)"})


def job_download(args: Namespace) -> int:
    return files_download(args, "jobs")


#: ``det job``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "list": (job_queue, "the scheduler's queue: experiments and batch jobs waiting "
             "for or holding slots", [
                 (("-p", "--resource-pool"), refused("det_sdk has one pool of slots",
                                                      True)),
                 ("--limit", {"type": positive_int, "default": 100, "metavar": "N",
                              "help": "rows per page (every page unless --pages 1)"}),
                 ("--offset", {"type": int, "default": 0, "help": "rows to skip"}),
                 ("--pages", {"choices": ["all", "1"], "default": "all"}),
                 ("--reverse", {"action": "store_true", "help": "the last first"}),
                 ("--yaml", {"action": "store_true"}), ("--table", {"action": "store_true",
                                                                   "help": "the default"}),
                 CSV]),
    "update": (job_update, "change a job's priority: ID (as `det job list` shows it) "
               "--priority N", [
                   ("job_id", {"help": "experiment-N, job-N, or an experiment's number"}),
                   (("-p", "--priority"), {"type": int, "help": "1-99, lower runs first"}),
                   (("-w", "--weight"), refused("det e set weight ID W sets an experiment's "
                                                "weight", True)),
                   ("--resource-pool", refused("det_sdk has one pool of slots", True))]),
    "run": (job_run, "det_sdk's: run a generic job (batch inference): CONFIG DIR",
            [("config",), ("model_dir",), ("--follow",)]),
    "batches": (job_batches, f"det_sdk's: list the newest batch jobs ({LIST_LIMIT}; --all)",
                [LIMIT, ALL]),
    "logs": (job_logs, "a job's logs", [("id",), ("--follow",)]),
    "describe": (job_describe, "state, progress (rows, rows/s, time left), output and "
                 "restarts of a job", [("id",)]),
    "pause": (job_pause, "stop it at its next progress checkpoint (PAUSED)",
              [("id",)]),
    "activate": (job_activate, "run a paused job again, from its progress",
                 [("id",)]),
    "kill": (job_kill, "stop its process (CANCELED)", [("id",)]),
    "download": (job_download, "copy the files the job wrote into its working "
                 "directory (e.g. predictions) into DIR", [("id",), FILES_DIR]),
}
