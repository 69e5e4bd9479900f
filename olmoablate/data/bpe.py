"""A small byte-level BPE for CPU-scale work, trained deterministically on the demo's train split.

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
from typing import TYPE_CHECKING

from olmoablate.contract.sizes import BPE_EOS_TOKEN_ID, BPE_PAD_TOKEN_ID, BPE_VOCAB_SIZE

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
