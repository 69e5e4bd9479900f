"""Downstream evaluation (ai2-olmo-eval) inside a real training run, with the run's own tokenizer.

Tiny models score at chance; what this pins is that the numbers are real, come from OLMo-core's
downstream evaluator tokenizing the task with the run's tokenizer file (the vendored dolma2 file,
or a spec's own ``tokenizer.json``), and land in metrics.jsonl at the eval points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from olmoablate.plan import checks as downstream
from olmoablate.testing.plans import certify, make_plan, run_entry

pytestmark = pytest.mark.slow

DOLMA2 = {
    "tokenizer": "dolma2",
    "vocab_size": 100352,
    "eos_token_id": 100257,
    "pad_token_id": 100277,
}


def _train_with_task(
    tmp_path: Path,
    task: str,
    *,
    arm: str = "baseline",
    arch: dict[str, Any] | None = None,
    data: dict[str, Any] = DOLMA2,
    loop_counts: list[int] | None = None,
) -> dict[str, Any]:
    """Train one tiny run for 2 steps with ``task`` scored at step 2; return that eval row."""
    if downstream.installed_tasks() is None:
        pytest.skip("the eval extra (ai2-olmo-eval) is not installed; scripts/setup.sh installs it")
    from olmoablate.run.job import run_job

    run_id = f"tiny-s0-{arm}"
    entry = run_entry(
        run_id,
        arm,
        arch or {},
        pair_id=run_id,
        steps=2,
        seq=256,
        batch_seqs=2,
        micro_seqs=2,
        dims={"vocab_size": data["vocab_size"]},
        training={"data": dict(data)},
        evaluation={
            "interval": 2,
            "downstream": [task],
            "max_downstream_batches": 2,
            "max_eval_tokens": 512,
        },
    )
    if loop_counts:
        entry["loop_counts"] = loop_counts
    plan = make_plan(
        tmp_path,
        [certify(entry)],
        vocab=data["vocab_size"],
        eos=data["eos_token_id"],
        train_tokens=20_000,
    )
    status = run_job(str(plan), run_id)
    assert status["state"] == "completed", status
    lines = (plan.parent / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    scored = [r for r in map(json.loads, lines) if f"eval/downstream/{task} (CE loss)" in r]
    assert [r["step"] for r in scored] == [2]
    return scored[0]


def test_downstream_task_scored_at_eval_points(tmp_path: Path) -> None:
    row = _train_with_task(tmp_path, "piqa")
    assert 0.0 <= row["eval/downstream/piqa (length-normalized accuracy)"] <= 1.0
    assert 0.0 < row["eval/downstream/piqa (CE loss)"] < 20.0


def test_downstream_task_scored_at_each_loop_count(tmp_path: Path) -> None:
    """A looped arm (b = 2) is scored on the task at its trained count (plain names) and again at
    loop count 1, through the same OLMo-core evaluator; the two passes really differ."""
    looped = {"body_layers": 4, "loops": 2, "tail": 1, "input_injection": True}
    row = _train_with_task(
        tmp_path, "piqa", arm="looped", arch={"looped": looped}, loop_counts=[1, 2]
    )
    at_b = row["eval/downstream/piqa (CE loss)"]
    at_1 = row["eval/downstream/piqa (CE loss) (loops=1)"]
    assert 0.0 < at_b < 20.0 and 0.0 < at_1 < 20.0
    assert at_1 != at_b  # a different number of loops is a different forward
    assert 0.0 <= row["eval/downstream/piqa (length-normalized accuracy) (loops=1)"] <= 1.0
    # the trained count is the standard pass: not scored a second time under another name
    assert "eval/downstream/piqa (CE loss) (loops=2)" not in row
    # the LM evaluator keeps scoring every loop count, the trained one included
    assert {
        "eval/lm/synthetic-heldout/CE loss (loops=1)",
        "eval/lm/synthetic-heldout/CE loss (loops=2)",
    } <= set(row)


def test_downstream_task_scored_in_the_runs_own_bpe_vocabulary(tmp_path: Path) -> None:
    """A run trained on the demo's 4,096-entry BPE is scored on PIQA tokenized with that BPE.

    With the dolma2 tokenizer the task's ids (up to 100k) would index past the 4,096-row
    embedding and the run would fail; completing with real numbers shows the run's own file is
    the one ai2-olmo-eval tokenized with.
    """
    from olmoablate.data.tokenizers import bpe_path

    bpe = {"tokenizer": str(bpe_path()), "vocab_size": 4096, "eos_token_id": 0, "pad_token_id": 1}
    row = _train_with_task(tmp_path, "piqa_rc_0shot", data=bpe)
    assert 0.0 <= row["eval/downstream/piqa_rc_0shot (length-normalized accuracy)"] <= 1.0
    assert 0.0 < row["eval/downstream/piqa_rc_0shot (CE loss)"] < 20.0
