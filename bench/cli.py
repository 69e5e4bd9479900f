"""Cold-start time of `olmoablate --help` and `olmoablate validate specs/` (goal: <= 0.3 s each).

Runs each command N times in fresh processes and prints the median wall time and its ratio to
the goal. Also reports the bare interpreter start-up, which no change here can beat.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_S = 0.3
RUNS = 7


def median_wall(cmd: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    base = median_wall([sys.executable, "-c", "pass"])
    print(f"python -c pass (floor)          {base:6.3f} s")
    for label, args in (
        ("olmoablate --help", ["--help"]),
        ("olmoablate validate specs/", ["validate", "specs/"]),
    ):
        t = median_wall([sys.executable, "-m", "olmoablate", *args])
        verdict = "ok" if t <= GOAL_S else "over goal"
        print(f"{label:30s}  {t:6.3f} s   {t / GOAL_S:4.2f}x of the {GOAL_S} s goal  ({verdict})")


if __name__ == "__main__":
    main()
