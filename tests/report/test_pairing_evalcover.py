"""Tests for olmoablate.report.pairing: eval tokens per point and CE beside the unigram floor."""

from __future__ import annotations

import json
from pathlib import Path

from olmoablate.io import read_json, write_json_atomic
from olmoablate.report.assemble import build
from olmoablate.report.collect import collect
from olmoablate.report.pairing import coverage_lines
from olmoablate.testing.synthetic import SynthSpec, make_results

GATE = {"stage": "1B", "variant": "sn_da", "metric": "eval/lm/demo-heldout/CE loss"}


def _results(tmp_path: Path, tokens: dict[str, int] | None, entropy: float = 9.0) -> Path:
    spec = SynthSpec(steps=40, eval_interval=10, gate=GATE)
    root = tmp_path / spec.name
    make_results(root, spec)
    plan = read_json(root / "plan.json")
    # what `plan` measured from the set's files (contract.plan.EvalSetInfo)
    info = {"files": 1, "tokens": 1100, "documents": 10, "sequences": 10}
    info |= {"scored_tokens": 1000, "unigram_entropy_nats": entropy}
    plan["eval_sets"] = {"1B": {"demo-heldout": info}}
    write_json_atomic(root / "plan.json", plan)
    for arm, n in (tokens or {}).items():
        path = root / "runs" / f"1B-s0-{arm}" / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for r in rows:
            if "eval/lm/demo-heldout/CE loss" in r:
                r["eval/lm/demo-heldout/tokens"] = float(n)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_lines_show_tokens_scored_and_unigram_entropy(tmp_path: Path) -> None:
    root = _results(tmp_path, {"baseline": 1000, "sn_da": 1000})
    lines = coverage_lines(collect(root, use_cache=False, workers=1))
    assert len(lines) == 2 and not any(x.startswith("WARNING") for x in lines), lines
    base = next(x for x in lines if "baseline" in x)
    assert "eval tokens per point 1,000 of 1,000 scorable (100.0%)" in base
    ce = float(base.split("final CE ")[1].split(" ")[0])
    assert f"held-out unigram entropy 9.000 ({9.0 - ce:+.2f} nats below)" in base
    assert build(collect(root, use_cache=False, workers=1)).eval_lines == lines


def test_arms_that_scored_different_tokens_are_flagged(tmp_path: Path) -> None:
    root = _results(tmp_path, {"baseline": 1000, "sn_da": 400})
    lines = coverage_lines(collect(root, use_cache=False, workers=1))
    warn = [x for x in lines if x.startswith("WARNING")]
    assert len(warn) == 1 and "baseline 1,000" in warn[0] and "sn_da 400" in warn[0], lines
    assert any("sn_da" in x and "(40.0%)" in x for x in lines)


def test_runs_without_token_counts_say_so(tmp_path: Path) -> None:
    lines = coverage_lines(collect(_results(tmp_path, None), use_cache=False, workers=1))
    assert lines and all("eval tokens per point not recorded" in x for x in lines), lines
