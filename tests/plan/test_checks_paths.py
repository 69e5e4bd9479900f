"""spec/paths.py: spec-folder resolution, packaged tokenizer names, what the plan records."""

from __future__ import annotations

from pathlib import Path

from olmoablate.plan.checks import check, resolve
from olmoablate.plan.expand import build_plan
from olmoablate.plan.load import load_spec
from olmoablate.plan.tokens import packaged_tokenizer
from olmoablate.testing import REPO


def test_relative_paths_resolve_against_the_spec_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"")
    assert resolve("data/a.bin", tmp_path) == (str(tmp_path / "data" / "a.bin"), None)
    assert resolve("../x/y.bin", tmp_path / "specs")[0] == str(tmp_path / "x" / "y.bin")
    for kept in ("${ROOT}/a.bin", "s3://b/a.bin", "/abs/a.bin"):
        assert resolve(kept, tmp_path) == (kept, None)


def test_demo_plan_records_absolute_paths_and_the_packaged_tokenizer() -> None:
    plan = build_plan(load_spec(REPO / "specs" / "demo.yaml"))
    run = plan.runs[0]
    assert run.training.data.tokenizer == str(packaged_tokenizer("bpe4096-python-docs"))
    assert run.training.data.paths == [str(REPO / "data" / "demo" / "bpe4096" / "train.bin")]
    assert run.evaluation.lm_sets["python-docs"] == [str(REPO / "data/demo/bpe4096/heldout.bin")]
    assert run.training.data.vocab_size == 4096 and run.training.data.eos_token_id == 0


def test_url_forms() -> None:
    assert check("s3://bucket/key.npy", ("p",)).note == "s3://bucket/key.npy (remote: not checked here)"
    assert "not a gs:// URL" in (check("gs:///key", ("p",)).warning or "")
    assert "unknown URL scheme ftp://" in (check("ftp://h/x", ("p",)).warning or "")
    assert check("s3://bucket/", ("p",), folder=True).note is not None


def test_gpu_memory_is_no_part_of_the_certificate(tmp_path: Path) -> None:
    spec = REPO / "specs" / "siamese_depth_attention.yaml"
    a = build_plan(load_spec(spec))
    b = build_plan(load_spec(spec, ["topology.gpu_memory_gb=141"]))
    assert [r.certificate for r in a.runs] == [r.certificate for r in b.runs]
    assert "gpu_memory_gb" not in str(b.as_json()["runs"][0]["topology"])
