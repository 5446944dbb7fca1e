"""Pause-to-exit and activate-to-first-batch latency against one checkpoint save + restore.

Starts a real master (``det master up --slots 1``, HOME and data in a temp dir) and,
per repetition, runs one experiment of ``scripts/bench/bench_pause_model`` (a Dense stack
of about ``--params`` parameters, Adam, generated MNIST-shaped data, ``context.fit``
with a length far beyond the run):

1. create; wait until the trial has trained for ``--train-s`` seconds;
2. pause (``POST /api/v1/experiments/{id}/pause``) and wait until the trial is PAUSED;
3. reference, while no trial runs: one checkpoint save + one restore of the same
   model in this process through det_sdk's code (``SharedFSStorage.store()`` +
   ``save_checkpoint``, as a trial saves; ``restore_state`` into a freshly compiled
   model, as a resumed trial restores; median of ``--ref-reps``), and the wall time
   of ``python -c pass`` and ``python -c "import tensorflow"`` (and of the latter's
   teardown: from its last line to its end);
4. activate (``POST .../activate``) and wait for the resumed trial's first batch;
5. kill the experiment and wait until it is CANCELED.

The trial stamps ``time.time()`` at points of its life (see
``scripts/bench/bench_pause_model/train.py``); the master records when it spawned and
when it saw the end of each trial process (``allocations.started``/``ended``), and
the trial's shell writes its exit-code file the moment Python is gone (its mtime).
From these:

    P  pause-to-exit = pause request -> master records the trial process's exit
       (it sets the trial PAUSED in the same call)
    T  teardown = the trial's last atexit handler -> its process gone: interpreter and
       TensorFlow shutdown after all of Python's work, which any ending TensorFlow
       process pays (measured on the same process)
    A  activate-to-first-batch = activate request -> first batch end of the resumed process
    N  new-process cost = the resumed process's own spawn -> context.fit called
       (sh, python, import tensorflow, init, model and data; measured on itself)
       + the trial's first (fresh) process's context.fit called -> first batch end
       (fit set-up, tracing, first step: what any new process's fit pays)
    F  fresh start = spawn -> first batch end of the trial's first process (information)
    S  save + restore = the reference above

    raw ratio           (P + A) / S              the issue's target: <= --max-ratio (1.5)
    attributable ratio  ((P - T) + scheduling + restore) / S

Every term of the attributable ratio is an interval measured on one process (or by
the master for it): ``P - T`` is the pause request to that trial process's last
atexit handler plus the master's notice; scheduling and restore are the resumed
process's. An earlier version used ``A - N``, a difference of two processes' start-up
stages, which carried both processes' noise and went negative; it is still printed,
as information only.

A pause/resume cycle does one save and one restore, so S is what it must cost at
least. The attributable latencies leave out what starting and ending a Python +
TensorFlow process costs whatever the reason; what is left (scheduling, long-poll,
the batch in flight, save, report delivery, restore, resuming the data pipeline
mid-epoch) is what pausing and resuming add. A - N is the master's scheduling plus
the difference of the fit stages of the resumed and the fresh process, so it also
carries their noise. Both ratios are printed per side (P / S, A / S) as well, and
P and A stage by stage (the resumed process's stages beside the fresh one's).
Pause and activate go through the HTTP API so that the CLI's own start-up (``det``
~0.1-0.3 s) is not counted.

    .venv/bin/python scripts/bench/bench_pause.py [--reps 3] [--params 200000]
        [--train-s 1.5] [--max-ratio 1.5] [--keep]

``--keep`` keeps the temp dir: stamps, the master's data and logs, ``rows.json``.

Exit status 1 when the median raw ratio exceeds ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import det_sdk

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.master import Cluster

MODEL_DIR = Path(__file__).parent / "bench_pause_model"


# --- the master -----------------------------------------------------------------------


class Master(Cluster):
    """Our master, plus its database and an HTTP client."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, slots=1)
        self.client: Any = None

    def up(self) -> None:
        from det_sdk.client import MasterClient

        super().up()
        self.client = MasterClient(self.url, self.token)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        super().stop()

    def query(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        """Rows of the master's database, read-only (polling it does not load the master)."""
        uri = f"file:{self.data_dir / 'master.db'}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, args).fetchall()]

    def allocations(self, trial_id: int) -> list[dict[str, Any]]:
        """The trial's allocations (processes), oldest first."""
        return self.query("SELECT * FROM allocations WHERE trial_id = ? ORDER BY started",
                          trial_id)

    def state(self, table: str, row_id: int) -> str:
        return self.query(f"SELECT state FROM {table} WHERE id = ?", row_id)[0]["state"]

    def create(self, config: Path) -> tuple[int, int]:
        """`det experiment create`: (experiment id, its trial's id)."""
        out = self.det("experiment", "create", str(config), str(MODEL_DIR), "--json")
        if out.returncode != 0:
            raise RuntimeError(f"det experiment create failed: {out.stdout}{out.stderr}")
        exp_id = json.loads(out.stdout)["id"]
        return exp_id, self.client.experiment(exp_id)["trials"][0]["id"]


def wait_for(what: str, ready: Callable[[], Any], timeout: float, every: float = 0.05) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def read_stamps(stamps_dir: Path, alloc_id: str) -> dict[str, Any]:
    """``name -> time`` (first occurrence) of one trial process, plus the atexit extras."""
    path = stamps_dir / f"{alloc_id}.jsonl"
    out: dict[str, Any] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            s = json.loads(line)
            out.setdefault(s["name"], s["t"])
            if s["name"] == "atexit":
                out["batch_s"], out["batches"] = s.get("batch_s"), s.get("batches")
            if s["name"] == "fit_unwound":
                out["threads"] = s.get("threads") or []
                out["gc_s"] = s.get("gc_s") or 0.0
    return out


def exit_time(alloc: dict[str, Any]) -> float:
    """When the trial's shell wrote the exit code file, right after Python ended."""
    return (Path(alloc["workdir"]).parent / f"{alloc['id']}.exit_code").stat().st_mtime


# --- the reference: one save + one restore in this process ----------------------------


@functools.cache
def trained_model(params: int) -> tuple[Any, Any, Callable[[int], Any]]:
    """(model trained one step, inputs, build_model) of the trial's model, built once."""
    sys.path.insert(0, str(MODEL_DIR))
    from model import build_model, make_data  # type: ignore[import-not-found]

    x, y = make_data(256)
    model = build_model(params)
    model.train_on_batch(x[:64], y[:64])  # Adam's slots exist, as in a training trial
    return model, x, build_model


def reference(params: int, reps: int, where: Path) -> tuple[float, float]:
    """Median (save, restore) seconds of the trial's model through det_sdk's checkpoint code."""
    from det_sdk.keras import _checkpoint
    from det_sdk.storage import SharedFSStorage

    model, x, build_model = trained_model(params)
    storage = SharedFSStorage(where)
    saves, restores = [], []
    for i in range(reps + 1):  # the first is a warm-up
        fresh = build_model(params)  # a new process's model: compiled, optimizer not built
        t0 = time.perf_counter()
        with storage.store() as (uuid, path):
            _checkpoint.save_checkpoint(path, model, [model.optimizer],
                                        {"epoch": 0, "batch": 1, "steps_completed": 1},
                                        plain_optimizer=model.optimizer)
        t1 = time.perf_counter()
        _checkpoint.restore_state(storage.path(uuid), fresh, [fresh.optimizer])
        t2 = time.perf_counter()
        if i:
            saves.append(t1 - t0)
            restores.append(t2 - t1)
        want = model(x[:8], training=False).numpy()
        assert (fresh(x[:8], training=False).numpy() == want).all(), "restore differs"
        storage.delete(uuid)
        del fresh
    return statistics.median(saves), statistics.median(restores)


def wall(code: str) -> tuple[float, float]:
    """Wall seconds of ``python -c code``, and from its last output line (a time) to its end."""
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    t1 = time.time()
    last = out.stdout.split()[-1] if out.stdout.split() else None
    return t1 - t0, (t1 - float(last)) if last else float("nan")


# --- one repetition ---------------------------------------------------------------------

THREADS: set[str] = set()  # non-daemon threads alive in paused trials when fit had returned


def one_rep(m: Master, i: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    stamps_dir = root / f"stamps-{i}"
    cfg = {
        "name": f"bench-pause-{i}",
        "entrypoint_script": "python3 train.py",
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 1000}},
        # no periodic checkpoint: the only save is the pause's
        "min_checkpoint_period": {"epochs": 1000},
        "max_restarts": 0,
        "data": {"stamps_dir": str(stamps_dir), "params": args.params,
                 "samples": args.samples, "batch_size": args.batch_size},
    }
    config = root / f"bench-pause-{i}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    exp_id, trial_id = m.create(config)

    def process(n: int) -> dict[str, Any] | None:
        allocs = m.allocations(trial_id)
        return allocs[n] if len(allocs) > n else None

    # 1. train a while
    first = wait_for("the trial's first process", lambda: process(0), 300)
    def first_batch() -> bool:
        if m.state("trials", trial_id) == "ERROR":  # never wait 300 s for a dead trial
            raise RuntimeError(f"trial {trial_id} failed; its log: "
                               f"{m.data_dir / 'trials' / str(trial_id) / 'logs.txt'}")
        return "first_batch_end" in read_stamps(stamps_dir, first["id"])

    wait_for("the first batch", first_batch, 300)
    time.sleep(args.train_s)

    # 2. pause
    m.client.experiment(exp_id)  # a warm keep-alive connection for the request we time
    t_pause = time.time()
    m.client.pause_experiment(exp_id)
    wait_for("PAUSED", lambda: m.state("trials", trial_id) == "PAUSED", 300)
    first = process(0)
    assert first is not None and first["ended"], first
    s1 = read_stamps(stamps_dir, first["id"])
    if "preempt_seen" not in s1 or "fit_raised" not in s1:
        raise RuntimeError(f"trial {trial_id} did not stop for the pause (stamps: {sorted(s1)}); "
                           f"its log: {m.data_dir / 'trials' / str(trial_id) / 'logs.txt'}")
    exited1 = exit_time(first)

    # 3. reference, with no trial running
    save_s, restore_s = reference(args.params, args.ref_reps, root / f"ref-{i}")
    py_s, _ = wall("pass")
    tf_s, tf_teardown = wall("import time, tensorflow; print(repr(time.time()))")

    # 4. activate
    m.client.experiment(exp_id)
    t_act = time.time()
    m.client.activate_experiment(exp_id)
    second = wait_for("the resumed process", lambda: process(1), 300)
    wait_for("the resumed first batch",
             lambda: "first_batch_end" in read_stamps(stamps_dir, second["id"]), 300)
    # 5. end it
    m.client.kill_experiment(exp_id)
    wait_for("CANCELED", lambda: m.state("experiments", exp_id) == "CANCELED", 300, 0.2)
    s2 = read_stamps(stamps_dir, second["id"])

    r: dict[str, float] = {"save_ref": save_s, "restore_ref": restore_s, "python": py_s,
                           "import_tf": tf_s, "tf_teardown": tf_teardown}
    # pause side
    r["P"] = first["ended"] - t_pause
    r["p_wake"] = s1["preempt_seen"] - t_pause
    r["p_batch"] = s1["save_begin"] - s1["preempt_seen"]
    r["p_save"] = s1["save_end"] - s1["save_begin"]
    r["p_close"] = s1["close_end"] - s1["save_end"]
    r["p_unwind"] = s1["fit_raised"] - s1["close_end"]
    r["p_free"] = s1["fit_unwound"] - s1["fit_raised"]
    r["p_free_gc"] = s1.get("gc_s", 0.0)
    r["p_shutdown"] = s1["atexit"] - s1["fit_unwound"]
    THREADS.update(s1.get("threads", []))
    r["T"] = exited1 - s1["atexit"]
    r["p_notice"] = first["ended"] - exited1
    r["batch_s"] = s1.get("batch_s") or float("nan")
    # activate side, and the same stages of the fresh start
    r["A"] = s2["first_batch_end"] - t_act
    r["a_sched"] = second["started"] - t_act
    for key, s, alloc in (("a", s2, second), ("f", s1, first)):
        r[f"{key}_spawn"] = s["start"] - alloc["started"]
        r[f"{key}_import"] = s["imported"] - s["start"]
        r[f"{key}_init"] = s["init"] - s["imported"]
        r[f"{key}_build"] = s["fit_called"] - s["init"]
        r[f"{key}_setup"] = s["train_begin"] - s["fit_called"]
        r[f"{key}_first"] = s["first_batch_end"] - s["train_begin"]
    r["a_restore"] = s2["restore_end"] - s2["restore_begin"]
    r["a_setup"] -= r["a_restore"]
    r["F"] = s1["first_batch_end"] - first["started"]
    r["N"] = (s2["fit_called"] - second["started"]) + (s1["first_batch_end"] - s1["fit_called"])
    r["S"] = save_s + restore_s
    r["P_attr"] = r["P"] - r["T"]
    r["A_attr"] = r["A"] - r["N"]
    r["a_direct"] = r["a_sched"] + r["a_restore"]
    r["a_fitdiff"] = r["A_attr"] - r["a_direct"]
    for key in ("P", "A", "P_attr", "A_attr"):
        r[f"{key}/S"] = r[key] / r["S"]
    r["raw"] = (r["P"] + r["A"]) / r["S"]
    r["a_direct/S"] = r["a_direct"] / r["S"]
    # each term measured on one process: never a difference of two processes' timings
    r["attr"] = (r["P_attr"] + r["a_direct"]) / r["S"]
    return r


