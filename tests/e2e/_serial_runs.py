"""Several training scripts' runs, one after another, in one process (tests' helper).

Each process that imports TensorFlow spends ~6 s of CPU before it trains; a test's
reference runs (an uninterrupted run to compare a resumed one with; a finished run
resumed again) are not about the process they run in, so several share one here.
Runs that must be processes of their own (stopped by a signal, resumed in a fresh
process) do not come here.

Usage: ``SERIAL_SPEC=SPEC.json python tests/e2e/_serial_runs.py``, SPEC a JSON list of
``{"script": path, "env": {name: value}, "stdout": path}``: each script runs as
``__main__`` with ``env`` added to the environment (and taken out again after), its
standard output written to ``stdout`` (without one: the process's own, where a test reads
what the script printed). In a path, ``{rank}`` is this process's Horovod rank (under
``horovodrun``). A run that returns (or exits 0) then writes an empty file ``done``
(default ``stdout + ".done"``), so that a run after it may fail on purpose and the ones
before still be known to have ended well. A run that fails ends the process (non-zero).

>>> import json, subprocess, sys, tempfile
>>> d = Path(tempfile.mkdtemp())
>>> _ = (d / "s.py").write_text("import os; print(os.environ['WHO'])")
>>> runs = [{"script": str(d / "s.py"), "env": {"WHO": w}, "stdout": str(d / w)}
...         for w in ("a", "b")]
>>> _ = (d / "spec.json").write_text(json.dumps(runs))
>>> env = {**os.environ, "SERIAL_SPEC": str(d / "spec.json")}
>>> subprocess.run([sys.executable, __file__], env=env, check=True).returncode
0
>>> (d / "a").read_text(), (d / "b").read_text(), (d / "b.done").exists()
('a\\n', 'b\\n', True)
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
from pathlib import Path


def run_all(spec: list[dict]) -> None:
    """Run each of ``spec``'s scripts in turn (see the module's docstring)."""
    for i, run in enumerate(spec):
        if i and "tensorflow" in sys.modules:
            # as a fresh process starts: no models or names left from the run before
            sys.modules["tensorflow"].keras.backend.clear_session()
        before = {k: os.environ.get(k) for k in run["env"]}
        os.environ.update(run["env"])
        try:
            rank = os.environ.get("HOROVOD_RANK", "0")
            stdout = run.get("stdout")
            with contextlib.ExitStack() as stack:
                if stdout:
                    stack.enter_context(contextlib.redirect_stdout(
                        stack.enter_context(open(stdout.replace("{rank}", rank), "w"))))
                try:
                    runpy.run_path(run["script"], run_name="__main__")
                except SystemExit as end:  # a script's sys.exit(main()): on to the next
                    if end.code not in (None, 0):
                        raise
            Path((run.get("done") or f"{stdout}.done").replace("{rank}", rank)).write_text("")
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


if __name__ == "__main__":
    run_all(json.loads(Path(os.environ["SERIAL_SPEC"]).read_text()))
