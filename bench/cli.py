"""Cold-start time of `olmoablate --help` (goal <= 0.2 s) and `olmoablate validate specs/`
(goal <= 0.3 s): what a user waits for on a login node.

Runs each command ``--runs`` times in fresh processes and prints the median wall time, its ratio
to the goal, and the median CPU time of the child (user + system, from its rusage) — the steadier
figure when other jobs share the machine. Also reports the bare interpreter start-up, which no
change here can beat, and the load average the numbers were taken at.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOALS_S = {"--help": 0.2, "validate": 0.3}


#: The children run as an installed package does: with bytecode. `PYTHONDONTWRITEBYTECODE` (set
#: on some CI images and sandboxes) would make every start recompile each module edited since its
#: last .pyc, and time the compiler instead of the command (~0.1 s of `validate`).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _one(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def medians(cmd: list[str], runs: int) -> tuple[float, float]:
    _one(cmd)  # warm-up: writes the .pyc files and fills the OS page cache
    got = [_one(cmd) for _ in range(runs)]
    return statistics.median(w for w, _ in got), statistics.median(c for _, c in got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    wall, cpu = medians([sys.executable, "-c", "pass"], args.runs)
    print(f"load average {os.getloadavg()[0]:.2f}; median of {args.runs} fresh processes")
    print(f"{'python -c pass (floor)':30s}  {wall:6.3f} s wall  {cpu:6.3f} s CPU")
    for label, argv, goal in (
        ("olmoablate --help", ["--help"], GOALS_S["--help"]),
        ("olmoablate validate specs/", ["validate", "specs/"], GOALS_S["validate"]),
    ):
        wall, cpu = medians([sys.executable, "-m", "olmoablate", *argv], args.runs)
        verdict = "ok" if wall <= goal else "over goal"
        print(
            f"{label:30s}  {wall:6.3f} s wall  {cpu:6.3f} s CPU   {wall / goal:4.2f}x of the "
            f"{goal} s goal  ({verdict})"
        )


if __name__ == "__main__":
    main()
