"""Determined's ``det experiment`` / ``det trial`` / ``det checkpoint`` verbs with its flags
and defaults (harness/determined/cli/experiment.py, trial.py, checkpoint.py of 0.38.1):
what they print, where downloads go, and a refusal naming what to use instead for what
det_sdk cannot do.

>>> parse_overrides({"a": {"b": 1}}, ["a.c=2", "d=x"])
{'a': {'b': 1, 'c': 2}, 'd': 'x'}
"""

from __future__ import annotations

import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli.logs_cmd import print_log
from det_sdk.cli.render import escape, print_json, print_rows
from det_sdk.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["parse_ids", "parse_overrides"]

ENDED = ("COMPLETED", "CANCELED", "ERROR")


def _client(args: Namespace) -> Any:
    from det_sdk.cli.tasks import _client as client

    return client(args)


def parse_ids(text: str, what: str = "experiment") -> list[int]:
    """Determined's comma-separated ids: ``1,2,3``.

    >>> parse_ids("1,2")
    [1, 2]
    """
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"{what} ids: expected whole numbers separated by commas (1,2,3), "
                         f"got {text!r}") from None
    if any(i < 0 for i in ids):
        raise UsageError(f"{what} ids: expected ids of 0 or more, got {text!r}")
    return ids


def parse_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Determined's ``--config key.sub=value`` (the value read as YAML) applied to a
    config."""
    import yaml

    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE, e.g. "
                             "--config resources.slots_per_trial=2")
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = yaml.safe_load(value)
    return config


# --- listing and describing -----------------------------------------------------------------


def _all_experiments(client: Any, archived: bool | None, page: int) -> list[dict[str, Any]]:
    """Every experiment, oldest first (Determined's order), ``page`` a request."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {} if archived is None else {"archived": str(archived).lower()}
        out = client.page("/api/v1/experiments", min(page, 1000), cursor, **params)
        rows += out["experiments"]
        cursor = out["next_cursor"]
        if cursor is None:
            return rows[::-1]


def experiment_list(args: Namespace) -> int:
    """Determined's ``det e list``: every experiment (``--limit`` is the page size, every
    page fetched; ``--pages 1`` one page from ``--offset``), archived ones with ``--all``."""
    exps = _all_experiments(_client(args), None if args.all else False, args.limit)
    end = args.offset + args.limit if args.pages == "1" else None
    exps = exps[args.offset:end]
    if args.json:
        print_json(exps)
        return 0
    headers = ["ID", "Name", "State", "Progress", "Trials"] + (["Archived"] if args.all else [])
    rows = [[e["id"], e["name"] or "", e["state"], f"{100 * e['progress']:.0f}%",
             e["num_trials"]] + ([e.get("archived", False)] if args.all else []) for e in exps]
    print_rows(headers, rows, args.csv)
    return 0


def experiment_describe(args: Namespace) -> int:
    """Determined's ``det e describe 1,2``: each experiment (``--json``: a list; one id:
    its object, as det_sdk's scripts read it)."""
    from det_sdk.cli.tasks import experiment_describe as describe_one

    ids = parse_ids(args.experiment_ids)
    if args.json:  # det_sdk's schema: one id, its object; a comma list, a list of them
        client = _client(args)
        got = [client.experiment(i, all_trials=args.all) for i in ids]
        print_json(got if "," in args.experiment_ids else got[0])
        return 0
    for n, exp_id in enumerate(ids):
        if n:
            print()
        describe_one(Namespace(**{**vars(args), "id": exp_id}))
    return 0


def experiment_config(args: Namespace) -> int:
    """``det e config ID``: the experiment's config as YAML (as stored by the master)."""
    import yaml

    config = _client(args).experiment(args.id)["config"]
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
    client = _client(args)
    trial_id = _first_trial(client, args.id)
    print_log(client, "trials", trial_id, lambda: client.trial(trial_id)["state"], args)
    return 0


def experiment_list_trials(args: Namespace) -> int:
    from det_sdk.cli.tasks import _TRIAL_HEADERS, _trial_rows

    trials = _client(args).trials(args.id)
    if args.json:
        print_json(trials)
    else:
        print_rows(_TRIAL_HEADERS, _trial_rows(trials), args.csv)
    return 0


def _experiment_checkpoints(client: Any, exp_id: int) -> list[dict[str, Any]]:
    out = []
    for t in client.trials(exp_id):
        out += client.checkpoints(trial_id=t["id"])
    return out


def _ranked(client: Any, exp_id: int, checkpoints: list[dict[str, Any]],
            metric: str | None, smaller: bool | None) -> list[dict[str, Any]]:
    """Checkpoints with a validation ``metric`` (default: the searcher's), best first."""
    if metric is None:
        searcher = client.experiment(exp_id)["config"].get("searcher") or {}
        metric = searcher.get("metric", "val_loss")
        smaller = searcher.get("smaller_is_better", True)
    scored = [c for c in checkpoints
              if isinstance((c.get("metrics") or {}).get(metric), (int, float))]
    return sorted(scored, key=lambda c: c["metrics"][metric], reverse=not smaller)


def experiment_list_checkpoints(args: Namespace) -> int:
    client = _client(args)
    rows = _experiment_checkpoints(client, args.id)
    if args.best is not None:
        rows = _ranked(client, args.id, rows, None, None)[:args.best]
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

    from det_sdk.cli.render import progress_bar
    from det_sdk.cli.tasks import _pack, _read_config

    if args.paused and args.follow_first_trial:
        raise UsageError("--paused with --follow-first-trial: a paused experiment has no "
                         "trial running to follow (activate it with `det e activate ID`)")
    raw = _read_config(args.config_file, "experiment")
    raw = parse_overrides(raw, args.config)
    if args.config:  # validate what is sent, not only the file
        from det_sdk.config import parse_experiment_config

        parse_experiment_config(raw)
    if args.test_mode:
        raw = _test_config(raw)
    if args.model_def is None:
        with tempfile.TemporaryDirectory() as empty:
            archive = _pack(empty)
    else:
        archive = _pack(args.model_def)
    client = _client(args)
    created = client.submit_experiment(raw, archive, progress_bar("uploading model directory"),
                                       ) if not args.paused else _create_paused(client, raw,
                                                                                archive)
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


def _create_paused(client: Any, config: dict[str, Any], archive: bytes) -> dict[str, Any]:
    """Determined's ``activate: false``: created PAUSED, no trial started."""
    import base64

    out = client.request("POST", "/api/v1/experiments", json={
        "config": config, "model_definition": base64.b64encode(archive).decode(),
        "activate": False})
    return {"id": int(out["id"]), "warnings": list(out.get("warnings") or [])}


def _run_test(client: Any, exp_id: int) -> int:
    """Follow the test experiment to its end; archived (as Determined's); exit 0 if it
    completed."""
    trial_id = _first_trial(client, exp_id, wait=True)
    final = print_log(client, "trials", trial_id, lambda: client.trial(trial_id)["state"],
                      Namespace(follow=True, head=None, tail=None))
    while client.experiment(exp_id)["state"] not in ENDED:
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
    client = _client(args)
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


def _post(args: Namespace, path: str, message: str) -> int:
    _client(args).request("POST", path)
    print(message)
    return 0


def experiment_archive(args: Namespace) -> int:
    return _post(args, f"/api/v1/experiments/{args.id}/archive", f"Archived experiment {args.id}")


def experiment_unarchive(args: Namespace) -> int:
    return _post(args, f"/api/v1/experiments/{args.id}/unarchive",
                 f"Unarchived experiment {args.id}")


def experiment_cancel(args: Namespace) -> int:
    return _post(args, f"/api/v1/experiments/{args.id}/cancel", f"Canceled experiment {args.id}")


def experiment_kill(args: Namespace) -> int:
    return _post(args, f"/api/v1/experiments/{args.id}/kill", f"Killed experiment {args.id}")


def _yes(args: Namespace, question: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("this asks for confirmation and stdin is not a terminal: add --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def experiment_delete(args: Namespace) -> int:
    if not _yes(args, "Deleting an experiment will result in the unrecoverable deletion of all "
                      "associated logs, checkpoints, and other metadata associated with the "
                      "experiment. For a recoverable alternative, see the 'det e archive' "
                      "command. Do you still wish to proceed?"):
        print("Aborting experiment deletion.")
        return 0
    _client(args).request("DELETE", f"/api/v1/experiments/{args.id}")
    print(f"Deleted experiment {args.id}")  # at once: Determined's is "in progress"
    return 0


def _edit(args: Namespace, **fields: Any) -> dict[str, Any]:
    return dict(_client(args).request("PATCH", f"/api/v1/experiments/{args.id}", json=fields))


def experiment_set_name(args: Namespace) -> int:
    _edit(args, name=args.name)
    print(f"Set name of experiment {args.id} to '{args.name}'")
    return 0


def experiment_set_description(args: Namespace) -> int:
    _edit(args, description=args.description)
    print(f"Set description of experiment {args.id} to '{args.description}'")
    return 0


def _labels(args: Namespace) -> list[str]:
    return list(_client(args).experiment(args.id)["config"].get("labels") or [])


def experiment_label_add(args: Namespace) -> int:
    labels = _labels(args)
    _edit(args, labels=[*labels, args.label])
    print(f"Added label '{args.label}' to experiment {args.id}")
    return 0


def experiment_label_remove(args: Namespace) -> int:
    _edit(args, labels=[x for x in _labels(args) if x != args.label])
    print(f"Removed label '{args.label}' from experiment {args.id}")
    return 0


# --- downloads ------------------------------------------------------------------------------


def _download(client: Any, uuid: str, output_dir: str | None, quiet: bool) -> Path:
    """A checkpoint where Determined puts it: ``output_dir``, or ``checkpoints/UUID``."""
    from det_sdk.cli.tasks import _download as stream_into

    dest = stream_into(lambda f: client.download_checkpoint_to(uuid, f), f"checkpoint {uuid}",
                       output_dir if output_dir is not None else str(Path("checkpoints", uuid)))
    print(dest if quiet else f"Local checkpoint path: {dest}")
    return dest


def checkpoint_download(args: Namespace) -> int:
    _download(_client(args), args.uuid, args.output_dir, args.quiet)
    return 0


def checkpoint_describe(args: Namespace) -> int:
    c = _client(args).checkpoint(args.uuid)
    if args.json:
        print_json(c)
        return 0
    for key in ("uuid", "trial_id", "steps_completed", "epoch", "size", "path"):
        print(f"{key}: {c.get(key)}")
    print("metrics: " + " ".join(f"{k}={v}" for k, v in (c.get("metrics") or {}).items()))
    return 0


def checkpoint_delete(args: Namespace) -> int:
    if not _yes(args, "Deleting checkpoints will result in deletion of all data associated "
                      "with each checkpoint in the checkpoint storage. Do you still want to "
                      "proceed?"):
        print("Stopping deletion of checkpoints.")
        return 0
    uuids = [u for u in args.checkpoints_uuids.split(",") if u]
    _client(args).request("DELETE", "/api/v1/checkpoints", json={"uuids": uuids})
    print(f"Deleted checkpoints {args.checkpoints_uuids}")
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
    client = _client(args)
    if args.uuid is not None:
        uuid = args.uuid
    elif args.latest:
        uuid = client.trial_checkpoint(args.trial_id)["uuid"]
    elif args.sort_by is None:
        uuid = client.trial_checkpoint(args.trial_id, best=True)["uuid"]
    else:
        trial = client.trial(args.trial_id)
        ranked = _ranked(client, trial["experiment_id"],
                         client.checkpoints(trial_id=args.trial_id), args.sort_by,
                         args.smaller_is_better)
        if not ranked:
            raise UsageError(f"no checkpoint of trial {args.trial_id} has validation metric "
                             f"{args.sort_by!r}")
        uuid = ranked[0]["uuid"]
    _download(client, uuid, args.output_dir, args.quiet)
    return 0


def experiment_download(args: Namespace) -> int:
    """Determined's ``det e download ID``: the best checkpoint of each of the top-N
    trials (by --sort-by, default the searcher metric), under OUTPUT_DIR/UUID."""
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise UsageError("--sort-by and --smaller-is-better must be set together")
    client = _client(args)
    ranked = _ranked(client, args.id, _experiment_checkpoints(client, args.id), args.sort_by,
                     args.smaller_is_better)
    best_per_trial: dict[int, dict[str, Any]] = {}
    for c in ranked:
        best_per_trial.setdefault(c["trial_id"], c)
    for c in list(best_per_trial.values())[:args.top_n]:
        _download(client, c["uuid"], str(Path(args.output_dir, c["uuid"])), args.quiet)
    return 0


def trial_kill(args: Namespace) -> int:
    return _post(args, f"/api/v1/trials/{args.trial_id}/kill", f"Killed trial {args.trial_id}")


def trial_logs(args: Namespace) -> int:
    """Determined's ``det t logs ID [-f] [--head N | --tail N]``: exit 0 when the log
    ends (its state is ``det t describe``'s)."""
    client = _client(args)
    print_log(client, "trials", args.trial_id, lambda: client.trial(args.trial_id)["state"],
              args)
    return 0


def bool_text(text: str) -> bool:
    """Determined's ``(true|false)`` flag values."""
    import argparse

    lowered = text.lower()
    if lowered in ("true", "t", "yes", "y", "1", "on"):
        return True
    if lowered in ("false", "f", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
