"""Tests for olmoablate.run.eval: the whole held-out set is scored, exactly once per point.

Unit tests build the real OLMo-core-based dataset on raw token files and feed the real evaluator
hand-made loss tensors; the slow test trains a tokenizer.json spec (the shipped 4,096-entry BPE)
through `data prepare` -> `validate` -> `plan` -> the training job and checks every eval point
scored every held-out token, including those of a document much longer than the sequence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from olmo_core.data import TokenizerConfig

from olmoablate.plan.tokens import chunk_bounds, eval_sequences
from olmoablate.run.eval import WholeSetEvalDatasetConfig, WholeSetLMEvaluator
from olmoablate.testing import REPO


def _held(path: Path, lengths: list[int], eos: int = 0) -> np.ndarray:
    rng = np.random.default_rng(0)
    arr = np.concatenate([np.append(rng.integers(2, 4096, n - 1), eos) for n in lengths])
    path.write_bytes(arr.astype("<u2").tobytes())
    return arr


def test_long_documents_are_cut_into_chunks_and_padded_to_whole_batches(tmp_path: Path) -> None:
    lengths = [300, 20, 33, 64]
    arr = _held(tmp_path / "held.bin", lengths)
    cfg = WholeSetEvalDatasetConfig(
        tokenizer=TokenizerConfig(vocab_size=4096, eos_token_id=0, pad_token_id=1),
        paths=[str(tmp_path / "held.bin")],
        metadata=[{"label": "held"}],
        sequence_length=32,
        work_dir=str(tmp_path / "work"),
        pad_to_instances=8,
    )
    ds = cfg.build()
    ds.prepare()
    real = eval_sequences(np.array(lengths), 32)
    assert ds.real_instances == real == len(chunk_bounds(arr, 0, 32))
    assert len(ds) % 8 == 0 and real <= len(ds) < real + 8
    predicted = np.zeros(len(arr), dtype=int)
    for i, (s, e) in enumerate(chunk_bounds(arr, 0, 32)):
        item = ds[i]
        n = e - s
        assert item["input_ids"][:n].tolist() == arr[s:e].tolist()
        assert item["label_mask"][:n].all() and not item["label_mask"][n:].any()
        predicted[s + 1 : e] += 1
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert predicted.sum() == len(arr) - len(lengths) and (np.delete(predicted, first) == 1).all()
    for i in range(real, len(ds)):  # batch padding: nothing scored
        assert not ds[i]["label_mask"].any()


def test_evaluator_averages_only_real_targets_and_counts_them() -> None:
    ev = WholeSetLMEvaluator(name="lm", batches=[], labels=["held"], device=torch.device("cpu"))
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    ce = torch.tensor([[1.0, 2.0, 0.0, 0.0], [4.0, 0.0, 0.0, 0.0]])  # 0 = ignored targets
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "label_mask": mask,
             "metadata": [{"label": "held"}, {"label": "held"}]}  # fmt: skip
    ev.update_metrics(batch, ce, None)
    out = ev.compute_metrics()
    # targets: tokens 1, 2 of row 0 and token 1 of row 1 -> (1 + 2 + 4) / 3
    assert out["held/CE loss"].item() == pytest.approx(7 / 3)
    assert out["held/tokens"].item() == 3


SPEC = """\
name: bpe-e2e
sizes: [micro]
custom_sizes:
  micro: {d_model: 32, n_layers: 2, n_heads: 2, mlp_hidden_size: 64, sliding_window: 32, vocab_size: 4096}
seeds: [0]
variants:
  v: {layers: {n_layers: 1}}
training:
  sequence_length: 64
  tokens: 1024
  global_batch_size: 256
  optimizer: {lr: 3.0e-3}
  schedule: {warmup_steps: 1}
  data: {tokenizer: TOKENIZER, paths: [data/bpe4096/train.bin]}
  checkpoint_interval: 4
  wandb: {mode: disabled}
evaluation:
  interval: 2
  lm_sets: {held: [data/bpe4096/heldout.bin]}
  depth: final
topology: {gpus_per_node: 0}
"""


@pytest.mark.slow
def test_tokenizer_json_spec_trains_and_scores_the_whole_heldout_set(tmp_path: Path) -> None:
    from olmoablate.data.tokenizers import bpe_path
    from olmoablate.run.job import run_job

    src = tmp_path / "src"
    src.mkdir()
    long_doc = "".join(f"Section {i}: the function f{i}(x) returns x * {i}.\n" for i in range(120))
    (src / "a.rst.txt").write_text(long_doc)  # held out (index 0): ~2,000 tokens at seq 64
    for i in range(1, 9):
        (src / f"b{i}.rst.txt").write_text(f"Document {i} about lists and dicts. " * 40)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "olmoablate", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True)  # fmt: skip

    prep = cli("data", "prepare", "--out", "data", "--source-dir", str(src),
               "--heldout-every", "5", "--tokenizer", "bpe4096")  # fmt: skip
    assert prep.returncode == 0, prep.stderr
    (tmp_path / "s.yaml").write_text(SPEC.replace("TOKENIZER", str(bpe_path())))
    assert cli("validate", "s.yaml").returncode == 0
    planned = cli("plan", "s.yaml")
    assert planned.returncode == 0, planned.stderr
    plan_path = tmp_path / "results" / "bpe-e2e" / "plan.json"
    plan = json.loads(plan_path.read_text())
    held = plan["eval_sets"]["micro"]["held"]
    assert held["sequences"] > held["documents"]  # the long document gives many chunks
    assert run_job(str(plan_path), "micro-s0-baseline")["state"] == "completed"
    rows = [json.loads(line) for line in
            (plan_path.parent / "runs" / "micro-s0-baseline" / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    evals = [r for r in rows if "eval/lm/held/CE loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    for r in evals:
        assert r["eval/lm/held/tokens"] == held["scored_tokens"]
        assert np.isfinite(r["eval/lm/held/CE loss"]) and r["eval/lm/held/CE loss"] < 9.0
    # `evaluation.depth: final`: the depth diagnostic at the last eval point only
    assert not [k for k in evals[0] if k.startswith("eval/depth/")]
    for r in evals[1:]:
        # the depth diagnostic on the same tokens: its last layer is the model's own eval CE
        # (the job's eval runs in bf16/fp32 as the model does; tolerance for the eager re-run)
        layers = sorted(k for k in r if k.startswith("eval/depth/held/layer_"))
        assert layers, sorted(r)
        last = max(layers, key=lambda k: int(k.split("layer_")[1].split()[0]))
        assert abs(r[last] - r["eval/lm/held/CE loss"]) < 1e-3
        assert "eval/depth/held/first_within_0.05" in r
