"""Benchmark: time `olmoablate report` on 100 runs x 100k steps of synthetic metrics.

    python bench/report.py                      # 100 runs x 100k steps (about 5 GB, generated once)
    python bench/report.py --runs 10 --steps 10000

The data is generated first (not timed; reused if already there), then the full report
(collect + compare + gate + plots + md/html/csv/json) is timed three times:

* cold: no report cache at all (every figure drawn; the caches are written). Each run has the
  columnar copy ``metrics.parquet`` that the training job keeps (built here untimed, as the job
  would have; ``--no-copies`` removes them to time the pure-JSON parse);
* warm: nothing changed since the last report (cache hits, figures reused);
* appended: every run logged ``--append`` more steps since the last report (what re-running the
  report while runs train looks like: only the new rows are parsed, every figure is redrawn).

Rows carry every key OLMo-core logs (~20 numbers), like the real job's rows. The appended rows
are removed again at the end (the files are truncated back), so the data can be reused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from olmoablate.contract.plan import PLAN_FILE, RunEntry
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
    from olmoablate.contract.plan import Plan
    from olmoablate.errors import UserError

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


def _copy(path: str) -> None:
    from olmoablate.contract.columnar import update_copy

    update_copy(path)


def build_copies(root: Path) -> None:
    """The job's metrics.parquet for every run that lacks a current one (not timed)."""
    from olmoablate.contract.columnar import load_copy

    todo = [str(p) for p in sorted(root.glob("runs/*/metrics.jsonl")) if load_copy(p) is None]
    if not todo:
        return
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(_copy, todo))
    print(f"built {len(todo)} metrics.parquet copies in {time.perf_counter() - t0:.0f} s")


def time_report(root: Path, *, use_cache: bool) -> dict[str, float]:
    import resource

    from olmoablate.report.build import build, write_next_plan
    from olmoablate.report.collect import collect
    from olmoablate.report.writers import write_all

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    c0 = cpu()
    t0 = time.perf_counter()
    results = collect(root, use_cache=use_cache)
    t1, c1 = time.perf_counter(), cpu()
    report = build(results)
    t2, c2 = time.perf_counter(), cpu()
    write_next_plan(report, root)
    write_all(report, root, ["md", "html", "csv", "json"])
    t3, c3 = time.perf_counter(), cpu()
    return {
        "collect": t1 - t0,
        "compare+gate": t2 - t1,
        "render": t3 - t2,
        "total": t3 - t0,
        "cpu": c3 - c0,
        "cpu_parts": f"{c1 - c0:.2f}/{c2 - c1:.2f}/{c3 - c2:.2f}",  # type: ignore[dict-item]
        "verdict": report.verdict,  # type: ignore[dict-item]
    }


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--dir", default="/tmp/olmoablate-bench/bench")
    ap.add_argument("--append", type=int, default=100, help="steps appended per run (phase 3)")
    ap.add_argument(
        "--phases",
        default="cold,warm,appended",
        help="comma-separated subset of cold,warm,appended (without cold the caches are kept)",
    )
    ap.add_argument(
        "--no-copies",
        action="store_true",
        help="remove the jobs' metrics.parquet copies: time parsing the JSON itself",
    )
    ap.add_argument(
        "--keep",
        default=None,
        help="copy each phase's gate.json, comparison.csv and report.md to KEEP/<phase>/ "
        "(to check that a change leaves the report byte-identical)",
    )
    args = ap.parse_args()
    root = Path(args.dir)
    generate(root, args.runs, args.steps)
    if args.no_copies:
        for p in root.glob("runs/*/metrics.parquet"):
            p.unlink()
    else:
        build_copies(root)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if "cold" in phases:
        shutil.rmtree(root / ".report-cache", ignore_errors=True)
        shutil.rmtree(root / "plots", ignore_errors=True)
    n_runs = len(list((root / "runs").iterdir()))
    goal = 5.0
    sizes: dict[Path, int] = {}
    try:
        for label in phases:
            if label == "appended":
                sizes = append_steps(root, args.append)
            t = time_report(root, use_cache=True)
            if args.keep:
                keep = Path(args.keep) / label
                keep.mkdir(parents=True, exist_ok=True)
                for name in ("gate.json", "comparison.csv", "report.md"):
                    shutil.copy2(root / name, keep / name)
            skip = ("total", "verdict", "cpu", "cpu_parts")
            parts = ", ".join(f"{k} {v:.2f} s" for k, v in t.items() if k not in skip)
            print(
                f"{label}: report of {n_runs} runs x {args.steps} steps in {t['total']:.2f} s "
                f"wall = {t['total'] / goal:.2f}x the {goal:.0f} s goal; {t['cpu']:.2f} s CPU "
                f"over all processes ({parts}; CPU by part {t['cpu_parts']} s; verdict {t['verdict']}; "
                f"load average {os.getloadavg()[0]:.1f})"
            )
    finally:
        for path, size in sizes.items():
            os.truncate(path, size)
    print(f"goal: <= {goal:.0f} s; cpus: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
