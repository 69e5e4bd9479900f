"""Where the demo's real English text comes from, and in which order its documents are read.

Why a Debian package: compute nodes and CI here reach package registries but not dataset hubs.
``python3.11-doc`` ships the reStructuredText sources of the Python 3.11 documentation (PSF
licence; about 500 files, 11 M characters, 2.6 M dolma2 tokens): clean English prose mixed with
code, big enough that a tiny model's loss keeps falling for a few hundred steps. The setup script
installs it; nothing is downloaded at training time.

Determinism: documents are sorted by their path relative to the source folder, so the same
package version gives byte-identical token files on every machine (checked through the
manifest's ``source.sha256``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from olmoablate.errors import UserError

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


SOURCES: dict[str, CorpusSource] = {
    "python-docs": CorpusSource(
        name="python-docs",
        default_dir=Path("/usr/share/doc/python3.11/html/_sources"),
        suffix=".rst.txt",
        debian_package="python3.11-doc",
        licence="PSF License Version 2 (Python documentation)",
        description="reStructuredText sources of the Python 3.11 documentation",
    ),
}


def get_source(name: str) -> CorpusSource:
    """The source called ``name``; UserError listing the allowed names otherwise."""
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
    """Every ``*<suffix>`` file below the folder, sorted by relative path (the document order).

    Raises UserError naming the folder and the fix when it is absent or holds no matching file.
    """
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


def batched(items: list[Document], size: int) -> Iterator[list[Document]]:
    """Consecutive slices of ``items`` of at most ``size`` (encode_batch works per slice)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
