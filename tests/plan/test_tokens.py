"""Tests for olmoablate.plan.tokens / spec.datacheck: tokenizer.json specs and token-file checks.

The token files are written here with numpy (and once through `data prepare`), so each check is
exercised on real bytes; every rejection must name the file and come from `olmoablate validate`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olmoablate.data.tokenizers import bpe_path
from olmoablate.plan.expand import build_plan
from olmoablate.plan.load import SpecError, load_spec
from olmoablate.plan.sizes import BPE_SHA256
from olmoablate.plan.tokens import (
    chunk_bounds,
    eval_sequences,
    narrowest_dtype,
    scan_token_file,
    sparse_counts,
    tokenizer_info,
    unigram_entropy,
)
from olmoablate.testing import REPO

BPE = str(bpe_path())

SPEC = """\
name: bpe
sizes: [tiny]
custom_sizes:
  tiny: {{d_model: 32, n_layers: 2, n_heads: 2, mlp_hidden_size: 64, sliding_window: 16, vocab_size: {vocab}}}
seeds: [0]
variants:
  v: {{layers: {{n_layers: 1}}}}
training:
  sequence_length: 32
  tokens: 2048
  global_batch_size: {batch}
  optimizer: {{lr: 1.0e-3}}
  data: {{tokenizer: {tokenizer}, paths: [train.bin]{extra}}}
evaluation:
  interval: 2
  lm_sets: {{held: [held.bin]}}
