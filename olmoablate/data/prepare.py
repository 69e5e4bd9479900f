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

import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

from olmoablate.data.corpus import (
    DEFAULT_DIR,
    DEFAULT_HELDOUT_EVERY,
    DEFAULT_SOURCE,
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    SOURCES,
    SPLITS,
    CorpusSource,
    Document,
    Manifest,
    _make_readable,
    batched,
    corpus_note,
    corpus_sha256,
    describe,
    get_source,
    list_documents,
    package_version,
    read_text,
    verify,
)
from olmoablate.data.tokenizers import BPE_TRAIN_HOLDOUT_EVERY, DOLMA2, VOCABS, Vocab
from olmoablate.errors import UserError
from olmoablate.io import file_lock, write_bytes_atomic, write_json_atomic
from olmoablate.plan.tokens import unigram_entropy

#: documents per ``encode_batch`` call: large enough for the Rust thread pool, small enough that
#: ``--max-tokens`` stops early without tokenizing the whole corpus.
_BATCH_DOCS = 64
log = logging.getLogger(__name__)


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
                existing = _with_provenance(existing, src, sdir)
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
            **_provenance(src, sdir, source_hash),
        },
        stats=_stats(arrays, vocab.vocab_size),
        tokenizer_extra=_bpe_provenance(vocab, bpe_texts, heldout_every),
    )
    write_json_atomic(out / MANIFEST_NAME, manifest.to_dict())
    _make_readable(out / MANIFEST_NAME)
    return PrepareResult(manifest, False, reason)


def _provenance(src: CorpusSource, sdir: Path | None, source_hash: str) -> dict[str, Any]:
    """The manifest's word on which corpus version the files were made from: the package
    version read next to the documents, and whether it is the pinned corpus the shipped BPE was
    trained on (why the demo's numbers may differ between machines, issue 35)."""
    version = package_version(src, sdir)
    note = corpus_note(src, version, source_hash)
    if note is not None:
        log.warning(f"{note}: the demo's numbers will differ from the pinned corpus's")
    return {
        "package_version": version,
        "pinned": {
            "version": src.pinned_version,
            "sha256": src.pinned_sha256,
            "matches": note is None,
        },
    }


def _with_provenance(manifest: Manifest, src: CorpusSource, sdir: Path | None) -> Manifest:
    """An up-to-date folder made before the manifest recorded the corpus version: the fields
    added (only the manifest is rewritten; its checksums and inputs are unchanged)."""
    if "package_version" in manifest.extra and "pinned" in manifest.extra:
        return manifest
    extra = {**manifest.extra, **_provenance(src, sdir, manifest.source_sha256)}
    updated = dataclasses.replace(manifest, extra=extra)
    write_json_atomic(manifest.dir / MANIFEST_NAME, updated.to_dict())
    _make_readable(manifest.dir / MANIFEST_NAME)
    return updated


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
    from olmoablate.data.tokenizers import to_json_bytes, train_bpe

    try:
        trained = hashlib.sha256(to_json_bytes(train_bpe(bpe_texts, vocab.vocab_size))).hexdigest()
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


# `olmoablate data prepare|check`. The CLI imports this module at start-up, so numpy, tokenizers
# and the token-file scan are imported inside the functions that use them.
data_app = typer.Typer(
    help="Prepare the offline demo data (dolma2 or the demo BPE + real English text).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@data_app.command("prepare")
def prepare_command(
    out: Path = typer.Option(
        DEFAULT_DIR, "--out", help="Output folder for train.bin, heldout.bin, manifest.json."
    ),
    source: str = typer.Option(
        DEFAULT_SOURCE, "--source", help=f"Corpus source ({', '.join(sorted(SOURCES))})."
    ),
    source_dir: Path | None = typer.Option(
        None,
        "--source-dir",
        help="Read the source's files from this folder instead of the default.",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Cap the train split at N tokens (whole documents)."
    ),
    heldout_every: int = typer.Option(
        DEFAULT_HELDOUT_EVERY, "--heldout-every", help="Hold out every N-th document for eval."
    ),
    force: bool = typer.Option(
        False, "--force", help="Rebuild even when the folder is up to date."
    ),
    tokenizer: str = typer.Option(
        "all",
        "--tokenizer",
        help="dolma2 (uint32 files in OUT), bpe4096 (the shipped 4,096-entry BPE, uint16 files "
        "in OUT/bpe4096), or all (both; the default).",
    ),
) -> None:
    """Tokenize the corpus into OLMo-core token files: dolma2 and the demo's BPE (idempotent)."""
    allowed = ["all", *VOCABS]
    if tokenizer not in allowed:
        raise UserError(f"--tokenizer: unknown {tokenizer!r} (allowed: {', '.join(allowed)})")
    for name in VOCABS if tokenizer == "all" else [tokenizer]:
        vocab = VOCABS[name]
        started = time.perf_counter()
        result = prepare(
            out / vocab.subdir if vocab.subdir else out,
            source=source,
            source_dir=source_dir,
            max_tokens=max_tokens,
            heldout_every=heldout_every,
            force=force,
            tokenizer=name,
        )
        m = result.manifest
        verb = "kept" if result.skipped else "wrote"
        version = m.extra.get("package_version") or "version unknown"
        typer.echo(
            f"{verb} {m.dir} ({vocab.name}, {m.dtype}; {result.reason}); source {m.source} "
            f"{version} (corpus sha256 {m.source_sha256[:12]}…): {m.file_count} files from "
            f"{m.source_dir}, {time.perf_counter() - started:.1f}s"
        )
        typer.echo(describe(m))


@data_app.command("check")
def check_command(
    dir: Path = typer.Option(DEFAULT_DIR, "--dir", help="Folder written by `data prepare`."),
) -> None:
    """Verify manifest, sha256, dtype and largest id of every token file (exit 2 otherwise).

    Checks DIR and, when present, DIR/bpe4096 (the demo's BPE token files).
    """
    from olmoablate.plan.tokens import scan_token_file

    dirs = [dir] + [dir / v.subdir for v in VOCABS.values() if v.subdir and (dir / v.subdir).is_dir()]
    for d in dirs:
        m = verify(d)
        for split in ("train", "heldout"):
            scan = scan_token_file(m.path_of(split), m.dtype, m.eos_token_id, 2, m.vocab_size)
            if scan.max_id >= m.vocab_size:
                raise UserError(
                    f"{m.path_of(split)}: largest token id {scan.max_id} >= vocab size "
                    f"{m.vocab_size} of {m.tokenizer_name} (read as {m.dtype})"
                )
        entropy = m.stats.get("heldout_unigram_entropy_nats")
        typer.echo(
            f"ok: {m.dir} ({m.source}, {m.tokenizer_name}, dtype {m.dtype}, eos {m.eos_token_id}"
            f", held-out unigram entropy {entropy} nats/token)"
        )
        typer.echo(describe(m))
