"""Take the README's screenshots of the web UI (docs/ui/*.png) from a real ASHA search.

Starts a master of its own, runs an adaptive ASHA search of examples/train.py on a
small generated MNIST-shaped file (no download here), and photographs the pages in
headless Chromium while it runs and once it is done. A few minutes on 2 cores.

    python scripts/ui_screenshots.py [--out docs/ui] [--trials 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository: harness/

from harness.browser import missing_reason, open_browser, signed_in_context  # noqa: E402
from harness.master import Cluster  # noqa: E402
from harness.mnist import make  # noqa: E402

EXAMPLES = HERE.parent / "examples"


def asha_config(npz: Path, trials: int) -> dict:
    """The search the README shows (examples/train.py's hyperparameters)."""
    return {
        "name": "mnist_asha",
        "hyperparameters": {
            "global_batch_size": 64,
            "learning_rate": {"type": "log", "base": 10, "minval": -2.5, "maxval": -0.3},
            "dropout": {"type": "double", "minval": 0.1, "maxval": 0.6},
        },
        "searcher": {"name": "adaptive_asha", "metric": "val_loss", "smaller_is_better": True,
                     "max_length": {"epochs": 4}, "max_trials": trials, "divisor": 2,
                     "num_rungs": 3, "mode": "aggressive", "max_concurrent_trials": 2},
        "scheduling_unit": 8,
        "entrypoint_script": "python3 train.py",
        "data": {"mnist_npz": str(npz)},
        "reproducibility": {"experiment_seed": 11},
    }


def wait(what: str, cond, timeout: float = 900) -> object:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(1)
    raise TimeoutError(what)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "ui")
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    if reason := missing_reason():
        print(f"ui_screenshots: {reason}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        npz = root / "mnist-demo.npz"
        np.savez(npz, **make(n_train=2048, n_test=512))
        config = root / "asha.yaml"
        config.write_text(yaml.safe_dump(asha_config(npz, args.trials), sort_keys=False))
        master = Cluster(root, slots=2)
        master.up()
        try:
            exp = master.det_json("experiment", "create", str(config), str(EXAMPLES))["id"]

            def describe() -> dict:
                return master.det_json("experiment", "describe", str(exp))

            with open_browser() as browser:
                context = signed_in_context(browser, master.url, master.token)
                page = context.new_page()

                def show(hash_: str, name: str, ready: str = "true", height: int = 900) -> None:
                    # full_page: the page's whole height, at least the viewport's
                    page.set_viewport_size({"width": 1400, "height": height})
                    page.goto(f"{master.url}/ui/{hash_}")
                    page.wait_for_function(f"document.body.dataset.ready === {hash_!r}")
                    page.wait_for_function(ready, timeout=60_000)
                    time.sleep(0.5)
                    page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
                    print(f"wrote {args.out / name}.png")

                running = wait("a trial with curves", lambda: next(
                    (t["id"] for t in describe()["trials"] if t["state"] == "RUNNING"
                     and t["steps_completed"] >= 40), None))
                show(f"#/trials/{running}", "trial-live",
                     "Number(document.querySelector('#charts').dataset.points) >= 4")
                show("#/experiments", "experiments-live", height=260)
                wait("the search to end", lambda: describe()["state"] in (
                    "COMPLETED", "ERROR", "CANCELED"))
                info = describe()
                show(f"#/experiments/{exp}", "experiment")
                best = min((t for t in info["trials"] if t["best_metric"] is not None),
                           key=lambda t: t["best_metric"])
                show(f"#/trials/{best['id']}", "trial",
                     "document.querySelector('#log').textContent.includes('Test loss')")
                print(json.dumps({"experiment": exp, "state": info["state"],
                                  "best_trial": best["id"]}))
                context.close()
        finally:
            master.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
