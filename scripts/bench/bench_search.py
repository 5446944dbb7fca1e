"""Adaptive ASHA vs grid and random search over one space: epochs trained, best metric.

Starts a real master (``det master up --slots 2``, HOME and data in a temp dir) and
runs, one experiment after another, the trial in ``scripts/bench/bench_search_model``
(a 2-hidden-layer MLP, Adam, on generated two spirals with noise features and 10%
flipped labels) over the same space, ``learning_rate`` log-uniform in 1e-4..1 and
``units`` in 8..128, with ``searcher.max_length`` of ``--max-epochs`` epochs:

    grid             --trials // 2 learning rates x 2 widths (8..128)
    random           --trials trials, experiment_seed --seed
    adaptive_asha    --trials trials, the same seed (so the same hparams and trial
                     seeds as random: the same training curves, cut short),
                     --divisor, num_rungs 3, mode aggressive
    adaptive_asha    --big-trials trials (default 2 x --trials; 0: skip), same seed

For each it prints the epochs trained (the sum over trials of steps_completed /
steps per epoch), the best searcher metric any trial reported (min val_loss over
every validation, as the master's ``best_metric``), the best trial's hparams, its
val_accuracy at that point and the epochs it trained, and the wall time from
``det experiment create`` to the end of ``det experiment wait``; then ratios
against grid and random. Epochs and metrics do not depend on the machine's load
(trials run with op determinism and fixed seeds); ASHA's decisions do depend on
the order in which results reach a rung (see ``promotes``), which on 2 slots
depends on timing, so ASHA's figures can differ between runs. Wall times are noisy
on a shared machine and include ~5 s of process and TensorFlow start-up per trial.

    .venv/bin/python scripts/bench/bench_search.py [--trials 8] [--max-epochs 8] [--seed 1]
        [--divisor 2] [--big-trials 16] [--keep]

Exit status 1 if an experiment does not complete.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.master import Cluster

MODEL_DIR = Path(__file__).parent / "bench_search_model"
TRAIN_ROWS = 3000  # scripts/bench/bench_search_model/train.py: ROWS
BATCH = 64
STEPS_PER_EPOCH = math.ceil(TRAIN_ROWS / BATCH)
METRIC = "val_loss"


@dataclass
class Result:
    """What one experiment cost and found."""

    label: str
    exp_id: int
    trials: list[dict[str, Any]]
    wall_s: float
    best_accuracy: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def epochs(self) -> float:
        return sum(t["steps_completed"] for t in self.trials) / STEPS_PER_EPOCH

    @property
    def best(self) -> dict[str, Any]:
        scored = [t for t in self.trials if t["best_metric"] is not None]
        return min(scored, key=lambda t: t["best_metric"])


def space(trials: int) -> dict[str, Any]:
    """The searched hyperparameters; grid takes ``trials // 2`` learning rates x 2 widths."""
    return {
        "learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": 0,
                          "count": max(1, trials // 2)},
        "units": {"type": "int", "minval": 8, "maxval": 128, "count": 2},
        "dropout": 0.0,
        "global_batch_size": BATCH,
    }


def run_experiment(master: Cluster, label: str, searcher: dict[str, Any], trials: int,
                   seed: int) -> Result:
    """Create one experiment, wait for it, and collect its trials."""
    config = {
        "name": f"bench-search-{label}",
        "entrypoint_script": "python3 train.py",
        "hyperparameters": space(trials),
        "searcher": {"metric": METRIC, "smaller_is_better": True, **searcher},
        "reproducibility": {"experiment_seed": seed},
        "max_restarts": 0,
    }
    path = master.root / f"{label}.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    exp_id = master.det_json("experiment", "create", str(path), str(MODEL_DIR))["id"]
    waited = master.det("experiment", "wait", str(exp_id), timeout=3600)
    wall = time.perf_counter() - start
    exp = master.det_json("experiment", "describe", str(exp_id), "--all")  # every trial
    if waited.returncode != 0 or exp["state"] != "COMPLETED":
        errors = "\n".join(f"trial {t['id']}: {t['last_error']}" for t in exp["trials"]
                           if t["last_error"])
        raise RuntimeError(f"{label}: experiment {exp_id} ended {exp['state']}\n{errors}")
    result = Result(label, exp_id, exp["trials"], wall)
    best = result.best
    metrics = master.det_json("trial", "describe", str(best["id"]))["metrics"]
    at_best = [m["metrics"] for m in metrics if m["group"] == "validation"
               and m["metrics"].get(METRIC) == best["best_metric"]]
    if at_best:
        result.best_accuracy = at_best[0].get("val_accuracy")
    for t in result.trials:
        if t["steps_completed"] % STEPS_PER_EPOCH:
            result.notes.append(f"trial {t['id']} stopped mid-epoch "
                                f"({t['steps_completed']} batches)")
    return result


def describe_hparams(hp: dict[str, Any]) -> str:
    return f"lr={hp['learning_rate']:.3g} units={hp['units']}"


def rung_summary(result: Result) -> str:
    """How many trials reported at each rung, and in what order they arrived."""
    rows = sorted((r["order"], r["rung"], t["id"], r["promoted"])
                  for t in result.trials for r in t["rungs"])
    per_rung: dict[int, list[str]] = {}
    for _order, rung, tid, promoted in rows:
        per_rung.setdefault(rung, []).append(f"{tid}{'+' if promoted else '-'}")
    return "; ".join(f"rung {rung}: {' '.join(ids)}" for rung, ids in sorted(per_rung.items()))


def sha_epochs(trials: int, max_epochs: int, divisor: int, num_rungs: int = 3) -> int:
    """Epochs synchronous successive halving would train: exactly the top 1/divisor go on.

    The rungs are the master's (``searchers.rung_lengths``: max_length / divisor^k).
    """
    ladder = sorted({max(1, math.ceil(max_epochs / divisor ** (num_rungs - 1 - k)))
                     for k in range(num_rungs)})
    total, previous, alive = 0, 0, trials
    for length in ladder:
        total += alive * (length - previous)
        previous, alive = length, max(1, alive // divisor)
    return total


def print_results(results: list[Result], max_epochs: int, divisor: int) -> None:
    print()
    print(f"{'searcher':<16} {'trials':>6} {'epochs':>7} {'best val_loss':>13} "
          f"{'val_acc':>7} {'best trial (epochs)':<32} {'wall s':>7}")
    for r in results:
        b = r.best
        acc = f"{r.best_accuracy:.3f}" if r.best_accuracy is not None else "-"
        trial = f"{describe_hparams(b['hparams'])} ({b['steps_completed'] / STEPS_PER_EPOCH:g})"
        print(f"{r.label:<16} {len(r.trials):>6} {r.epochs:>7g} {b['best_metric']:>13.4f} "
              f"{acc:>7} {trial:<32} {r.wall_s:>7.1f}")
    print(f"(full budget: {max_epochs} epochs per trial; {STEPS_PER_EPOCH} batches per epoch)")
    for r in results:
        if r.label.startswith("asha"):
            print(f"{r.label} decisions, in arrival order (trial id, +: promoted): "
                  f"{rung_summary(r)}")
            print(f"{r.label}: {r.epochs:g} epochs; synchronous successive halving (exactly "
                  f"the top 1/{divisor} of each rung) would train "
                  f"{sha_epochs(len(r.trials), max_epochs, divisor)}")
        for note in r.notes:
            print(f"{r.label}: {note}")
    by = {r.label: r for r in results}
    print()
    for ref in ("grid", "random"):
        if ref not in by:
            continue
        for r in results:
            if r.label == ref or r.label == "grid":
                continue
            print(f"{r.label} / {ref}: epochs {r.epochs / by[ref].epochs:.3f}, "
                  f"best val_loss {r.best['best_metric'] / by[ref].best['best_metric']:.3f}, "
                  f"wall {r.wall_s / by[ref].wall_s:.2f}")
    if "random" in by:
        # same seed: ASHA's trial i has random's trial i's hparams and seed
        rand = by["random"]
        rank = sorted(range(len(rand.trials)), key=lambda i: rand.trials[i]["best_metric"])
        for r in results:
            if not r.label.startswith("asha"):
                continue
            reached = [r.trials[i]["steps_completed"] / STEPS_PER_EPOCH
                       for i in rank if i < len(r.trials)]
            print(f"{r.label}: epochs given to random's trials from best to worst: "
                  f"{' '.join(f'{e:g}' for e in reached)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="trials of grid, random, asha")
    parser.add_argument("--big-trials", type=int, default=None,
                        help="trials of the second ASHA run (default 2 x --trials; 0: none)")
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--divisor", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (master data)")
    args = parser.parse_args()
    big = 2 * args.trials if args.big_trials is None else args.big_trials
    length = {"epochs": args.max_epochs}
    asha = {"name": "adaptive_asha", "max_length": length, "divisor": args.divisor,
            "num_rungs": 3, "mode": "aggressive"}
    runs: list[tuple[str, dict[str, Any]]] = [
        ("grid", {"name": "grid", "max_length": length}),
        ("random", {"name": "random", "max_length": length, "max_trials": args.trials}),
        (f"asha-{args.trials}", {**asha, "max_trials": args.trials}),
    ]
    if big:
        runs.append((f"asha-{big}", {**asha, "max_trials": big}))

    root = Path(tempfile.mkdtemp(prefix="bench-search-"))
    master = Cluster(root, args.slots)
    results: list[Result] = []
    try:
        master.up()
        print(f"master {master.url}, data in {root}; {args.slots} slots, "
              f"max_length {args.max_epochs} epochs, seed {args.seed}", flush=True)
        for label, searcher in runs:
            result = run_experiment(master, label, searcher, args.trials, args.seed)
            results.append(result)
            print(f"{label}: experiment {result.exp_id}, {len(result.trials)} trials, "
                  f"{result.epochs:g} epochs, best {METRIC} {result.best['best_metric']:.4f}, "
                  f"{result.wall_s:.1f} s", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"bench_search: {err}", file=sys.stderr)
        return 1
    finally:
        master.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print_results(results, args.max_epochs, args.divisor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
