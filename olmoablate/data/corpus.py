"""Where the demo's real English text comes from, and in which order its documents are read.

Why a Debian package: compute nodes and CI here reach package registries but not dataset hubs.
``python3.11-doc`` ships the reStructuredText sources of the Python 3.11 documentation (PSF
licence; about 500 files, 11 M characters, 2.6 M dolma2 tokens): clean English prose mixed with
code, big enough that a tiny model's loss keeps falling for a few hundred steps. The setup script
installs it; nothing is downloaded at training time.

Determinism: documents are sorted by their path relative to the source folder, so the same
package version gives byte-identical token files on every machine (checked through the
manifest's ``source.sha256``).

Which version: the shipped BPE was trained on one corpus, python3.11-doc 3.11.2-6+deb12u9
(:attr:`CorpusSource.pinned_version`, content hash :attr:`CorpusSource.pinned_sha256`). Debian
bookworm's main archive has 3.11.2-6+deb12u8 (same 497 files, four of them with other text) and a
machine may have either installed; ``scripts/prepare-data.sh`` unpacks the pinned .deb under
``data/.cache`` when the installed one is another, and the manifest records the version and
content hash the token files were made from (``source.package_version``, ``source.sha256``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olmoablate.data.tokenizers import BY_SHA256, DOLMA2, Vocab
from olmoablate.errors import UserError
from olmoablate.io import read_json, sha256_file
from olmoablate.plan.names import MANIFEST_FILE
from olmoablate.plan.sizes import (
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_VOCAB_SIZE,
)

#: Where `olmoablate data prepare` writes, what it reads and how it splits, unless told otherwise
#: (here, not in prepare.py, so that the CLI shows them without importing the tokenizing code).
DEFAULT_DIR = Path("data/demo")
DEFAULT_SOURCE = "python-docs"
DEFAULT_HELDOUT_EVERY = 40


@dataclass(frozen=True)
class CorpusSource:
    """A named text source: default folder, file pattern and how to obtain it."""

    name: str
    default_dir: Path
    suffix: str
    debian_package: str
    licence: str
    description: str
    #: The package version the shipped tokenizers were trained on and its :func:`corpus_sha256`
    #: (the demo's numbers and the BPE provenance test are for this corpus).
    pinned_version: str | None = None
    pinned_sha256: str | None = None

    def pinned_dir(self, cache: Path = Path("data/.cache")) -> Path | None:
        """Where ``prepare-data.sh`` unpacks the pinned .deb (None: no pin)."""
        if self.pinned_version is None:
            return None
        root = cache / f"{self.debian_package}_{self.pinned_version}"
        return root / self.default_dir.relative_to("/")


SOURCES: dict[str, CorpusSource] = {
    "python-docs": CorpusSource(
        name="python-docs",
        default_dir=Path("/usr/share/doc/python3.11/html/_sources"),
        suffix=".rst.txt",
        debian_package="python3.11-doc",
        licence="PSF License Version 2 (Python documentation)",
        description="reStructuredText sources of the Python 3.11 documentation",
        pinned_version="3.11.2-6+deb12u9",
        pinned_sha256="a562bb4c7d19b6a91fd5866af451e60f3d5738d4075d922d8b4c48885dccb039",
    ),
}


def get_source(name: str) -> CorpusSource:
    try:
        return SOURCES[name]
    except KeyError:
        allowed = ", ".join(sorted(SOURCES))
        raise UserError(f"--source: unknown corpus source {name!r} (allowed: {allowed})") from None


@dataclass(frozen=True)
class Document:
    """One source file = one document; ``relpath`` is its POSIX path relative to the source dir."""

    relpath: str
    path: Path


def list_documents(source: CorpusSource, source_dir: Path | None = None) -> list[Document]:
    """Every ``*<suffix>`` file below the folder, sorted by relative path (the document order)."""
    root = source_dir if source_dir is not None else source.default_dir
    flag = "--source-dir" if source_dir is not None else f"--source {source.name}"
    hint = (
        f"install the Debian package {source.debian_package} "
        "(bash scripts/prepare-data.sh does it) or pass --source-dir DIR"
    )
    if not root.is_dir():
        raise UserError(f"{flag}: corpus folder {root} not found; {hint}")
    docs = [
        Document(relpath=p.relative_to(root).as_posix(), path=p)
        for p in root.rglob(f"*{source.suffix}")
        if p.is_file()
    ]
    if not docs:
        raise UserError(f"{flag}: no *{source.suffix} files under {root}; {hint}")
    docs.sort(key=lambda d: d.relpath)
    return docs


def read_text(doc: Document) -> str:
    """The document's text (UTF-8; undecodable bytes become U+FFFD rather than failing a run)."""
    return doc.path.read_bytes().decode("utf-8", errors="replace")


