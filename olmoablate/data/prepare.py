"""Tokenize the demo corpus once into OLMo-core token files, and verify them before training.

Output folder (default ``data/demo``):

* ``train.bin``, ``heldout.bin`` — OLMo-core's numpy token-file format: a raw array of token ids
  with no header (read with ``np.memmap``, *not* ``np.save``). The dtype must be the one OLMo-core
  infers from the tokenizer: ``NumpyDatasetConfig.get_dtype()`` picks the smallest unsigned type
  holding ``vocab_size - 1``; dolma2 has 100278 ids, so that is ``uint32``. We write
  little-endian ``<u4`` explicitly (what ``np.memmap(dtype=np.uint32)`` reads on every platform
  OLMo-core runs on). Each document is followed by EOS (100257): OLMo-core finds document
  boundaries (``generate_doc_lengths``, intra-document masking) from EOS positions.
* ``manifest.json`` — what was tokenized and the sha256 of each file, written last, so a folder
  whose manifest verifies is complete (an interrupted run leaves a manifest that does not).

Held-out split: by whole document, every ``heldout_every``-th document in sorted-path order
(``index % heldout_every == 0``), so the eval text never appears in training and the split is
identical on every machine.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from olmoablate.contract.sizes import (
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_VOCAB_SIZE,
)
from olmoablate.contract.tokens import unigram_entropy
from olmoablate.data.corpus import (
    DEFAULT_DIR,
    DEFAULT_HELDOUT_EVERY,
    DEFAULT_SOURCE,
    CorpusSource,
    Document,
    batched,
    corpus_sha256,
    get_source,
    list_documents,
    read_text,
)
from olmoablate.data.vocab import BPE_TRAIN_HOLDOUT_EVERY, BY_SHA256, DOLMA2, VOCABS, Vocab
from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, sha256_file, write_bytes_atomic, write_json_atomic

MANIFEST_SCHEMA = 2
MANIFEST_NAME = "manifest.json"
SPLITS: tuple[str, ...] = ("train", "heldout")
#: numpy dtype string of dolma2 token files: little-endian uint32 (see module docstring); other
#: tokenizers use the narrowest dtype for their vocabulary (`Vocab.dtype`, uint16 for the BPE).
TOKEN_DTYPE = DOLMA2.dtype
#: documents per ``encode_batch`` call: large enough for the Rust thread pool, small enough that
#: ``--max-tokens`` stops early without tokenizing the whole corpus.
_BATCH_DOCS = 64
log = logging.getLogger(__name__)


def fix_command(out_dir: Path | str) -> str:
    """The one command that (re)creates ``out_dir``; shown in every data error."""
    if Path(out_dir) == DEFAULT_DIR or Path(out_dir).resolve() == DEFAULT_DIR.resolve():
        return "bash scripts/prepare-data.sh"
    return f"bash scripts/prepare-data.sh --out {out_dir}"


@dataclass(frozen=True)
class Manifest:
    """Contents of ``manifest.json`` plus the folder it was read from.

    ``files[split]`` = ``{"path": "train.bin", "bytes": int, "sha256": hex}``;
    ``documents``/``tokens`` are keyed by split name. ``inputs`` is what decides whether an
    existing folder can be reused by `data prepare` (see :func:`prepare`).
    """

    dir: Path
    source: str
    source_dir: str
    source_sha256: str
    file_count: int
    empty_files: int
    documents: dict[str, int]
    tokens: dict[str, int]
    files: dict[str, dict[str, Any]]
    heldout_every: int
    max_tokens: int | None
    truncated: bool
    tokenizer_sha256: str
    tokenizer_name: str = "dolma2"
    dtype: str = TOKEN_DTYPE
    eos_token_id: int = DOLMA2_EOS_TOKEN_ID
    pad_token_id: int = DOLMA2_PAD_TOKEN_ID
    vocab_size: int = DOLMA2_VOCAB_SIZE
    padded_vocab_size: int = DOLMA2_PADDED_VOCAB_SIZE
    created: str = ""
    seconds: float = 0.0
    schema: int = MANIFEST_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)
    #: held-out unigram entropy etc. (see :func:`_stats`); tokenizer provenance checks.
    stats: dict[str, Any] = field(default_factory=dict)
    tokenizer_extra: dict[str, Any] = field(default_factory=dict)

    def path_of(self, split: str) -> Path:
        """Path of a split's token file (``"train"`` or ``"heldout"``)."""
        return self.dir / str(self.files[split]["path"])

    @property
    def train_path(self) -> Path:
        return self.path_of("train")

    @property
    def heldout_path(self) -> Path:
        return self.path_of("heldout")

    @property
    def inputs(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "tokenizer_sha256": self.tokenizer_sha256,
            "heldout_every": self.heldout_every,
            "max_tokens": self.max_tokens,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "format": f"OLMo-core numpy token file: raw little-endian {self.dtype} ids, no "
            "header, EOS after every document",
            "dtype": self.dtype,
            "byte_order": "little",
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "vocab_size": self.vocab_size,
            "padded_vocab_size": self.padded_vocab_size,
            "tokenizer": {
                "name": self.tokenizer_name,
                "sha256": self.tokenizer_sha256,
                "origin": _vocab_of(self).origin if _vocab_of(self) else "?",
                **self.tokenizer_extra,
            },
            "source": {
                "name": self.source,
                "dir": self.source_dir,
                "sha256": self.source_sha256,
                "file_count": self.file_count,
                "empty_files": self.empty_files,
                **self.extra,
            },
            "split": {
                "heldout_every": self.heldout_every,
                "rule": f"document i (0-based, sorted path order, empty files skipped) is "
                f"held out when i % {self.heldout_every} == 0",
            },
            "max_tokens": self.max_tokens,
            "truncated": self.truncated,
            "documents": dict(self.documents),
            "tokens": dict(self.tokens),
            "files": {k: dict(v) for k, v in self.files.items()},
            "stats": dict(self.stats),
            "created": self.created,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], directory: Path) -> Manifest:
        """Parse a manifest; KeyError/TypeError/ValueError on a malformed one (caller reports)."""
        source = data["source"]
        extra = {
            k: v
            for k, v in source.items()
            if k not in {"name", "dir", "sha256", "file_count", "empty_files"}
        }
        files = {split: dict(data["files"][split]) for split in SPLITS}
        return cls(
            dir=directory,
            source=str(source["name"]),
            source_dir=str(source["dir"]),
            source_sha256=str(source["sha256"]),
            file_count=int(source["file_count"]),
            empty_files=int(source["empty_files"]),
            documents={s: int(data["documents"][s]) for s in SPLITS},
            tokens={s: int(data["tokens"][s]) for s in SPLITS},
            files=files,
            heldout_every=int(data["split"]["heldout_every"]),
            max_tokens=None if data["max_tokens"] is None else int(data["max_tokens"]),
            truncated=bool(data["truncated"]),
            tokenizer_sha256=str(data["tokenizer"]["sha256"]),
            tokenizer_name=str(data["tokenizer"].get("name", "dolma2")),
            tokenizer_extra={
                k: v for k, v in data["tokenizer"].items() if k not in {"name", "sha256", "origin"}
            },
            stats=dict(data.get("stats") or {}),
            dtype=str(data["dtype"]),
            eos_token_id=int(data["eos_token_id"]),
            pad_token_id=int(data["pad_token_id"]),
            vocab_size=int(data["vocab_size"]),
            padded_vocab_size=int(data["padded_vocab_size"]),
            created=str(data.get("created", "")),
            seconds=float(data.get("seconds", 0.0)),
            schema=int(data["schema"]),
            extra=extra,
        )


