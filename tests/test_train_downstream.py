"""Downstream evaluation (ai2-olmo-eval) inside a real training run, on the offline dolma2 tokenizer.

Tiny models score at chance; what this pins is that the numbers are real, come from OLMo-core's
downstream evaluator with our vendored tokenizer, and land in metrics.jsonl at the eval points.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.plan_fixture import make_plan, run_entry

from olmoablate.spec import downstream

pytestmark = pytest.mark.slow


def test_downstream_task_scored_at_eval_points(tmp_path: Path) -> None:
    if downstream.known_tasks() is None:
        pytest.skip("the eval extra (ai2-olmo-eval) is not installed; scripts/setup.sh installs it")
    from olmoablate.train.job import run_job

    vocab = 100352
    dims = {"vocab_size": vocab}
    entry = run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        pair_id="tiny-s0",
        steps=2,
        seq=256,
        batch_seqs=2,
        micro_seqs=2,
        dims=dims,
        training={
            "data": {
                "tokenizer": "dolma2",
                "vocab_size": vocab,
                "eos_token_id": 100257,
                "pad_token_id": 100277,
            }
        },
        evaluation={
            "interval": 2,
            "downstream": ["piqa"],
            "max_downstream_batches": 2,
            "max_eval_tokens": 512,
        },
    )
    from olmoablate.spec.certificate import certificate_of

    entry["certificate"] = certificate_of(entry, "tokens")
    plan = make_plan(tmp_path, [entry], vocab=vocab, eos=100257, train_tokens=20_000)
    status = run_job(str(plan), "tiny-s0-baseline")
    assert status["state"] == "completed", status
    rows = [
        json.loads(x)
        for x in (plan.parent / "runs" / "tiny-s0-baseline" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    scored = [r for r in rows if any(k.startswith("eval/downstream/piqa") for k in r)]
    assert [r["step"] for r in scored] == [2]
    row = scored[0]
    acc = row["eval/downstream/piqa (length-normalized accuracy)"]
    ce = row["eval/downstream/piqa (CE loss)"]
    assert 0.0 <= acc <= 1.0
    assert 0.0 < ce < 20.0


def test_downstream_task_scored_at_each_loop_count(tmp_path: Path) -> None:
    """A looped arm (b = 2) is scored on the task at its trained count (plain names) and again at
    loop count 1, through the same OLMo-core evaluator; the two passes really differ."""
    if downstream.known_tasks() is None:
        pytest.skip("the eval extra (ai2-olmo-eval) is not installed; scripts/setup.sh installs it")
    from olmoablate.train.job import run_job

    vocab = 100352
    looped = {"body_layers": 4, "loops": 2, "tail": 1, "input_injection": True}
    entry = run_entry(
        "tiny-s0-looped",
        "looped",
        {"looped": looped},
        pair_id="tiny-s0-looped",
        steps=2,
        seq=256,
        batch_seqs=2,
        micro_seqs=2,
        dims={"vocab_size": vocab},
        training={
            "data": {
                "tokenizer": "dolma2",
                "vocab_size": vocab,
                "eos_token_id": 100257,
                "pad_token_id": 100277,
            }
        },
        evaluation={
            "interval": 2,
            "downstream": ["piqa"],
            "max_downstream_batches": 2,
            "max_eval_tokens": 512,
        },
    )
    entry["loop_counts"] = [1, 2]
    from olmoablate.spec.certificate import certificate_of

    entry["certificate"] = certificate_of(entry, "tokens")
    plan = make_plan(tmp_path, [entry], vocab=vocab, eos=100257, train_tokens=20_000)
    status = run_job(str(plan), "tiny-s0-looped")
    assert status["state"] == "completed", status
    rows = [
        json.loads(x)
        for x in (plan.parent / "runs" / "tiny-s0-looped" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    row = next(r for r in rows if "eval/downstream/piqa (CE loss)" in r)
    assert row["step"] == 2
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
    if downstream.known_tasks() is None:
        pytest.skip("the eval extra (ai2-olmo-eval) is not installed; scripts/setup.sh installs it")
    from olmoablate.data.vocab import bpe_path
    from olmoablate.train.job import run_job

    vocab = 4096
    entry = run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        pair_id="tiny-s0",
        steps=2,
        seq=256,
        batch_seqs=2,
        micro_seqs=2,
        dims={"vocab_size": vocab},
        training={
            "data": {
                "tokenizer": str(bpe_path()),
                "vocab_size": vocab,
                "eos_token_id": 0,
                "pad_token_id": 1,
            }
        },
        evaluation={
            "interval": 2,
            "downstream": ["piqa_rc_0shot"],
            "max_downstream_batches": 2,
            "max_eval_tokens": 512,
        },
    )
    from olmoablate.spec.certificate import certificate_of

    entry["certificate"] = certificate_of(entry, "tokens")
    plan = make_plan(tmp_path, [entry], vocab=vocab, eos=0, train_tokens=20_000)
    status = run_job(str(plan), "tiny-s0-baseline")
    assert status["state"] == "completed", status
    rows = [
        json.loads(x)
        for x in (plan.parent / "runs" / "tiny-s0-baseline" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    row = next(r for r in rows if any(k.startswith("eval/downstream/piqa_rc_0shot") for k in r))
    assert 0.0 <= row["eval/downstream/piqa_rc_0shot (length-normalized accuracy)"] <= 1.0
    assert 0.0 < row["eval/downstream/piqa_rc_0shot (CE loss)"] < 20.0
