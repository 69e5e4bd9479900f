"""Tests for olmoablate.data: the vendored dolma2 tokenizer and the OLMo-core token files.

The corpus here is a handful of small ``.rst.txt`` files written to a temporary folder
(``--source-dir``), so these tests neither need the Debian package nor take more than seconds.
The token files are read back through OLMo-core's own ``NumpyFSLDatasetConfig`` so a format
mismatch (dtype, byte order, np.save header) fails here rather than in a training job.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from olmoablate.data.corpus import TOKEN_DTYPE, ensure_demo_data, fix_command, verify
from olmoablate.data.prepare import data_app, prepare
from olmoablate.data.tokenizers import (
    TOKENIZER_SHA256,
    load_tokenizer,
    tokenizer_available,
    tokenizer_path,
)
from olmoablate.errors import UserError
from olmoablate.plan.sizes import DOLMA2_EOS_TOKEN_ID, DOLMA2_PAD_TOKEN_ID, DOLMA2_VOCAB_SIZE
from olmoablate.testing import REPO

# Sorted by relative path: a.rst.txt, b/c.rst.txt, b/d.rst.txt, e.rst.txt, f.rst.txt, g.rst.txt.
DOCS: dict[str, str] = {
    "b/d.rst.txt": "Lists are mutable sequences.\n\n>>> [1, 2, 3]\n",
    "a.rst.txt": "The Python Tutorial\n*******************\n\nPython is easy to learn.\n",
    "b/c.rst.txt": "Dictionaries map keys to values — café, naïve, 日本語.\n",
    "e.rst.txt": "A literal <|endoftext|> in text must not become EOS.\n",
    "f.rst.txt": "Generators yield values lazily.\n" * 5,
    "g.rst.txt": "Exceptions: try, except, finally.\n",
}
EMPTY = "z_empty.rst.txt"


def _write_corpus(root: Path, docs: dict[str, str] = DOCS) -> Path:
    src = root / "src"
    for rel, text in docs.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text, encoding="utf-8")
    (src / EMPTY).write_text("  \n", encoding="utf-8")  # skipped: no document
    (src / "ignored.txt").write_text("not an .rst.txt file", encoding="utf-8")
    return src


def _expected(split_every: int) -> dict[str, list[int]]:
    """Reference token streams computed independently of `prepare` (one encode per document)."""
    tok = load_tokenizer()
    out: dict[str, list[int]] = {"train": [], "heldout": []}
    for i, rel in enumerate(sorted(DOCS)):
        split = "heldout" if i % split_every == 0 else "train"
        out[split] += tok.encode(DOCS[rel], add_special_tokens=False).ids + [DOLMA2_EOS_TOKEN_ID]
    return out


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olmoablate", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


# --- tokenizer -------------------------------------------------------------------------------


def test_vendored_tokenizer_is_the_pinned_file() -> None:
    path = tokenizer_path()
    assert path.name == "allenai_dolma2.json"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == TOKENIZER_SHA256
    assert tokenizer_available()
    notice = path.parent / "NOTICE-dolma2-tokenizer.txt"
    assert "Apache License" in notice.read_text(encoding="utf-8")


def test_tokenizer_known_ids() -> None:
    tok = load_tokenizer()
    assert tok.encode("Hello world!", add_special_tokens=False).ids == [9906, 1917, 0]
    assert tok.get_vocab_size() == DOLMA2_VOCAB_SIZE == 100278
    assert tok.token_to_id("<|endoftext|>") == DOLMA2_EOS_TOKEN_ID == 100257
    assert tok.token_to_id("<|pad|>") == DOLMA2_PAD_TOKEN_ID == 100277


def test_tokenizer_round_trip() -> None:
    tok = load_tokenizer()
    text = "def f(x):\n    return x ** 2  # café, naïve, 日本語, emoji 🙂\n\tTabs  and  spaces.\n"
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids) == text


def test_literal_special_token_is_plain_text() -> None:
    """EOS must only mark document ends: a literal '<|endoftext|>' string is encoded as text."""
    ids = load_tokenizer().encode("a <|endoftext|> b", add_special_tokens=False).ids
    assert DOLMA2_EOS_TOKEN_ID not in ids
    raw = load_tokenizer(encode_special_tokens=False)
    assert DOLMA2_EOS_TOKEN_ID in raw.encode("a <|endoftext|> b", add_special_tokens=False).ids


# --- prepare ---------------------------------------------------------------------------------


def test_prepare_writes_raw_uint32_files_with_eos(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    result = prepare(tmp_path / "out", source_dir=src, heldout_every=3)
    m = result.manifest
    assert not result.skipped
    expected = _expected(3)  # docs 0 (a) and 3 (e) held out
    assert m.file_count == 7 and m.empty_files == 1
    assert m.documents == {"train": 4, "heldout": 2}
    assert m.tokens == {"train": len(expected["train"]), "heldout": len(expected["heldout"])}
    for split in ("train", "heldout"):
        raw = m.path_of(split).read_bytes()
        assert len(raw) == 4 * m.tokens[split]  # raw array: no np.save header
        assert np.frombuffer(raw, dtype="<u4").tolist() == expected[split]
        assert hashlib.sha256(raw).hexdigest() == m.files[split]["sha256"]
    train = np.memmap(m.train_path, dtype=np.uint32, mode="r")
    assert int((train == DOLMA2_EOS_TOKEN_ID).sum()) == m.documents["train"]
    assert train[-1] == DOLMA2_EOS_TOKEN_ID
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["dtype"] == "uint32" and on_disk["eos_token_id"] == 100257
    assert on_disk["tokenizer"]["sha256"] == TOKENIZER_SHA256
    assert on_disk["source"]["sha256"] == m.source_sha256


def test_olmo_core_reads_the_token_files(tmp_path: Path) -> None:
    from olmo_core.data import NumpyDatasetDType, NumpyFSLDatasetConfig, TokenizerConfig

    src = _write_corpus(tmp_path)
    m = prepare(tmp_path / "out", source_dir=src, heldout_every=3).manifest
    tokenizer = TokenizerConfig.dolma2()
    seq = 8
    # dtype left to OLMo-core's inference from the tokenizer's vocab size: must match ours.
    config = NumpyFSLDatasetConfig(
        paths=[str(m.train_path)],
        tokenizer=tokenizer,
        sequence_length=seq,
        work_dir=str(tmp_path / "work"),
        generate_doc_lengths=True,
    )
    assert config.get_dtype() == np.dtype(TOKEN_DTYPE) == np.uint32
    assert NumpyDatasetDType(m.dtype).as_np_dtype() == np.uint32
    dataset = config.build()
    dataset.prepare()
    expected = _expected(3)["train"]
    assert len(dataset) == len(expected) // seq
    got: list[int] = []
    for i in range(len(dataset)):
        item = dataset[i]
        got += item["input_ids"].tolist()
        # doc_lens come from EOS positions: they sum to the instance length.
        assert int(item["doc_lens"].sum()) == seq
    assert got == expected[: len(got)]
    # EOS sits between documents in OLMo-core's view too.
    first_doc = load_tokenizer().encode(DOCS["b/c.rst.txt"], add_special_tokens=False).ids
    assert got[len(first_doc)] == DOLMA2_EOS_TOKEN_ID


def test_prepare_is_idempotent_and_rebuilds_on_change(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    out = tmp_path / "out"
    first = prepare(out, source_dir=src, heldout_every=3)
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    second = prepare(out, source_dir=src, heldout_every=3)
    assert second.skipped and second.manifest.files == first.manifest.files
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes
    (src / "h.rst.txt").write_text("A new document changes the corpus hash.\n")
    third = prepare(out, source_dir=src, heldout_every=3)
    assert not third.skipped and third.reason == "rebuilding: inputs changed"
    # h.rst.txt is document 6 in sorted order: 6 % 3 == 0, so it is held out
    assert third.manifest.documents == {"train": 4, "heldout": 3}
    assert first.manifest.documents == {"train": 4, "heldout": 2}
    # a corrupt file is rebuilt, not kept
    with open(out / "train.bin", "r+b") as fh:
        fh.write(b"\xff\xff\xff\xff")
    fourth = prepare(out, source_dir=src, heldout_every=3)
    assert not fourth.skipped and "sha256" in fourth.reason
    assert verify(out).files == third.manifest.files


def test_max_tokens_caps_train_at_whole_documents(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    full = _expected(3)["train"]
    tok = load_tokenizer()
    first_two = sum(
        len(tok.encode(DOCS[r], add_special_tokens=False).ids) + 1
        for r in ("b/c.rst.txt", "b/d.rst.txt")
    )
    m = prepare(
        tmp_path / "cap", source_dir=src, heldout_every=3, max_tokens=first_two + 1
    ).manifest
    assert m.truncated and m.tokens["train"] == first_two < len(full)
    assert m.documents["train"] == 2
    train = np.fromfile(m.train_path, dtype="<u4").tolist()
    assert train == full[:first_two] and train[-1] == DOLMA2_EOS_TOKEN_ID
    # a cap below the first document cuts it so train is never empty
    tiny = prepare(tmp_path / "tiny", source_dir=src, heldout_every=3, max_tokens=4).manifest
    assert tiny.tokens["train"] == 4 and tiny.documents["train"] == 1


def test_prepare_rejects_bad_input(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    with pytest.raises(
        UserError, match=r"--source: unknown corpus source 'wiki' \(allowed: python-docs\)"
    ):
        prepare(tmp_path / "o", source="wiki", source_dir=src)
    with pytest.raises(UserError, match="--source-dir: corpus folder .* not found"):
        prepare(tmp_path / "o", source_dir=tmp_path / "nope")
    one = tmp_path / "one"
    one.mkdir()
    (one / "x.rst.txt").write_text("only one document")
    with pytest.raises(UserError, match="empty train split"):
        prepare(tmp_path / "o", source_dir=one)


# --- check / ensure --------------------------------------------------------------------------


def test_verify_detects_corruption_and_truncation(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    out = tmp_path / "out"
    m = prepare(out, source_dir=src, heldout_every=3).manifest
    assert ensure_demo_data(out).files == m.files
    assert ensure_demo_data(out).train_path == out / "train.bin"
    heldout = out / "heldout.bin"
    good = heldout.read_bytes()
    heldout.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # same size, one bit flipped
    with pytest.raises(UserError, match=r"heldout.bin: sha256 does not match manifest"):
        verify(out)
    heldout.write_bytes(good[:-4])
    with pytest.raises(UserError, match=r"heldout.bin: .* corrupt or truncated"):
        verify(out)
    heldout.unlink()
    with pytest.raises(
        UserError, match=r"heldout.bin: missing; run: bash scripts/prepare-data.sh --out"
    ):
        ensure_demo_data(out)
    (out / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable manifest"):
        verify(out)


def test_fix_command_names_the_folder() -> None:
    assert fix_command("data/demo") == "bash scripts/prepare-data.sh"
    assert fix_command("/x/y") == "bash scripts/prepare-data.sh --out /x/y"


def test_check_cli_missing_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _run_cli("data", "check", "--dir", str(tmp_path / "missing"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: ") and "demo data folder not found" in lines[0]
    assert f"bash scripts/prepare-data.sh --out {tmp_path / 'missing'}" in lines[0]


def test_check_cli_reports_corrupt_file(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    out = tmp_path / "out"
    prepare(out, source_dir=src, heldout_every=3)
    runner = CliRunner()
    ok = runner.invoke(data_app, ["check", "--dir", str(out)])
    assert ok.exit_code == 0 and "ok:" in ok.output
    with open(out / "train.bin", "r+b") as fh:
        fh.seek(8)
        fh.write(b"\x00\x00\x00\x00")
    proc = _run_cli("data", "check", "--dir", str(out))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "train.bin: sha256 does not match" in proc.stderr


def test_prepare_cli_with_source_dir(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    out = tmp_path / "out"
    args = ["prepare", "--out", str(out), "--source-dir", str(src), "--heldout-every", "3"]
    runner = CliRunner()
    first = runner.invoke(data_app, args)
    assert first.exit_code == 0, first.output
    assert "wrote" in first.output and "4 documents" in first.output
    second = runner.invoke(data_app, args)
    assert second.exit_code == 0 and second.output.startswith("kept")
    bad = _run_cli("data", "prepare", "--out", str(out), "--source", "nope")
    assert bad.returncode == 2 and "allowed: python-docs" in bad.stderr
    assert oct(os.stat(out / "train.bin").st_mode & 0o777) == "0o644"


# ---- the demo's 4,096-entry BPE --------------------------------------------------------------


def test_prepare_bpe_writes_uint16_files_that_decode_back(tmp_path: Path) -> None:
    from olmoablate.data.tokenizers import BPE4096, DOLMA2

    src = _write_corpus(tmp_path)
    m = prepare(tmp_path / "bpe", source_dir=src, heldout_every=3, tokenizer="bpe4096").manifest
    assert (m.dtype, m.eos_token_id, m.pad_token_id, m.vocab_size) == ("uint16", 0, 1, 4096)
    tok = BPE4096.load()
    held = np.frombuffer(m.heldout_path.read_bytes(), dtype="<u2")
    assert len(held) == m.tokens["heldout"] and held[-1] == 0
    docs = np.split(held, np.flatnonzero(held == 0) + 1)[:-1]
    texts = [tok.decode(d[:-1].tolist(), skip_special_tokens=False) for d in docs]
    assert texts == [DOCS["a.rst.txt"], DOCS["e.rst.txt"]]  # lossless; literal EOS text kept
    assert int((held == 0).sum()) == m.documents["heldout"] == 2
    entropy = m.stats["heldout_unigram_entropy_nats"]
    assert isinstance(entropy, float) and 0 < entropy < np.log(4096) + 1
    assert verify(tmp_path / "bpe").tokenizer_name == "python-docs-bpe4096"
    with pytest.raises(UserError, match="made with another tokenizer"):
        verify(tmp_path / "bpe", expect=DOLMA2)
    # the tiny corpus cannot re-train 4,094 merges: recorded, not fatal
    assert m.tokenizer_extra["reproduced"] is False


def test_check_cli_checks_both_tokenizers(tmp_path: Path) -> None:
    src = _write_corpus(tmp_path)
    runner = CliRunner()
    out = tmp_path / "out"
    args = ["prepare", "--out", str(out), "--source-dir", str(src), "--heldout-every", "3"]
    assert runner.invoke(data_app, args).exit_code == 0
    assert (out / "bpe4096" / "manifest.json").is_file() and (out / "manifest.json").is_file()
    res = runner.invoke(data_app, ["check", "--dir", str(out)])
    assert res.exit_code == 0, res.output
    assert "dolma2, dtype uint32" in res.output and "python-docs-bpe4096, dtype uint16" in res.output


_TRAIN_BPE = """
import hashlib, sys
from olmoablate.data.tokenizers import to_json_bytes, train_bpe
texts = [f"word{i % 97} and thing{i % 13}, value {i * 7 % 1000}; " * 3 for i in range(400)]
print(hashlib.sha256(to_json_bytes(train_bpe(texts, 600))).hexdigest())
"""


def test_bpe_training_is_deterministic_across_processes() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shas = {
        subprocess.run(
            [sys.executable, "-c", _TRAIN_BPE],
            capture_output=True,
            text=True,
            check=True,
            env={**env, "PYTHONHASHSEED": str(seed), "RAYON_NUM_THREADS": str(threads)},
        ).stdout.strip()
        for seed, threads in ((0, 1), (1, 2))
    }
    assert len(shas) == 1 and len(next(iter(shas))) == 64


def _pinned_corpus() -> tuple[Path | None, str]:
    """The folder holding the corpus the shipped BPE was trained on (installed, or the pinned .deb
    `scripts/prepare-data.sh` unpacks under data/.cache), or why there is none here: the corpus's
    own content hash decides, not its document count (python3.11-doc u8 and u9 both have 497)."""
    from olmoablate.data.corpus import (
        corpus_note,
        corpus_sha256,
        get_source,
        list_documents,
        package_version,
    )

    src = get_source("python-docs")
    installed = Path(os.environ.get("OLMOABLATE_PYDOCS_DIR") or src.default_dir)
    pinned = src.pinned_dir(REPO / "data" / ".cache")
    why: list[str] = []
    for folder in (installed, pinned):
        if folder is None or not folder.is_dir():
            continue
        try:
            sha = corpus_sha256(list_documents(src, folder))
        except UserError as err:
            why.append(str(err))
            continue
        note = corpus_note(src, package_version(src, folder), sha)
        if note is None:
            return folder, ""
        why.append(f"{folder}: {note}")
    return None, "; ".join(why) or f"{src.debian_package} missing"


def test_shipped_bpe_is_reproduced_from_the_train_documents() -> None:
    """The pinned file is what `train_bpe` makes from the demo's train split of the pinned
    corpus; on a machine with another version (bookworm's u8) it skips naming that version and
    its hash, and runs on the pinned copy once `bash scripts/prepare-data.sh` unpacked it."""
    from olmoablate.data.corpus import get_source, list_documents, read_text
    from olmoablate.data.tokenizers import BPE_TRAIN_HOLDOUT_EVERY, to_json_bytes, train_bpe
    from olmoablate.plan.sizes import BPE_SHA256

    folder, why = _pinned_corpus()
    if folder is None:
        pytest.skip(f"{why} (`bash scripts/prepare-data.sh` unpacks the pinned one)")
    docs = list_documents(get_source("python-docs"), folder)
    texts = [t for t in map(read_text, docs) if t.strip()]
    train = [t for i, t in enumerate(texts) if i % BPE_TRAIN_HOLDOUT_EVERY]
    assert hashlib.sha256(to_json_bytes(train_bpe(train))).hexdigest() == BPE_SHA256


def _debian_root(tmp: Path, version: str) -> Path:
    """A python3.11-doc laid out as `dpkg-deb -x` leaves it: documents and the changelog."""
    import gzip

    docs = _write_corpus(tmp)
    sources = tmp / "root" / "usr/share/doc/python3.11/html/_sources"
    sources.parent.mkdir(parents=True)
    docs.rename(sources)
    log = tmp / "root" / "usr/share/doc/python3.11-doc/changelog.Debian.gz"
    log.parent.mkdir(parents=True)
    with gzip.open(log, "wt") as fh:
        fh.write(f"python3.11 ({version}) bookworm; urgency=medium\n\n  * Fixes.\n")
    return sources


def test_manifest_records_the_corpus_version_and_whether_it_is_the_pinned_one(
    tmp_path: Path,
) -> None:
    """Which python3.11-doc the token files were made from is in the manifest and the output
    (was: only a content hash, and the demo said "already installed" for any version)."""
    from olmoablate.data.corpus import get_source

    sources = _debian_root(tmp_path, "3.11.2-6+deb12u8")
    out = tmp_path / "out"
    args = ["prepare", "--out", str(out), "--source-dir", str(sources), "--heldout-every", "3"]
    res = CliRunner().invoke(data_app, [*args, "--tokenizer", "dolma2"])
    assert res.exit_code == 0, res.output
    assert "source python-docs 3.11.2-6+deb12u8 (corpus sha256 " in res.output
    source = json.loads((out / "manifest.json").read_text())["source"]
    assert source["package_version"] == "3.11.2-6+deb12u8"
    pin = get_source("python-docs")
    assert source["pinned"] == {
        "version": pin.pinned_version,
        "sha256": pin.pinned_sha256,
        "matches": False,
    }
    # a folder prepared before the manifest said so gets the fields on the next (kept) prepare
    doc = json.loads((out / "manifest.json").read_text())
    for key in ("package_version", "pinned"):
        del doc["source"][key]
    (out / "manifest.json").write_text(json.dumps(doc))
    again = CliRunner().invoke(data_app, [*args, "--tokenizer", "dolma2"])
    assert again.exit_code == 0 and again.output.startswith("kept"), again.output
    assert json.loads((out / "manifest.json").read_text())["source"] == source
