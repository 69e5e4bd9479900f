"""Benchmark: `olmoablate report` on 100 runs x 100k steps of synthetic metrics, new code
against old, side by side.

    python bench/report.py                      # 100 runs x 100k steps (about 5 GB, generated once)
    python bench/report.py --runs 10 --steps 10000 --rounds 1
    python bench/report.py --baseline-rev 5a8b340   # the old code: a git revision (the default)

The data is generated first (not timed; reused if already there). The old code is the given
revision exported with ``git archive``; each report is ``olmoablate report`` in a fresh process
(start-up and imports included, as a user sees it) of the old or the new code on the same
folder, alternating (the order flips each round), three phases each:

* cold: no report cache (``.report-cache`` and ``plots`` removed; every figure drawn). Each run
  has the columnar copy its version's training job keeps (the old code's ``metrics.parquet``,
  the new code's ``metrics.arrow``; built here untimed by that version's writer, as its job
  would have; ``--no-copies`` removes them to time the pure-JSON parse);
* warm: nothing changed since the last report;
* appended: every run logged ``--append`` more steps since the last report (what re-running the
  report while runs train looks like).

Wall time is measured around each process; CPU time and peak RSS are the child's own (rusage
from ``os.wait4``, its pool workers included). The machine is shared: the new/old ratios (the
median over rounds of each round's ratio) are what count. Rows carry every key OLMo-core logs
(~20 numbers), like the real job's rows. The appended rows are removed again after each code's
phases (the files are truncated back), so the data can be reused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sidebyside import BASELINE_REV, REPO, ChildResult, export_revision, load_average, run_child

from olmoablate.plan.names import PLAN_FILE
from olmoablate.plan.planfile import RunEntry
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, synthetic_plan, write_run

SIZES = ("1B", "3B")
VARIANTS = ("v1", "v2", "v3", "v4")


def _spec(runs: int, steps: int) -> SynthSpec:
    per_group = 1 + len(VARIANTS)
    seeds = max(1, runs // (per_group * len(SIZES)))
    return SynthSpec(
        name="bench",
        sizes=SIZES,
        seeds=tuple(range(seeds)),
        variants={
            v: {"siamese_norm": {"output_norms": i % 2 == 0}} for i, v in enumerate(VARIANTS)
        },
        steps=steps,
        eval_interval=max(1, steps // 100),
        gate={"metric": "eval/lm/demo-heldout/CE loss", "min_effect": 0.01, "promote_to": ["3B"]},
    )


def _truth(arm: str) -> ArmTruth:
    offsets = {"baseline": 0.0, "v1": -0.05, "v2": -0.005, "v3": 0.02, "v4": -0.03}
    return ArmTruth(offset=offsets.get(arm, 0.0), eval_noise=0.002)


def _gen(args: tuple[str, SynthSpec, RunEntry]) -> None:
    root, spec, entry = args
    write_run(Path(root), spec, entry, _truth(entry.arm))


def _plan_loads(root: Path) -> bool:
    """Whether ``root`` holds a plan this version reads (data of an older format is rebuilt)."""
    from olmoablate.errors import UserError
    from olmoablate.plan.planfile import Plan

    try:
        Plan.load(root / PLAN_FILE)
    except (UserError, OSError):
        return False
    return True


def generate(root: Path, runs: int, steps: int) -> None:
    marker = root / f".generated-{runs}-{steps}"
    if marker.exists() and _plan_loads(root):
        print(f"reusing {root}")
        return
    shutil.rmtree(root, ignore_errors=True)
    spec = _spec(runs, steps)
    plan = synthetic_plan(spec)  # a real contract Plan (what `plan` would have written)
    plan.write(root / PLAN_FILE)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(_gen, [(str(root), spec, e) for e in plan.runs]))
    size = sum(p.stat().st_size for p in root.glob("runs/*/*.jsonl"))
    print(
        f"generated {len(plan.runs)} runs x {steps} steps "
        f"({size / 2**30:.2f} GiB of jsonl) in {time.perf_counter() - t0:.0f} s"
    )
    marker.touch()


COPIES = r"""
import os, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from olmoablate.run.columnar import load_copy, update_copy
todo = [str(p) for p in sorted(Path(sys.argv[1]).glob("runs/*/metrics.jsonl")) if load_copy(p) is None]
if todo:
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(update_copy, todo))
print('{"built": %d}' % len(todo))
"""


def build_copies(root: Path, code: Path) -> None:
    """The columnar copy the training job of ``code`` keeps, for every run that lacks a current
    one (not timed): each version's report starts from its own job's copy (the old code's
    zstd ``metrics.parquet``, the new code's ``metrics.arrow``)."""
    t0 = time.perf_counter()
    r = run_child(code, COPIES, str(root))
    if r.out["built"]:
        print(f"built {r.out['built']} copies with {code} in {time.perf_counter() - t0:.0f} s")


def append_steps(root: Path, n: int) -> dict[Path, int]:
    """Append ``n`` rows to every run's metrics.jsonl and fingerprints.jsonl (copies of the
    last row with the next steps), as a training job does; returns the sizes before."""
    import json

    sizes: dict[Path, int] = {}
    for run in sorted((root / "runs").iterdir()):
        for name in ("metrics.jsonl", "fingerprints.jsonl"):
            path = run / name
            sizes[path] = path.stat().st_size
            with path.open("rb") as fh:
                fh.seek(max(0, sizes[path] - 65536))
                last = json.loads(fh.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
            step, tokens = int(last["step"]), int(last["tokens"])
            per_step = tokens // step
            rows = []
            for s in range(step + 1, step + n + 1):
                rows.append(json.dumps({**last, "step": s, "tokens": s * per_step}) + "\n")
            with path.open("a") as fh:
                fh.write("".join(rows))
    return sizes


REPORT = r"""
import sys, runpy
sys.argv = ["olmoablate", "report", sys.argv[1], "--format", "md,html,csv,json"]
try:
    runpy.run_module("olmoablate", run_name="__main__")
except SystemExit as e:
    if e.code not in (0, None):
        raise
import olmoablate, json
print(json.dumps({"code": olmoablate.__file__}))
"""


def time_phase(code: Path, root: Path, label: str, keep: str | None) -> ChildResult:
    """One ``olmoablate report`` of ``root`` by the code under ``code``, in a fresh process."""
    r = run_child(code, REPORT, str(root))
    if not Path(r.out["code"]).resolve().is_relative_to(code.resolve()):
        raise RuntimeError(f"the child ran {r.out['code']}, not the code under {code}")
    if keep:
        dest = Path(keep) / label
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("gate.json", "comparison.csv", "report.md"):
            shutil.copy2(root / name, dest / name)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--dir", default="/tmp/olmoablate-bench/bench")
    ap.add_argument("--append", type=int, default=100, help="steps appended per run (phase 3)")
    ap.add_argument(
        "--baseline-rev",
        default=BASELINE_REV,
        help="the old code to time side by side (a git revision; '' for the new code only)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="old/new alternations (order flips)")
    ap.add_argument(
        "--no-copies",
        action="store_true",
        help="remove the jobs' metrics.arrow copies before each cold report: time parsing "
        "the JSON itself",
    )
    ap.add_argument(
        "--keep",
        default=None,
        help="copy each phase's gate.json, comparison.csv and report.md to KEEP/<code>/<phase>/ "
        "(to check that old and new code write the same report)",
    )
    args = ap.parse_args()
    # a SIGTERM (a timeout) must still truncate the appended rows away (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(args.dir)
    generate(root, args.runs, args.steps)
    codes = {"new": REPO}
    if args.baseline_rev:
        codes = {"old": export_revision(args.baseline_rev), **codes}
        print(f"old code: {args.baseline_rev} (git archive into {codes['old']})")
    n_runs = len(list((root / "runs").iterdir()))
    got: dict[tuple[str, str], list[ChildResult]] = {}
    for rnd in range(args.rounds):
        order = list(codes) if rnd % 2 == 0 else list(reversed(codes))
        for label in order:
            if args.no_copies:
                for p in [*root.glob("runs/*/metrics.arrow"), *root.glob("runs/*/metrics.parquet")]:
                    p.unlink()
            else:
                build_copies(root, codes[label])  # what its job would have left (untimed)
            shutil.rmtree(root / ".report-cache", ignore_errors=True)
            shutil.rmtree(root / "plots", ignore_errors=True)
            sizes: dict[Path, int] = {}
            try:
                for phase in ("cold", "warm", "appended"):
                    if phase == "appended":
                        sizes = append_steps(root, args.append)
                    keep = f"{args.keep}/{label}" if args.keep else None
                    r = time_phase(codes[label], root, phase, keep)
                    got.setdefault((label, phase), []).append(r)
                    print(
                        f"[{rnd}] {label} {phase}: {r.wall_s:.2f} s wall, {r.cpu_s:.2f} s CPU, "
                        f"peak RSS {r.peak_rss_mb / 1024:.2f} GiB (load average {load_average()})"
                    )
            finally:
                for path, size in sizes.items():
                    os.truncate(path, size)
    print(f"\n{n_runs} runs x {args.steps} steps; `olmoablate report` as a fresh process each")
    for phase in ("cold", "warm", "appended"):
        new = got[("new", phase)]
        line = (
            f"{phase:>8}: new {_median([r.wall_s for r in new]):.2f} s wall / "
            f"{_median([r.cpu_s for r in new]):.2f} s CPU / "
            f"{max(r.peak_rss_mb for r in new) / 1024:.2f} GiB"
        )
        if ("old", phase) in got:
            old = got[("old", phase)]
            wall = _median([n.wall_s / o.wall_s for n, o in zip(new, old, strict=True)])
            cpu = _median([n.cpu_s / o.cpu_s for n, o in zip(new, old, strict=True)])
            line += (
                f"; old {_median([r.wall_s for r in old]):.2f} s / "
                f"{_median([r.cpu_s for r in old]):.2f} s / "
                f"{max(r.peak_rss_mb for r in old) / 1024:.2f} GiB; "
                f"new/old: wall x{wall:.2f}, CPU x{cpu:.2f}"
            )
        print(line)
    print(f"cpus: {os.cpu_count()}; load average: {load_average()}")
    return 0


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


if __name__ == "__main__":
    sys.exit(main())
