"""Benchmark: Horovod's own Keras synthetic benchmark against det_sdk's port of it.

Issue 56 item 9: the port (scripts/bench/_hvd_synthetic_port.py, made with
docs/migrating.md's table) must reach >= 0.97 of the original's images/second with
det_sdk's default checkpoint policy, or the difference be accounted for. The original is
read from Horovod's repository (``--original``, by default ``git show`` of
``examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py`` in the fetched mirror),
never copied into this project; its image size is set on the fly (224 is too large for a
2-core CPU: the data's ``224, 224`` and the model's input shape become ``--image-size``),
and each side runs as ``horovodrun -np N --gloo`` with the same arguments.

Rounds alternate original, port (default checkpoints), port (``--checkpoints off``), the
order rotating each round; the median per-round ratio to the original is the result. On
Keras 3 the original's ``DistributedOptimizer`` averages nothing and its callbacks raise
(docs/migrating.md), so run it on the Keras 2 stack::

    .venv-keras2/bin/python scripts/bench/hvd_synthetic.py [--rounds 3] [--np 2]
        [--image-size 32] [--iters 5] [--batches 10] [--fp16-allreduce] [--without-bare-port]

>>> total_img_sec("Iter #1: 50.0 img/sec per CPU\\nTotal img/sec on 2 CPU(s): 118.4 +-3.1\\n")
118.4
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORT = HERE / "_hvd_synthetic_port.py"
PROFILED = HERE / "_profiled.py"
MIRROR = Path("/work/.mirror/horovod+horovod/repo")
ORIGINAL = "examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py"


def total_img_sec(output: str) -> float:
    """The figure the benchmark prints last: total images/s over all processes."""
    found = re.findall(r"Total img/sec on \d+ CPU\(s\): ([0-9.]+)", output)
    if not found:
        raise SystemExit(f"no 'Total img/sec' in the output:\n{output[-3000:]}")
    return float(found[-1])


def original_text(path: str | None, image_size: int) -> str:
    """The original benchmark's source with its image size set to ``image_size``."""
    text = (Path(path).read_text() if path else subprocess.run(
        ["git", "-C", str(MIRROR), "show", f"HEAD:{ORIGINAL}"], check=True,
        capture_output=True, text=True).stdout)
    for old, new in (("224, 224", f"{image_size}, {image_size}"),
                     ("(weights=None)", f"(weights=None, input_shape=({image_size}, "
                                        f"{image_size}, 3))")):
        if old not in text:
            raise SystemExit(f"the original no longer contains {old!r}: update this driver")
        text = text.replace(old, new)
    return text


def run(script: Path, extra: list[str], args: argparse.Namespace,
        profile: Path | None = None) -> float:
    """One ``horovodrun`` of ``script``: its total images/s (each rank profiled into
    ``profile``'s ``.rank<R>.prof`` files if given)."""
    horovodrun = Path(sys.executable).with_name("horovodrun")
    common = ["--batch-size", str(args.batch_size), "--num-batches-per-iter", str(args.batches),
              "--num-iters", str(args.iters)] + (["--fp16-allreduce"] if args.fp16_allreduce
                                                 else [])
    wrap = [str(PROFILED), str(profile)] if profile else []
    cmd = [str(horovodrun), "-np", str(args.np), "--gloo", sys.executable, *wrap, str(script),
           *common, *extra]
    with tempfile.TemporaryDirectory() as work:  # the port's run directory lands here
        out = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    if out.returncode:
        raise SystemExit(f"{cmd} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return total_img_sec(out.stdout)


# what rank 0's profile is summed into: (label, what a function's file and name contain)
_PARTS = (
    ("fit, in all", ("", "fit")),
    ("the training steps (TensorFlow's compiled function)", ("", "train_function")),
    ("det_sdk's callbacks' hooks, summed", ("/det_sdk/", "on_*")),
    ("checkpoints written", ("det_sdk/keras/_fit_run", "save")),
    ("the script's callbacks (the timing)", ("", "on_epoch_end")),
)


def where_time_went(prof: Path) -> str:
    """Rank 0's time by part (cumulative seconds; parts overlap where they nest), then the
    20 det_sdk functions of most cumulative time."""
    import pstats

    stats = pstats.Stats(str(prof))
    table = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (..., ct, ...)}
    lines = [f"  {prof.name}:"]
    for label, (in_file, name) in _PARTS:
        prefix = name.endswith("*")  # hooks that do not nest: summed; else the outermost
        times = [v[3] for (f, _, fn), v in table.items() if in_file in f and (
            fn.startswith(name[:-1]) if prefix else fn == name)]
        if not times:  # e.g. Keras 2's own fit has no det_sdk pipeline's train_function
            lines.append(f"    {label}: not in this profile")
            continue
        lines.append(f"    {label}: {(sum(times) if prefix else max(times)):.1f} s")
    ours = sorted(((v[3], f"{f.split('det_sdk/', 1)[-1]}:{fn}") for (f, _, fn), v
                   in table.items() if "/det_sdk/" in f), reverse=True)[:20]
    lines += [f"    {ct:8.2f} s  {where}" for ct, where in ours]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--original", help="the original's path (default: the mirror's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--without-bare-port", action="store_true",
                        help="leave out the port without checkpoints (rounds of two runs)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="instead of the rounds: one run of each side under cProfile, "
                             "then where rank 0's time went (DIR keeps the profiles)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / "original.py"
        original.write_text(original_text(args.original, args.image_size))
        sides = {"original": (original, ["--no-cuda"]),
                 "port": (PORT, ["--image-size", str(args.image_size)]),
                 "port, no checkpoints": (PORT, ["--image-size", str(args.image_size),
                                                 "--checkpoints", "off"])}
        if args.without_bare_port:
            del sides["port, no checkpoints"]
        names = list(sides)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for n in names:
                stem = args.profile / n.replace(", ", "-").replace(" ", "-")
                print(f"{n}: {run(*sides[n], args, stem):.1f} img/s (profiled)", flush=True)
                print(where_time_went(stem.with_name(stem.name + ".rank0.prof")), flush=True)
            return
        ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            figures = {n: run(*sides[n], args) for n in order}
            print(f"round {r + 1}: " + ", ".join(f"{n} {figures[n]:.1f}" for n in order)
                  + " img/s", flush=True)
            for n in ratios:
                ratios[n].append(figures[n] / figures["original"])
    for n, values in ratios.items():
        print(f"{n} / original: median {statistics.median(values):.3f} "
              f"({', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()
