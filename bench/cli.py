"""Cold-start time of `olmoablate --help` (goal <= 0.5 s) and `olmoablate validate specs/`
(goal <= 1 s): what a user waits for on a login node.

Runs each command ``--runs`` times in fresh processes and prints the median and the fastest wall
time, the median's ratio to the goal, and the median CPU time of the child (user + system, from
its rusage), the steadier figure when other jobs share the machine. Two floors put them in
context: the bare interpreter start-up, and the libraries `validate` cannot do without (Typer,
pydantic with its first validator, PyYAML), which no change here can beat. The product does no
start-up tuning of its own (no collector settings, no import tricks): the login-node commands stay
light because an import-linter contract keeps torch, pandas and matplotlib off their path.

``--baseline-rev REV`` also times the code of a git revision (checked out into a temporary
worktree, imported through PYTHONPATH with this checkout's virtualenv), alternating old and new
process by process so both see the same machine, and prints new/old: on a shared machine whose
speed drifts by tens of percent within minutes, that ratio is the figure to trust.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

GOALS_S = {"--help": 0.5, "validate": 1.0}
COMMANDS = (
    ("olmoablate --help", ["--help"]),
    ("olmoablate validate specs/", ["validate", "specs/"]),
)
#: The libraries' share: what any Typer + pydantic + YAML command pays before doing anything.
LIBRARIES = (
    "import typer, typer._adapters, pydantic.main, pydantic.plugin._loader, yaml\n"
    "from pydantic import BaseModel\n"
    "class M(BaseModel):\n    x: int = 1\n"
    "M(x=2)"
)

#: The children run as an installed package does: with bytecode. `PYTHONDONTWRITEBYTECODE` (set
#: on some CI images and sandboxes) would make every start recompile each module edited since its
#: last .pyc, and time the compiler instead of the command (~0.1 s of `validate`).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _one(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


class Timed:
    """One command in one checkout: its samples, and how to take one more."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.cmd, self.cwd, self.env = cmd, cwd, env
        self.samples: list[tuple[float, float]] = []
        _one(cmd, cwd, env)  # warm-up: writes the .pyc files and fills the OS page cache

    def sample(self) -> None:
        self.samples.append(_one(self.cmd, self.cwd, self.env))

    @property
    def wall(self) -> float:
        return statistics.median(w for w, _ in self.samples)

    @property
    def fastest(self) -> float:
        return min(w for w, _ in self.samples)

    @property
    def cpu(self) -> float:
        return statistics.median(c for _, c in self.samples)


def _worktree(rev: str, into: Path) -> Path:
    path = into / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), rev], check=True
    )
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--baseline-rev", help="also time this git revision, alternating with it")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="olmoablate-bench-cli-") as tmp:
        old = _worktree(args.baseline_rev, Path(tmp)) if args.baseline_rev else None
        try:
            floors = {
                "python -c pass (floor)": Timed([py, "-c", "pass"], REPO, ENV),
                "libraries (floor)": Timed([py, "-c", LIBRARIES], REPO, ENV),
            }
            new = {
                label: Timed([py, "-m", "olmoablate", *argv], REPO, ENV) for label, argv in COMMANDS
            }
            base = (
                {
                    label: Timed(
                        [py, "-m", "olmoablate", *argv], old, {**ENV, "PYTHONPATH": str(old)}
                    )
                    for label, argv in COMMANDS
                }
                if old
                else {}
            )
            for _ in range(args.runs):
                for t in (*floors.values(), *new.values(), *base.values()):
                    t.sample()
        finally:
            if old is not None:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False
                )
    print(f"load average {os.getloadavg()[0]:.2f}; median (fastest) of {args.runs} fresh processes")
    for label, t in floors.items():
        print(f"{label:30s}  {t.wall:6.3f} s wall ({t.fastest:.3f})  {t.cpu:6.3f} s CPU")
    for (label, argv), t in zip(COMMANDS, new.values(), strict=True):
        goal = GOALS_S[argv[0]]
        verdict = "ok" if t.wall <= goal else "over goal"
        line = (
            f"{label:30s}  {t.wall:6.3f} s wall ({t.fastest:.3f})  {t.cpu:6.3f} s CPU   "
            f"{t.wall / goal:4.2f}x of the {goal} s goal  ({verdict})"
        )
        if label in base:
            b = base[label]
            line += f"; {args.baseline_rev}: {b.wall:.3f} s, new/old {t.wall / b.wall:.2f}"
        print(line)


if __name__ == "__main__":
    main()