topology: {{gpus_per_node: 0}}
"""


def _docs(n_docs: int, length: int, eos: int, seed: int = 0, vocab: int = 4096) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n_docs):
        parts.append(rng.integers(2, vocab, length))
        parts.append([eos])
    return np.concatenate(parts)


def _write(path: Path, ids: np.ndarray, dtype: str = "uint16") -> Path:
    path.write_bytes(np.asarray(ids).astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    return path


def _spec(tmp_path: Path, *, vocab: int = 4096, batch: int = 256, tokenizer: str = BPE,
          extra: str = "") -> Path:  # fmt: skip
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(vocab=vocab, batch=batch, tokenizer=tokenizer, extra=extra))
    return path


def _problems(spec: Path, cwd: Path) -> list[str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        load_spec(spec)
    except SpecError as err:
        return [str(p) for p in err.problems]
    finally:
        os.chdir(old)
    return []


@pytest.fixture()
def good_files(tmp_path: Path) -> Path:
    _write(tmp_path / "train.bin", _docs(20, 100, eos=0))
    _write(tmp_path / "held.bin", _docs(4, 100, eos=0, seed=1))
    return tmp_path


def test_shipped_bpe_ids_come_from_the_file() -> None:
    info = tokenizer_info(BPE)
    assert (info.vocab_size, info.eos_token_id, info.pad_token_id) == (4096, 0, 1)
    assert info.sha256 == BPE_SHA256
    assert narrowest_dtype(4096) == "uint16" and narrowest_dtype(65536) == "uint16"
    assert narrowest_dtype(65537) == "uint32" and narrowest_dtype(100352) == "uint32"


def test_packaged_tokenizer_facts_are_the_files() -> None:
    """A packaged name answers from constants (no parse at `validate`); each must be what its
    file says when read as a tokenizer.json path."""
    from olmoablate.plan.tokens import PACKAGED_TOKENIZERS, packaged_tokenizer

    for name in PACKAGED_TOKENIZERS:
        path = packaged_tokenizer(name)
        assert path is not None and path.is_file()
        assert tokenizer_info(name) == tokenizer_info(str(path))


def test_tokenizer_json_spec_validates_and_plans(good_files: Path) -> None:
    spec = _spec(good_files)
    assert _problems(spec, good_files) == []
    old = Path.cwd()
    os.chdir(good_files)
    try:
        plan = build_plan(load_spec(spec))
    finally:
        os.chdir(old)
    data = plan.runs[0].training.data
    assert (data.eos_token_id, data.pad_token_id, data.dtype) == (0, 1, "uint16")
    assert data.tokenizer_sha256 == BPE_SHA256
    held = plan.eval_sets["tiny"]["held"]
    # 4 documents of 101 tokens (EOS included) at seq 32: 1 + ceil(69 / 31) = 4 chunks each
    assert held.sequences == 16 and held.scored_tokens == 4 * 100
    assert held.tokens == 404 and (held.unigram_entropy_nats or 0) > 0


def test_vocab_smaller_than_tokenizer_is_rejected(good_files: Path) -> None:
    probs = _problems(_spec(good_files, vocab=1024), good_files)
    assert any("training.data.tokenizer" in p and "4096 ids" in p for p in probs), probs


def test_missing_tokenizer_file_is_one_problem(good_files: Path) -> None:
    probs = _problems(_spec(good_files, tokenizer="nope/tokenizer.json"), good_files)
    assert len(probs) == 1 and "nope/tokenizer.json not found" in probs[0], probs


def test_eos_that_disagrees_with_the_file_is_rejected(good_files: Path) -> None:
    probs = _problems(_spec(good_files, extra=", eos_token_id: 5"), good_files)
    assert any("eos_token_id=5 disagrees" in p for p in probs), probs


def test_token_id_outside_vocab_names_the_file(good_files: Path) -> None:
    ids = _docs(4, 100, eos=0, seed=1)
    ids[7] = 5000
    _write(good_files / "held.bin", ids)
    probs = _problems(_spec(good_files), good_files)
    assert len(probs) == 1, probs
    assert "held.bin" in probs[0] and "largest id 5000" in probs[0]
    assert "evaluation.lm_sets.held" in probs[0]


def test_wrong_dtype_is_rejected_with_the_file_named(good_files: Path) -> None:
    # uint32 ids < 4096 read as uint16 are all valid ids: only the wider reading reveals it
    _write(good_files / "train.bin", _docs(20, 100, eos=0), dtype="uint32")
    probs = _problems(_spec(good_files), good_files)
    assert any("train.bin looks like a uint32 file" in p for p in probs), probs
    # an odd byte count cannot be uint16 at all
    (good_files / "train.bin").write_bytes(b"\0" * 201)
    probs = _problems(_spec(good_files), good_files)
    assert any("train.bin: 201 bytes is not a whole number of uint16" in p for p in probs), probs


def test_manifest_dtype_and_tokenizer_must_match(good_files: Path) -> None:
    manifest = {
        "dtype": "uint32",
        "tokenizer": {"name": "dolma2", "sha256": "x"},
        "files": {"train": {"path": "train.bin"}},
    }
    (good_files / "manifest.json").write_text(json.dumps(manifest))
    probs = _problems(_spec(good_files), good_files)
    assert any("train.bin is uint32 (per" in p for p in probs), probs
    manifest["dtype"] = "uint16"
    (good_files / "manifest.json").write_text(json.dumps(manifest))
    probs = _problems(_spec(good_files), good_files)
    assert any("made with tokenizer dolma2" in p for p in probs), probs


def test_eval_set_too_small_for_one_batch_is_rejected(good_files: Path) -> None:
    # 16 eval sequences; a 1024-token batch at seq 32 is 32 sequences
    probs = _problems(_spec(good_files, batch=1024), good_files)
    assert any(
        "evaluation.lm_sets.held" in p and "16 sequences" in p and "32 sequences" in p
        for p in probs
    ), probs
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", "spec.yaml"],
        cwd=good_files,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "held.bin" in proc.stderr and "one eval batch is 32 sequences" in proc.stderr


def test_chunks_cover_every_token_once() -> None:
    rng = np.random.default_rng(3)
    lengths = [1, 2, 31, 32, 33, 63, 64, 200, 5]
    arr = np.concatenate([np.append(rng.integers(2, 100, n - 1), 0) for n in lengths])
    bounds = chunk_bounds(arr, 0, 32)
    assert len(bounds) == eval_sequences(np.array(lengths), 32)
    assert (bounds[:, 1] - bounds[:, 0] <= 32).all()
    targets = np.zeros(len(arr), dtype=int)
    for s, e in bounds:
        targets[s + 1 : e] += 1  # positions predicted inside this chunk
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    expected = np.ones(len(arr), dtype=int)
    expected[starts] = 0  # each document's first token has no context
    assert (targets == expected).all()


def test_unigram_entropy_matches_hand_computation() -> None:
    train, held = np.array([3, 1, 0, 0]), np.array([1, 1, 0, 0])
    p = (train + 0.5) / (4 + 0.5 * 4)
    assert unigram_entropy(train, held, 4) == pytest.approx(-(np.log(p[0]) + np.log(p[1])) / 2)


def test_unigram_entropy_takes_sparse_counts_too() -> None:
    train, held = np.array([3, 1, 0, 0, 7]), np.array([1, 1, 0, 2, 5])
    dense = unigram_entropy(train, held, 4)  # id 4 is outside the vocabulary: ignored
    assert unigram_entropy({0: 3, 1: 1, 4: 7}, {0: 1, 1: 1, 3: 2}, 4) == pytest.approx(dense)
    assert sparse_counts(train) == {0: 3, 1: 1, 4: 7}
    assert np.isnan(unigram_entropy(train, np.zeros(4), 4))


def test_token_scan_is_cached_per_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second validate of an unchanged file reads neither the file nor numpy; a rewritten
    file (new size/mtime) and a corrupt cache are scanned again, with the same answer."""
    from olmoablate.plan import tokens

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "t.bin"
    _docs(5, 40, eos=0).astype(np.uint16).tofile(path)
    tokens._scan.cache_clear()
    first = scan_token_file(path, "uint16", 0, 16, 4096)
    assert first.documents == 5 and first.max_id < 4096 and first.counts
    assert sum(first.counts.values()) == first.tokens

    def no_read(*args: object) -> None:
        pytest.fail("the file was read again")

    monkeypatch.setattr(tokens, "_read_scan", no_read)
    tokens._scan.cache_clear()
    assert scan_token_file(path, "uint16", 0, 16, 4096) == first
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    _docs(6, 40, eos=0, seed=1).astype(np.uint16).tofile(path)  # new content, new size
    tokens._scan.cache_clear()
    second = scan_token_file(path, "uint16", 0, 16, 4096)
    assert second.documents == 6 and second != first

    for entry in (tmp_path / "cache" / "olmoablate" / tokens._SCAN_CACHE).glob("*.json"):
        entry.write_text("{not json")
    tokens._scan.cache_clear()
    assert scan_token_file(path, "uint16", 0, 16, 4096) == second
