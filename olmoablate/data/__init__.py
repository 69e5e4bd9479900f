"""olmoablate.data: offline demo data (dolma2 or the demo BPE + real text -> OLMo-core token files).

Public API (no torch/numpy/tokenizers imported at package import; the CLI loads this at start-up):

* :func:`ensure_demo_data` — verified :class:`Manifest` of a prepared folder, or a one-line
  UserError naming the command that fixes it (used by the training job).
* :func:`prepare` / :func:`verify` — what `olmoablate data prepare|check` run (``prepare`` is
  imported on first use: it brings the tokenizing code).
* :func:`tokenizer_path`, :func:`tokenizer_available`, :func:`load_tokenizer` — the vendored
  dolma2 ``tokenizer.json``.
* :data:`VOCABS`, :func:`bpe_path` — the tokenizers `data prepare` writes with (dolma2, uint32;
  the shipped 4,096-entry byte-level BPE, uint16, for CPU-scale work).
"""

import importlib
from typing import Any

from olmoablate.contract.sizes import (
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_PADDED_VOCAB_SIZE,
    DOLMA2_VOCAB_SIZE,
)
from olmoablate.data.corpus import DEFAULT_DIR, DEFAULT_HELDOUT_EVERY, DEFAULT_SOURCE
from olmoablate.data.manifest import TOKEN_DTYPE, Manifest, ensure_demo_data, fix_command, verify
from olmoablate.data.tokenizer import (
    TOKENIZER_SHA256,
    load_tokenizer,
    tokenizer_available,
    tokenizer_path,
)
from olmoablate.data.vocab import BPE4096, DOLMA2, VOCABS, Vocab, bpe_path

__all__ = [
    "BPE4096",
    "DOLMA2",
    "VOCABS",
    "Vocab",
    "bpe_path",
    "DEFAULT_DIR",
    "DEFAULT_HELDOUT_EVERY",
    "DEFAULT_SOURCE",
    "DOLMA2_EOS_TOKEN_ID",
    "DOLMA2_PADDED_VOCAB_SIZE",
    "DOLMA2_PAD_TOKEN_ID",
    "DOLMA2_VOCAB_SIZE",
    "TOKENIZER_SHA256",
    "TOKEN_DTYPE",
    "Manifest",
    "PrepareResult",
    "ensure_demo_data",
    "fix_command",
    "load_tokenizer",
    "prepare",
    "tokenizer_available",
    "tokenizer_path",
    "verify",
]

#: Names served from :mod:`olmoablate.data.prepare` on first use (PEP 562): the CLI imports this
#: package at start-up for `olmoablate data`, and prepare's imports cost every other command.
_FROM_PREPARE = frozenset({"PrepareResult", "prepare"})


def __getattr__(name: str) -> Any:
    if name not in _FROM_PREPARE:
        raise AttributeError(f"module 'olmoablate.data' has no attribute {name!r}")
    module = importlib.import_module("olmoablate.data.prepare")
    # Bind them all at once: importing the submodule just set this package's `prepare` attribute
    # to the module, which the function of that name must replace (as the eager import did).
    globals().update({n: getattr(module, n) for n in _FROM_PREPARE})
    return globals()[name]