def _vocab_of(manifest: Manifest) -> Vocab | None:
    return BY_SHA256.get(manifest.tokenizer_sha256)


def _make_readable(path: Path) -> None:
    """0644: the atomic writer's temp file is 0600, but jobs may run as another user (Slurm)."""
    os.chmod(path, 0o644)


def verify(directory: Path | str, expect: Vocab | None = None) -> Manifest:
    """Read ``manifest.json`` in ``directory`` and check every file against it.

    Returns the manifest; raises UserError with one line naming the first problem found and the
    command that fixes it. Checks: folder and manifest exist and parse, schema and tokenizer
    match this version, each ``.bin`` exists with the recorded size (= 4 bytes x tokens) and
    sha256, and the dtype is the one OLMo-core will infer from the tokenizer's vocabulary
    (uint32 for dolma2, uint16 for the BPE). ``expect`` also pins which tokenizer it must be.
    """
    directory = Path(directory)
    fix = fix_command(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: demo data folder not found; run: {fix}")
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        raise UserError(f"{manifest_path}: missing (data not prepared or interrupted); run: {fix}")
    try:
        manifest = Manifest.from_dict(read_json(manifest_path), directory)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{manifest_path}: unreadable manifest ({err!r}); run: {fix}") from None
    if manifest.schema != MANIFEST_SCHEMA:
        raise UserError(
            f"{manifest_path}: schema {manifest.schema}, this olmoablate expects "
            f"{MANIFEST_SCHEMA}; run: {fix}"
        )
    vocab = _vocab_of(manifest)
    if vocab is None or (expect is not None and vocab is not expect):
        want = expect or DOLMA2
        raise UserError(
            f"{manifest_path}: made with another tokenizer (sha256 "
            f"{manifest.tokenizer_sha256[:12]}…, expected {want.name} {want.sha256[:12]}…); "
            f"run: {fix}"
        )
    if manifest.dtype != vocab.dtype:
        raise UserError(
            f"{manifest_path}: dtype {manifest.dtype!r}, OLMo-core reads {vocab.name} token "
            f"files as {vocab.dtype!r}; run: {fix}"
        )
    for split in SPLITS:
        entry = manifest.files[split]
        path = manifest.path_of(split)
        if not path.is_file():
            raise UserError(f"{path}: missing; run: {fix}")
        size = path.stat().st_size
        expected = manifest.tokens[split] * vocab.itemsize
        if size != int(entry["bytes"]) or size != expected:
            raise UserError(
                f"{path}: {size} bytes, manifest says {entry['bytes']} "
                f"({manifest.tokens[split]} tokens x {vocab.itemsize}); corrupt or truncated; "
                f"run: {fix}"
            )
        if sha256_file(path) != entry["sha256"]:
            raise UserError(f"{path}: sha256 does not match manifest (corrupt); run: {fix}")
    return manifest


def ensure_demo_data(directory: Path | str = DEFAULT_DIR) -> Manifest:
    """The verified manifest of the demo data in ``directory`` (the training job calls this).

    Never prepares data itself: a training job on a compute node must not install packages or
    race other jobs writing the same files. It fails fast with the one command to run instead.
    """
    return verify(directory)


@dataclass(frozen=True)
class PrepareResult:
    """What :func:`prepare` did: the manifest and whether existing files were reused."""

    manifest: Manifest
    skipped: bool
    reason: str


def prepare(
    out_dir: Path | str = DEFAULT_DIR,
    *,
    source: str = DEFAULT_SOURCE,
    source_dir: Path | str | None = None,
    max_tokens: int | None = None,
    heldout_every: int = DEFAULT_HELDOUT_EVERY,
    force: bool = False,
    tokenizer: str = "dolma2",
) -> PrepareResult:
    """Tokenize ``source`` into ``out_dir`` (train.bin, heldout.bin, manifest.json).

    ``tokenizer`` is ``dolma2`` (uint32 files, real OLMo 3 ids) or ``bpe4096`` (the shipped
    4,096-entry BPE, uint16 files; re-trained here on the train documents as a provenance check).
    Idempotent: when ``out_dir`` already verifies and was made from the same inputs (corpus
    hash, tokenizer, split rule, ``max_tokens``) nothing is rewritten. ``max_tokens`` caps the
    *train* split at whole documents (a single first document longer than the cap is cut so
    train is never empty); held-out documents met before the cap are kept.
    """
    out = Path(out_dir)
    src = get_source(source)
    if tokenizer not in VOCABS:
        raise UserError(f"--tokenizer: unknown {tokenizer!r} (allowed: {', '.join(VOCABS)})")
    vocab = VOCABS[tokenizer]
    if max_tokens is not None and max_tokens < 2:
        raise UserError(f"--max-tokens: must be >= 2 (got {max_tokens})")
    if heldout_every < 2:
        raise UserError(f"--heldout-every: must be >= 2 (got {heldout_every})")
    sdir = Path(source_dir) if source_dir is not None else None
    docs = list_documents(src, sdir)
    # Two concurrent `prepare` runs must not mix one's train.bin with the other's manifest.
    with file_lock(out / ".prepare.lock"):
        return _prepare_locked(out, src, sdir, docs, max_tokens, heldout_every, force, vocab)


def _prepare_locked(
    out: Path,
    src: CorpusSource,
    sdir: Path | None,
    docs: list[Document],
    max_tokens: int | None,
    heldout_every: int,
    force: bool,
    vocab: Vocab = DOLMA2,
) -> PrepareResult:
    """The body of :func:`prepare`, run while holding the folder's lock."""
    import numpy as np

    started = time.perf_counter()
    source_hash = corpus_sha256(docs)
    wanted = {
        "schema": MANIFEST_SCHEMA,
        "source": src.name,
        "source_sha256": source_hash,
        "tokenizer_sha256": vocab.sha256,
        "heldout_every": heldout_every,
        "max_tokens": max_tokens,
    }
    if not force and (out / MANIFEST_NAME).exists():
        try:
            existing = verify(out, expect=vocab)
        except UserError as err:
            reason = f"rebuilding: {err}"
        else:
            if existing.inputs == wanted:
                return PrepareResult(existing, True, "up to date (inputs and checksums match)")
            reason = "rebuilding: inputs changed"
    else:
        reason = "forced rebuild" if force else "new"

    tok = vocab.load()
    np_dtype = np.dtype(vocab.dtype).newbyteorder("<")
    eos = np.array([vocab.eos_token_id], dtype=np_dtype)
    chunks: dict[str, list[Any]] = {s: [] for s in SPLITS}
    n_docs = {s: 0 for s in SPLITS}
    n_tok = {s: 0 for s in SPLITS}
    bpe_texts: list[str] = []  # the documents the shipped BPE was trained on (provenance check)
    index = 0  # over non-empty documents: decides the split
    empty = 0
    truncated = False
    for batch in batched(docs, _BATCH_DOCS):
        texts = [read_text(d) for d in batch]
        kept = [t for t in texts if t.strip()]
        empty += len(texts) - len(kept)
        encoded = tok.encode_batch(kept, add_special_tokens=False)
        for text, enc in zip(kept, encoded, strict=True):
            split = "heldout" if index % heldout_every == 0 else "train"
            if index % BPE_TRAIN_HOLDOUT_EVERY:
                bpe_texts.append(text)
            index += 1
            if truncated:
                continue  # past the cap: only collect the texts for the BPE check
            ids = np.asarray(enc.ids, dtype=np.int64)
            if split == "train" and max_tokens is not None:
                room = max_tokens - n_tok["train"]
                if ids.size + 1 > room:
                    truncated = True
                    if n_docs["train"] > 0:
                        continue
                    ids = ids[: room - 1]  # first train document alone exceeds the cap
            if ids.size and int(ids.max()) >= vocab.vocab_size:
                raise UserError(f"tokenizer produced id {int(ids.max())} >= {vocab.vocab_size}")
            chunks[split].append(ids.astype(np_dtype))
            chunks[split].append(eos)
            n_docs[split] += 1
            n_tok[split] += int(ids.size) + 1
        if truncated and vocab.name == "dolma2":
            break
    for split in SPLITS:
        if n_docs[split] == 0:
            raise UserError(
                f"{src.name}: corpus of {len(docs) - empty} non-empty documents gives an empty "
                f"{split} split (need >= 2 documents; held out: every {heldout_every}th)"
            )

    files: dict[str, dict[str, Any]] = {}
    arrays: dict[str, Any] = {}
    for split in SPLITS:
        arr = np.concatenate(chunks[split])
        arrays[split] = arr
        data = arr.tobytes()
        name = f"{split}.bin"
        write_bytes_atomic(out / name, data)
        _make_readable(out / name)
        files[split] = {
            "path": name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    root = sdir if sdir is not None else src.default_dir
    manifest = Manifest(
        dir=out,
        source=src.name,
        source_dir=str(root.resolve()),
        source_sha256=source_hash,
        file_count=len(docs),
        empty_files=empty,
        documents=n_docs,
        tokens=n_tok,
        files=files,
        heldout_every=heldout_every,
        max_tokens=max_tokens,
        truncated=truncated,
        tokenizer_sha256=vocab.sha256,
        tokenizer_name=vocab.name,
        dtype=vocab.dtype,
        eos_token_id=vocab.eos_token_id,
        pad_token_id=vocab.pad_token_id,
        vocab_size=vocab.vocab_size,
        padded_vocab_size=vocab.padded_vocab_size,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - started, 3),
        extra={
            "pattern": f"**/*{src.suffix}",
            "debian_package": src.debian_package,
            "licence": src.licence,
        },
        stats=_stats(arrays, vocab.vocab_size),
        tokenizer_extra=_bpe_provenance(vocab, bpe_texts, heldout_every),
    )
    write_json_atomic(out / MANIFEST_NAME, manifest.to_dict())
    _make_readable(out / MANIFEST_NAME)
    return PrepareResult(manifest, False, reason)


def _stats(arrays: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """Held-out unigram entropy under the train unigram (what the report prints beside CE)."""
    import numpy as np

    counts = {s: np.bincount(a, minlength=vocab_size) for s, a in arrays.items()}
    return {
        "heldout_unigram_entropy_nats": round(
            unigram_entropy(counts["train"], counts["heldout"], vocab_size), 4
        ),
        "unigram_rule": "cross-entropy of heldout.bin under train.bin's unigram, add-0.5 smoothing",
    }


def _bpe_provenance(vocab: Vocab, bpe_texts: list[str], heldout_every: int) -> dict[str, Any]:
    """Re-train the BPE on the documents it was trained on and say whether that reproduces the
    shipped file, and whether every held-out document is text the tokenizer never saw."""
    if vocab.name == "dolma2":
        return {}
    from olmoablate.data.bpe import to_json_bytes, train_bpe

    try:
        trained = hashlib.sha256(
            to_json_bytes(train_bpe(bpe_texts, vocab.vocab_size))
        ).hexdigest()
    except ValueError as err:  # e.g. a corpus too small for 4,094 merges
        log.warning(f"BPE provenance check skipped: {err}; token files use the shipped tokenizer")
        return {"retrained_sha256": None, "reproduced": False, "retrain_error": str(err)}
    if trained != vocab.sha256:
        log.warning(
            f"BPE re-trained on this corpus has sha256 {trained[:12]}…, not the shipped "
            f"{vocab.sha256[:12]}… (another corpus or tokenizers version); token files use the "
            "shipped tokenizer, which the specs name"
        )
    return {
        "trained_on": f"every document i with i % {BPE_TRAIN_HOLDOUT_EVERY} != 0",
        "heldout_unseen_by_tokenizer": heldout_every % BPE_TRAIN_HOLDOUT_EVERY == 0,
        "retrained_sha256": trained,
        "reproduced": trained == vocab.sha256,
    }


def describe(manifest: Manifest) -> str:
    """One human line per split, for `data prepare` / `data check` output."""
    lines = []
    for split in SPLITS:
        lines.append(
            f"  {manifest.path_of(split)}: {manifest.tokens[split]:,} tokens, "
            f"{manifest.documents[split]:,} documents, sha256 {manifest.files[split]['sha256'][:12]}…"
        )
    return "\n".join(lines)