def corpus_sha256(docs: list[Document]) -> str:
    """A hash of the corpus as read: every relative path and the sha256 of its bytes, in order.

    Why: `data prepare` is idempotent. If the package was upgraded (different text) the hash
    changes and the token files are rebuilt; if nothing changed they are kept.
    """
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(doc.relpath.encode("utf-8"))
        digest.update(b"\0")
        digest.update(hashlib.sha256(doc.path.read_bytes()).hexdigest().encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def package_version(source: CorpusSource, source_dir: Path | None = None) -> str | None:
    """The Debian version of the package the documents come from (None: unknown), from the
    package's own ``changelog.Debian.gz`` next to the documents (``/usr/share/doc/<package>``
    for an installed package and for a .deb unpacked with ``dpkg-deb -x`` into any root), so
    it names the files read, not whatever dpkg says is installed elsewhere."""
    import gzip
    import re

    root = source_dir if source_dir is not None else source.default_dir
    try:
        doc_root = root.resolve().parents[2]  # <root>/usr/share/doc/python3.11/html/_sources
        with gzip.open(doc_root / source.debian_package / "changelog.Debian.gz", "rt") as fh:
            first = fh.readline()
    except (OSError, IndexError, EOFError):
        return None
    found = re.match(r"\S+ \(([^)\s]+)\)", first)
    return found.group(1) if found else None


def corpus_note(source: CorpusSource, version: str | None, sha256: str) -> str | None:
    """Why this corpus is not the one the shipped tokenizers were trained on (None: it is)."""
    if source.pinned_sha256 is None or sha256 == source.pinned_sha256:
        return None
    return (
        f"{source.debian_package} {version or '(version unknown)'} (corpus sha256 "
        f"{sha256[:12]}…) is not the corpus the shipped BPE was trained on "
        f"({source.pinned_version}, {source.pinned_sha256[:12]}…)"
    )


def batched(items: list[Document], size: int) -> Iterator[list[Document]]:
    """Consecutive slices of ``items`` of at most ``size`` (encode_batch works per slice)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


# The prepared folder's ``manifest.json`` and its check. The training job, `data check` and
# `validate` verify folders on machines that never tokenize, so this module imports neither
# tokenizers nor numpy; what the files are is described in :mod:`olmoablate.data.prepare`.

MANIFEST_SCHEMA = 2
MANIFEST_NAME = MANIFEST_FILE
SPLITS: tuple[str, ...] = ("train", "heldout")
#: numpy dtype string of dolma2 token files: little-endian uint32 (see module docstring); other
#: tokenizers use the narrowest dtype for their vocabulary (`Vocab.dtype`, uint16 for the BPE).
TOKEN_DTYPE = DOLMA2.dtype


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
    """The manifest in ``directory``, every file checked against it (and the dtype against the
    one OLMo-core infers from the tokenizer's vocabulary); ``expect`` also pins the tokenizer.
    A UserError names the first problem and the command that fixes it.
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


def describe(manifest: Manifest) -> str:
    """One human line per split, for `data prepare` / `data check` output."""
    return "\n".join(
        f"  {manifest.path_of(split)}: {manifest.tokens[split]:,} tokens, "
        f"{manifest.documents[split]:,} documents, sha256 {manifest.files[split]['sha256'][:12]}…"
        for split in SPLITS
    )
