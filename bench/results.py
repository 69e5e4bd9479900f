"""Benchmark: `olmoablate.results.load` and its common frames on bench/report.py's folder.

    python bench/results.py                        # 100 runs x 100k steps (made by bench/report.py)
    python bench/results.py --baseline-rev 5a8b340 # also the old code (load + runs/pairs/comparisons)

Each measurement is a fresh child process (peak RSS is that process's own, from ``os.wait4``):
import, ``results.load`` (collect + compare + gate), then ``runs``, ``pairs``, ``comparisons``
and one metric's curves (the gate's eval metric, and the train loss: one row per step of every
run, the largest curve frame) timed one by one. Twice: with no report cache (``.report-cache``
removed; the runs' ``metrics.arrow`` copies kept, as the job leaves them) and warm.

The old code's curves came from the long frame (``rs.metrics``: 80M rows, ~111 s and 13 GB on
this folder), which this machine's memory cannot hold beside other work: with
``--baseline-rev`` only its load and small frames are timed, unless ``--baseline-long``.

Goal (issue 22): the common frames in <= 5 s and <= 2 GB peak memory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from sidebyside import BASELINE_REV, REPO, ChildResult, export_revision, load_average, run_child

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from olmoablate import results
times = {"import": time.perf_counter() - t0}
root, metrics, long = sys.argv[1], sys.argv[2].split(","), sys.argv[3] == "1"
t = time.perf_counter(); rs = results.load(root); times["load"] = time.perf_counter() - t
sizes = {}
for name in ("runs", "pairs", "comparisons"):
    t = time.perf_counter(); df = getattr(rs, name); times[name] = time.perf_counter() - t
    sizes[name] = len(df)
for m in metrics:
    t = time.perf_counter()
    if hasattr(rs, "curves"):
        df = rs.curves(m)
    elif long:
        df = rs.metrics[rs.metrics["metric"] == m]
    else:
        continue
    times["curves:" + m] = time.perf_counter() - t
    sizes["curves:" + m] = len(df)
print(json.dumps({"times": times, "sizes": sizes}))
"""


def _line(label: str, r: ChildResult) -> str:
    t = r.out["times"]
    common = sum(v for k, v in t.items() if k != "import")
    parts = ", ".join(f"{k} {v:.2f}" for k, v in t.items())
    rows = ", ".join(f"{k} {v}" for k, v in r.out["sizes"].items())
    return (
        f"{label}: frames {common:.2f} s (process {r.wall_s:.2f} s wall, {r.cpu_s:.2f} s CPU), "
        f"peak RSS {r.peak_rss_mb / 1024:.2f} GiB; seconds: {parts}; rows: {rows}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/olmoablate-bench/bench")
    ap.add_argument(
        "--metrics",
        default="eval/lm/demo-heldout/CE loss,train/CE loss",
        help="comma-separated metrics whose curves are built",
    )
    ap.add_argument(
        "--baseline-rev", default=None, help=f"also time this revision (e.g. {BASELINE_REV})"
    )
    ap.add_argument("--baseline-long", action="store_true", help="old code: build rs.metrics too")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    root = Path(args.dir)
    if not (root / "plan.json").is_file():
        print(f"{root}: no bench folder; run `python bench/report.py` first", file=sys.stderr)
        return 2
    codes = {"new": REPO}
    if args.baseline_rev:
        codes = {"old": export_revision(args.baseline_rev), **codes}
    goal_s, goal_gb = 5.0, 2.0
    worst: dict[str, tuple[float, float]] = {}
    for rnd in range(args.rounds):
        for label, code in codes.items():
            for phase in ("cold", "warm"):
                if phase == "cold":
                    shutil.rmtree(root / ".report-cache", ignore_errors=True)
                r = run_child(
                    code, CHILD, str(root), args.metrics, "1" if args.baseline_long else "0"
                )
                print(_line(f"[{rnd}] {label} {phase}", r) + f"; load average {load_average()}")
                if label == "new":
                    common = sum(v for k, v in r.out["times"].items() if k != "import")
                    w = worst.get(phase, (0.0, 0.0))
                    worst[phase] = (max(w[0], common), max(w[1], r.peak_rss_mb / 1024))
    for phase, (s, gb) in worst.items():
        ok = "met" if s <= goal_s and gb <= goal_gb else "NOT met"
        print(
            f"goal {phase}: frames <= {goal_s:.0f} s and peak <= {goal_gb:.0f} GiB: {ok} "
            f"(worst {s:.2f} s, {gb:.2f} GiB)"
        )
    print(f"load average: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
