"""Benchmark: time `olmoablate report` on 100 runs x 100k steps of synthetic metrics.

    python bench/report.py                      # 100 runs x 100k steps (about 5 GB, generated once)
    python bench/report.py --runs 10 --steps 10000

The data is generated first (not timed; reused if already there), then the full report
(collect + compare + gate + plots + md/html/csv/json) is timed twice: cold (every metrics.jsonl
parsed; the parse cache is written) and warm (cache hits, as when re-running the report while
runs progress). Rows carry every key OLMo-core logs (~20 numbers), like the real job's rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from olmoablate.report.synthetic import ArmTruth, SynthSpec, write_plan, write_run

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


def _gen(args: tuple[str, SynthSpec, dict[str, Any]]) -> None:
    root, spec, entry = args
    write_run(Path(root), spec, entry, _truth(str(entry["arm"])))


def generate(root: Path, runs: int, steps: int) -> None:
    marker = root / f".generated-{runs}-{steps}"
    if marker.exists():
        print(f"reusing {root}")
        return
    shutil.rmtree(root, ignore_errors=True)
    spec = _spec(runs, steps)
    plan = write_plan(root, spec)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(_gen, [(str(root), spec, e) for e in plan["runs"]]))
    size = sum(p.stat().st_size for p in root.glob("runs/*/*.jsonl"))
    print(
        f"generated {len(plan['runs'])} runs x {steps} steps "
        f"({size / 2**30:.2f} GiB of jsonl) in {time.perf_counter() - t0:.0f} s"
    )
    marker.touch()


def time_report(root: Path, *, use_cache: bool) -> dict[str, float]:
    import resource

    from olmoablate.report.build import build, write_next_plan
    from olmoablate.report.collect import collect
    from olmoablate.report.render import write_all

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    c0 = cpu()
    t0 = time.perf_counter()
    results = collect(root, use_cache=use_cache)
    t1 = time.perf_counter()
    report = build(results)
    t2 = time.perf_counter()
    write_next_plan(report, root)
    write_all(report, root, ["md", "html", "csv", "json"])
    t3 = time.perf_counter()
    return {
        "collect": t1 - t0,
        "compare+gate": t2 - t1,
        "render": t3 - t2,
        "total": t3 - t0,
        "cpu": cpu() - c0,
        "verdict": report.verdict,  # type: ignore[dict-item]
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--dir", default="/tmp/olmoablate-bench/bench")
    args = ap.parse_args()
    root = Path(args.dir)
    generate(root, args.runs, args.steps)
    shutil.rmtree(root / ".report-cache", ignore_errors=True)
    n_runs = len(list((root / "runs").iterdir()))
    for label, cache in (("cold (parse all, write cache)", True), ("warm (cache hits)", True)):
        t = time_report(root, use_cache=cache)
        skip = ("total", "verdict", "cpu")
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in t.items() if k not in skip)
        print(
            f"{label}: report of {n_runs} runs x {args.steps} steps in {t['total']:.2f} s wall, "
            f"{t['cpu']:.2f} s CPU over all processes ({parts}; verdict {t['verdict']})"
        )
    print(f"goal: <= 5 s; cpus: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
