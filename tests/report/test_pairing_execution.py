"""Execution parity (issue 27, 2): the cost of a pair is compared only when both arms' summary.json
``execution`` blocks agree; otherwise the pair is flagged and its cost stays out of the gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmoablate.report.assemble import Report, build
from olmoablate.report.collect import collect
from olmoablate.report.pairing import PARITY_KEYS, execution_mismatch
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

GATE = {
    "metric": "eval/lm/demo-heldout/CE loss",
    "min_effect": 0.01,
    "promote_to": ["3B", "7B"],
    "noise": {"floor": {"sd": 0.005, "known": True}},
}

EXECUTION: dict[str, Any] = {
    "device": "cuda",
    "world_size": 16,
    "data_parallel": "hsdp",
    "param_dtype": "bfloat16",
    "autocast_dtype": None,
    "compute_dtype": "bfloat16",
    "attention_backend": "FlashAttention2Backend",
    "compile": {"requested": "auto", "compiled": True, "how": "per block"},
    "gpu_model": "NVIDIA H100 80GB HBM3",
}


def _report(
    tmp_path: Path, baseline: dict[str, Any], variant: dict[str, Any], **truth: Any
) -> Report:
    root = tmp_path / "synth"
    make_results(
        root,
        SynthSpec(gate=GATE),
        {
            "baseline": ArmTruth(execution=baseline),
            "sn_da": ArmTruth(offset=-0.05, execution=variant, **truth),
        },
    )
    return build(collect(root, use_cache=False, workers=1))


def test_same_execution_compares_cost(tmp_path: Path) -> None:
    rep = _report(tmp_path, EXECUTION, dict(EXECUTION))
    (pair,) = rep.pairs
    assert pair.execution_mismatch == [] and pair.overhead["peak_memory"] == 0.0
    assert rep.verdict == "proceed", rep.reasons


def test_a_different_attention_kernel_flags_the_pair_and_keeps_cost_out_of_the_gate(
    tmp_path: Path,
) -> None:
    """The variant's node fell back to SDPA (flash-attn missing there): its 40% slower steps
    would have stopped the variant on a kernel difference. Now the pair is flagged, its cost is
    not compared, and the gate cannot proceed without a comparable cost."""
    other = {**EXECUTION, "attention_backend": "TorchAttentionBackend"}
    rep = _report(tmp_path, EXECUTION, other, step_time_s=0.7)
    (pair,) = rep.pairs
    assert pair.execution_mismatch == [
        "attention_backend: baseline FlashAttention2Backend, variant TorchAttentionBackend"
    ]
    assert any("arms ran different executions" in n for n in pair.notes)
    assert all(v is None for v in pair.overhead.values())
    assert {r["ratio"] for r in pair.cost if r["source"] != "plan"} == {None}
    assert not any("step time overhead" in r for r in rep.reasons), rep.reasons
    assert rep.verdict == "inconclusive", rep.reasons
    assert any("overhead limits cannot be checked" in r for r in rep.reasons)


def test_every_parity_field_is_compared() -> None:
    for key in PARITY_KEYS:
        changed = {**EXECUTION, key: "something else"}
        assert [p.split(":")[0] for p in execution_mismatch(EXECUTION, changed)] == [key]
    missing = {k: v for k, v in EXECUTION.items() if k != "gpu_model"}
    assert execution_mismatch(EXECUTION, missing) == [
        "gpu_model: baseline NVIDIA H100 80GB HBM3, variant not recorded"
    ]
    assert execution_mismatch(None, None) == []
    assert execution_mismatch(EXECUTION, None)[0].startswith("the variant recorded no execution")
