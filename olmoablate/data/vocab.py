"""The tokenizers `data prepare` can write token files with: dolma2 (real runs) and a 4,096-entry BPE.

A :class:`Vocab` says everything the token files depend on: the tokenizer file and its pinned
sha256, the ids of EOS/PAD, the vocabulary size and the numpy dtype OLMo-core will read the files
with (the narrowest unsigned type holding ``vocab_size - 1``, see
:func:`olmoablate.contract.tokens.narrowest_dtype`).

The BPE ships in the package (``python_docs_bpe4096.json``) so a spec can name it before any data
exists (``olmoablate validate specs/`` on a fresh clone). `data prepare` re-trains it from the
training documents and checks that it reproduces the shipped file byte for byte (the provenance
check recorded in the manifest); a different corpus or ``tokenizers`` version gives a warning and
the shipped file is used, so token files and specs always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from olmoablate.contract.sizes import (
    BPE_EOS_TOKEN_ID,
    BPE_FILENAME,
    BPE_PAD_TOKEN_ID,
    BPE_SHA256,
    BPE_VOCAB_SIZE,
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_VOCAB_SIZE,
)
from olmoablate.contract.tokens import narrowest_dtype
from olmoablate.data.tokenizer import TOKENIZER_ORIGIN, TOKENIZER_SHA256, load_tokenizer
from olmoablate.errors import UserError
from olmoablate.io import sha256_file

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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