def ms(v: float) -> str:
    return f"{v * 1000:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--params", type=int, default=200_000,
                        help="model parameters, about (default 200000)")
    # Enough for the pause to land mid-epoch: at 16,384 (256 batches) a machine at 5.5 ms
    # a batch had ended the epoch by --train-s, and the stop waited out its validation
    # (p_batch 125-142 ms, not one batch).
    parser.add_argument("--samples", type=int, default=65536,
                        help="training rows (default 65536: one epoch outlasts --train-s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-s", type=float, default=1.5,
                        help="seconds of training before the pause")
    parser.add_argument("--ref-reps", type=int, default=5,
                        help="save+restore repetitions per reference (median)")
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--keep", action="store_true",
                        help="keep the temp dir (stamps, master logs, rows.json)")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="bench-pause-"))
    m = Master(root)
    rows: list[dict[str, float]] = []
    print(f"det_sdk {Path(det_sdk.__file__).parent}; {os.cpu_count()} cpus; "
          f"Dense model of ~{args.params:,} params, Adam; {args.samples} samples, "
          f"batch {args.batch_size}; {args.reps} reps; in {root}",
          flush=True)
    try:
        m.up()
        for i in range(args.reps):
            r = one_rep(m, i, args, root)
            rows.append(r)
            print(f"rep {i}: P {ms(r['P'])}  T {ms(r['T'])}  A {ms(r['A'])}  "
                  f"N {ms(r['N'])}  S {ms(r['S'])}  wake {ms(r['p_wake'])}  "
                  f"free {ms(r['p_free'])}  raw {r['raw']:.1f}  attributable {r['attr']:.1f}",
                  flush=True)
    finally:
        m.stop()
        (root / "rows.json").write_text(json.dumps(rows, indent=1))
    if args.keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print("\nmedians over", len(rows), "reps")
    print(f"reference S: save {ms(med('save_ref'))} + restore {ms(med('restore_ref'))} "
          f"= {ms(med('S'))} (this process, storage.store + save_checkpoint, restore_state)")
    print(f"  in the trials: save at pause {ms(med('p_save'))}, "
          f"restore at resume {ms(med('a_restore'))}")
    print(f"fixed costs: python -c pass {ms(med('python'))}, "
          f"python -c 'import tensorflow' {ms(med('import_tf'))}, "
          f"of which teardown after the import {ms(med('tf_teardown'))}")
    print(f"\npause-to-exit P {ms(med('P'))} (one batch takes {ms(med('batch_s'))})")
    for key, what in (
        ("p_wake", "request -> preemption long-poll answers in the trial"),
        ("p_batch", "-> current batch finished, save begins"),
        ("p_save", "checkpoint save (write, fsync, rename, report queued)"),
        ("p_close", "context.close(): queued reports delivered"),
        ("p_unwind", "SystemExit out of context.fit"),
        ("p_free", "-> that exception and fit's frames freed (datasets, iterators)"),
        ("p_free_gc", "   of which Python's garbage collector"),
        ("p_shutdown", "-> last atexit handler (joins non-daemon threads: "
                       f"{', '.join(sorted(THREADS)) or 'none'})"),
        ("T", "T: interpreter + TensorFlow teardown -> process gone"),
        ("p_notice", "process gone -> master records exit, trial PAUSED"),
    ):
        print(f"  {key:10s} {ms(med(key))}  {what}")
    print(f"\nactivate-to-first-batch A {ms(med('A'))}; new-process cost N {ms(med('N'))}; "
          f"fresh start F {ms(med('F'))}")
    print(f"  {'stage':10s} {'resumed':>10s} {'fresh':>10s}")
    print(f"  {'sched':10s} {ms(med('a_sched'))} {'':>10s}  activate request -> master spawns "
          f"the process")
    for stage, what in (
        ("spawn", "spawn -> first line of train.py (sh, python start-up)"),
        ("import", "import tensorflow, det_sdk"),
        ("init", "det.keras.init()"),
        ("build", "model and data"),
        ("setup", "context.fit -> on_train_begin, restore excluded"),
        ("restore", "restore_state"),
        ("first", "on_train_begin -> first batch end (tracing, first step)"),
    ):
        a = med(f"a_{stage}")
        f = ms(med(f"f_{stage}")) if f"f_{stage}" in rows[0] else f"{'-':>10s}"
        print(f"  {stage:10s} {ms(a)} {f}  {what}")

    raw, attr = med("raw"), med("attr")
    print(f"""
definitions (S = one save + one restore of this model, measured here, {ms(med('S'))};
ratios are medians of the per-rep ratios):
  raw          = (P + A) / S                      median {raw:.1f}
      P / S {med('P/S'):.1f}, A / S {med('A/S'):.1f}
  attributable = ((P - T) + scheduling + restore) / S   median {attr:.1f}
      P - T = {ms(med('P_attr'))}: pause without the teardown any ending process pays
      scheduling + restore = {ms(med('a_direct'))}: activate without a new process's start-up
  information only (a difference of two processes' timings, noisy, may be negative):
      A - N = {ms(med('A_attr'))}; fit stages resumed - fresh {ms(med('a_fitdiff'))}
""")
    ok = raw <= args.max_ratio

    def verdict(v: float) -> str:
        return f"{v:.1f} {'OK' if v <= args.max_ratio else 'MISSED'}"

    print(f"median raw ratio (P + A) / S = {raw:.1f} (target <= {args.max_ratio}) "
          f"{'OK' if ok else 'MISSED'}; attributable {verdict(attr)}")
    # The issue's other reading: each latency on its own against S.
    print(f"each latency against S: raw P / S {verdict(med('P/S'))}, A / S {verdict(med('A/S'))};"
          f" attributable (P - T) / S {verdict(med('P_attr/S'))}, "
          f"(scheduling + restore) / S {verdict(med('a_direct/S'))}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
