"""What `validate` knows about a spec's tokenizer and token files, read before anything trains.

Why: a token file of another tokenizer or dtype trains silently on garbage ids (or crashes hours
later), an eval set smaller than one batch gives NaN; both are cheap to see in the files.
Tokenizers are read as plain JSON, token files through a memmap; only local files are scanned,
and only their first :data:`FULL_SCAN_BYTES` (saying so).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from olmoablate.io import sha256_file, user_cache_get, user_cache_put
from olmoablate.plan import sizes as sizes_mod
from olmoablate.plan.names import MANIFEST_FILE
from olmoablate.plan.schema import SizeSettings

#: Larger files are scanned on their first this-many bytes only (validate must stay fast).
FULL_SCAN_BYTES = 1 << 30
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "<|eos|>")
_PAD_NAMES = ("<|pad|>", "<pad>", "[PAD]", "<|padding|>")
_DTYPES = ("uint8", "uint16", "uint32", "uint64")
_ITEMSIZE = {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8}


def narrowest_dtype(vocab_size: int) -> str:
    """The smallest uint holding ``vocab_size - 1``: OLMo-core's ``NumpyDatasetConfig.get_dtype``,
    so `data prepare` writes exactly what training reads."""
    for name in _DTYPES:
        if vocab_size - 1 < 1 << (8 * _ITEMSIZE[name]):
            return name
    raise ValueError(f"vocab_size {vocab_size} does not fit uint64")


@dataclass(frozen=True)
class TokenizerInfo:

    name: str  # "dolma2" or the path as written in the spec
    vocab_size: int  # ids 0..vocab_size-1 (special tokens included)
    eos_token_id: int | None
    pad_token_id: int | None
    sha256: str


#: Tokenizer files shipped in the package, by the name a spec gives them (``data.tokenizer``), each
#: (its file name, ids, hash) stated like dolma2's so `validate` never parses the file
#: (tests/plan/test_tokens.py reads each file and checks).
PACKAGED_TOKENIZERS: dict[str, TokenizerInfo] = {
    "bpe4096-python-docs": TokenizerInfo(
        sizes_mod.BPE_FILENAME,
        sizes_mod.BPE_VOCAB_SIZE,
        sizes_mod.BPE_EOS_TOKEN_ID,
        sizes_mod.BPE_PAD_TOKEN_ID,
        sizes_mod.BPE_SHA256,
    )
}


def packaged_tokenizer(name: str) -> Path | None:
    """The installed file of a packaged tokenizer name (None for any other string)."""
    if name not in PACKAGED_TOKENIZERS:
        return None
    return sizes_mod.dolma2_tokenizer_file().parent / PACKAGED_TOKENIZERS[name].name


def tokenizer_info(tokenizer: str) -> TokenizerInfo:
    """Vocab size / EOS / PAD of ``dolma2``, a packaged tokenizer or a ``tokenizer.json`` path."""
    packaged = packaged_tokenizer(tokenizer)
    if packaged is not None:
        return replace(PACKAGED_TOKENIZERS[tokenizer], name=str(packaged))
    if tokenizer == "dolma2":
        return TokenizerInfo(
            "dolma2",
            sizes_mod.DOLMA2_VOCAB_SIZE,
            sizes_mod.DOLMA2_EOS_TOKEN_ID,
            sizes_mod.DOLMA2_PAD_TOKEN_ID,
            sizes_mod.DOLMA2_TOKENIZER_SHA256,
        )
    path = Path(tokenizer).expanduser()
    if not path.is_file():
        raise ValueError(
            f"tokenizer file {tokenizer} not found (allowed: dolma2, "
            f"{', '.join(PACKAGED_TOKENIZERS)} or a tokenizer.json path)"
        )
    stat = path.stat()
    return _read_tokenizer(str(path.resolve()), stat.st_size, stat.st_mtime_ns, tokenizer)


@lru_cache(maxsize=16)
def _read_tokenizer(path: str, size: int, mtime_ns: int, name: str) -> TokenizerInfo:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        model = data["model"]
        vocab = model["vocab"]
        if isinstance(vocab, dict):
            ids = {str(k): int(v) for k, v in vocab.items()}
        else:  # Unigram: a list of [piece, score]; the id is the position
            ids = {str(piece[0]): i for i, piece in enumerate(vocab)}
        for added in data.get("added_tokens") or []:
            ids[str(added["content"])] = int(added["id"])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        why = f"tokenizer file {name} is not a Hugging Face tokenizer.json ({err})"
        raise ValueError(why) from None
    if not ids:
        raise ValueError(f"tokenizer file {name} has an empty vocabulary")

    def first(names: tuple[str, ...]) -> int | None:
        return next((ids[n] for n in names if n in ids), None)

    return TokenizerInfo(
        name, max(ids.values()) + 1, first(_EOS_NAMES), first(_PAD_NAMES), sha256_file(Path(path))
    )


@dataclass(frozen=True)
class TokenFileScan:

    path: str
    dtype: str
    tokens: int
    max_id: int
    documents: int
    sequences: int  # eval sequences of <= sequence_length tokens (see eval_sequences)
    scored: int  # tokens an LM eval scores (all but each document's first token)
    complete: bool  # False when only the first FULL_SCAN_BYTES were read
    counts: dict[int, int] | None = None  # unigram counts {id: n} of the ids present, or None


def eval_sequences(doc_lengths: Any, sequence_length: int) -> int:
    """Sequences the eval dataset makes from documents of these lengths (EOS included): chunks at
    0, L-1, 2(L-1), ... overlapping by one token, so every token but the first is predicted once:
    1 chunk when n <= L, else 1 + ceil((n - L) / (L - 1))."""
    import numpy as np

    n = np.asarray(doc_lengths, dtype=np.int64)
    n = n[n > 1]
    step = max(1, sequence_length - 1)
    extra = np.maximum(0, -(-(n - sequence_length) // step))
    return int(len(n) + extra.sum())


def _doc_ends(arr: Any, eos: int) -> Any:
    """Where each document of a token array ends: after each EOS, and at a trailing piece."""
    import numpy as np

    ends = np.flatnonzero(arr == eos) + 1
    return ends if len(ends) and ends[-1] == len(arr) else np.append(ends, len(arr))


def chunk_bounds(tokens: Any, eos_token_id: int, sequence_length: int) -> Any:
    """(start, end) of every eval sequence of a token array: the rule :func:`eval_sequences` counts
    (documents of one token have nothing to predict and give no sequence)."""
    import numpy as np

    arr = np.asarray(tokens)
    ends = _doc_ends(arr, eos_token_id)
    starts = np.concatenate([[0], ends[:-1]])
    keep = ends - starts > 1
    starts, ends = starts[keep], ends[keep]
    step = max(1, sequence_length - 1)
    per_doc = 1 + np.maximum(0, -(-(ends - starts - sequence_length) // step))
    doc = np.repeat(np.arange(len(starts)), per_doc)
    first = np.cumsum(per_doc) - per_doc
    j = np.arange(int(per_doc.sum())) - np.repeat(first, per_doc)
    chunk_starts = starts[doc] + j * step
    chunk_ends = np.minimum(chunk_starts + sequence_length, ends[doc])
    return np.stack([chunk_starts, chunk_ends], axis=1).astype(np.int64)


#: User cache folder of token-file scans (olmoablate.io.user_cache_path), keyed by each file's
#: resolved path, size, mtime and the reading parameters. Why: numpy's import plus the scans of
#: the demo's files are a third of `validate`'s 0.3 s budget, at every start.
_SCAN_CACHE = "token-scans-v2"
_SCAN_FIELDS = ("tokens", "max_id", "documents", "sequences", "scored", "complete")


def scan_token_file(
    path: Path, dtype: str, eos_token_id: int, sequence_length: int, vocab_size: int
) -> TokenFileScan:
    """Read a token file as ``dtype`` (memmap, at most FULL_SCAN_BYTES) and count what matters;
    an unchanged file (path, size, mtime) is answered from the user cache, without numpy."""
    stat = path.stat()
    return _scan(
        str(path.resolve()), stat.st_size, stat.st_mtime_ns, dtype, eos_token_id,
        sequence_length, vocab_size,
    )  # fmt: skip


@lru_cache(maxsize=32)
def _scan(
    path: str, size: int, mtime_ns: int, dtype: str, eos: int, seq: int, vocab: int
) -> TokenFileScan:
    key = json.dumps([path, size, mtime_ns, dtype, eos, seq, vocab])
    hit = user_cache_get(_SCAN_CACHE, key)
    try:
        counts = hit["counts"]
        return TokenFileScan(
            path=path,
            dtype=dtype,
            **{f: hit[f] for f in _SCAN_FIELDS},
            counts=None if counts is None else {int(i): int(n) for i, n in counts},
        )
    except (TypeError, KeyError, ValueError):
        pass  # no entry, or not one this version wrote: scan
    scan = _read_scan(path, size, dtype, eos, seq, vocab)
    entry: dict[str, Any] = {f: getattr(scan, f) for f in _SCAN_FIELDS}
    entry["counts"] = None if scan.counts is None else sorted(scan.counts.items())
    user_cache_put(_SCAN_CACHE, key, entry)
    return scan


def _read_scan(path: str, size: int, dtype: str, eos: int, seq: int, vocab: int) -> TokenFileScan:
    import numpy as np

    item = _ITEMSIZE[dtype]
    n = min(size, FULL_SCAN_BYTES) // item
    if n == 0:
        return TokenFileScan(path, dtype, 0, -1, 0, 0, 0, True)
    arr = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r", shape=(n,))
    max_id = int(arr.max())
    lengths = np.diff(_doc_ends(arr, eos), prepend=0)
    counts = sparse_counts(np.bincount(arr, minlength=vocab)) if max_id < vocab else None
    return TokenFileScan(
        path=path,
        dtype=dtype,
        tokens=int(n),
        max_id=max_id,
        documents=int(len(lengths)),
        sequences=eval_sequences(lengths, seq),
        scored=int(np.maximum(lengths - 1, 0).sum()),
        complete=size <= FULL_SCAN_BYTES,
        counts=counts,
    )


def sparse_counts(counts: Any) -> dict[int, int]:
    """A count vector (numpy array, sequence) or mapping as ``{id: n}`` of its nonzero entries."""
    if isinstance(counts, Mapping):
        return {int(i): int(n) for i, n in counts.items() if n}
    import numpy as np

    arr = np.asarray(counts)
    idx = np.flatnonzero(arr)
    return dict(zip(idx.tolist(), arr[idx].tolist(), strict=True))


def wider_reading_fits(path: Path, dtype: str, vocab_size: int) -> str | None:
    """The wider dtype this file also reads as with every id < vocab_size, if any (a uint32 file
    of small ids read as uint16 passes the max-id check: each high half is 0)."""
    import numpy as np

    i = _DTYPES.index(dtype)
    size = path.stat().st_size
    for wider in _DTYPES[i + 1 :]:
        item = _ITEMSIZE[wider]
        n = min(size, FULL_SCAN_BYTES) // item
        if size % item or n < 16:
            continue
        arr = np.memmap(path, dtype=np.dtype(wider).newbyteorder("<"), mode="r", shape=(n,))
        if int(arr.max()) < vocab_size:
            return wider
    return None


def manifest_entry(path: Path) -> dict[str, Any] | None:
    """What a `data prepare` manifest beside ``path`` says about it (dtype, tokenizer sha256)."""
    manifest = path.parent / MANIFEST_FILE
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        for entry in data["files"].values():
            if entry["path"] == path.name:
                return {
                    "manifest": str(manifest),
                    "dtype": str(data["dtype"]),
                    "tokenizer_sha256": str(data["tokenizer"]["sha256"]),
                    "tokenizer": str(data["tokenizer"].get("name", "?")),
                    "stats": data.get("stats") or {},
                }
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def unigram_entropy(train_counts: Any, heldout_counts: Any, vocab_size: int) -> float:
    """Held-out cross-entropy (nats/token) of the train unigram with add-0.5 smoothing: the floor
    of a model that learned only token frequencies. Counts: vectors or ``{id: n}`` mappings."""
    train = {i: n for i, n in sparse_counts(train_counts).items() if i < vocab_size}
    held = {i: n for i, n in sparse_counts(heldout_counts).items() if i < vocab_size}
    denom = sum(train.values()) + 0.5 * vocab_size
    total = sum(held.values())
    if not total:
        return math.nan
    return (
        -math.fsum(n * math.log((train.get(i, 0) + 0.5) / denom) for i, n in held.items()) / total
    )


# Per-size data checks (called by load once per size): problems as (path in the resolved settings,
# message), and the eval-set facts the plan records (:class:`EvalSetFacts`).

Problems = list[tuple[tuple[str | int, ...], str]]


@dataclass(frozen=True)
class EvalSetFacts:
    """What one LM eval set holds, measured from its files at plan time (None when unreadable)."""

    files: int
    tokens: int | None
    documents: int | None
    sequences: int | None
    scored_tokens: int | None  # all but each document's first token: what one eval point scores
    unigram_entropy_nats: float | None  # under the unigram of the training files

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_ids(settings: SizeSettings, dims: sizes_mod.SizeDims) -> tuple[TokenizerInfo, int, int]:
    """Tokenizer info and the EOS/PAD ids the runs use (ValueError naming what is wrong).
    ``dolma2`` with a smaller vocabulary and explicit ids: synthetic files, only the ids checked."""
    data = settings.training.data
    info = tokenizer_info(data.tokenizer)
    if info.name == "dolma2" and dims.vocab_size < info.vocab_size:
        if data.eos_token_id is None or data.pad_token_id is None:
            raise ValueError(
                f"size {dims.name} has vocab_size={dims.vocab_size} but dolma2 needs vocab_size >= "
                f"{info.vocab_size}; set data.eos_token_id/pad_token_id for custom token files, "
                "or data.tokenizer to a tokenizer.json"
            )
        info = TokenizerInfo("custom ids", dims.vocab_size, None, None, "")
    ids: dict[str, int] = {}
    for key, from_file in (("eos_token_id", info.eos_token_id), ("pad_token_id", info.pad_token_id)):
        given = getattr(data, key)
        if given is not None and from_file is not None and given != from_file:
            raise ValueError(
                f"{key}={given} disagrees with tokenizer {info.name} ({key.split('_')[0].upper()} "
                f"is {from_file} there); drop {key} or fix it"
            )
        val = given if given is not None else from_file
        if val is None:
            raise ValueError(
                f"tokenizer {info.name} has no {key.split('_')[0].upper()} token I recognise; "
                f"set training.data.{key}"
            )
        ids[key] = val
    return info, ids["eos_token_id"], ids["pad_token_id"]


def _local(path: str) -> Path | None:
    if "://" in path or "$" in path:
        return None
    p = Path(path).expanduser()
    return p if p.is_file() else None


def check_size(
    settings: SizeSettings, dims: sizes_mod.SizeDims, microbatch: int | None
) -> tuple[Problems, dict[str, EvalSetFacts]]:
    """All data problems of one size, and the eval-set facts (see module docstring)."""
    problems: Problems = []
    data = settings.training.data
    try:
        info, eos, pad = resolve_ids(settings, dims)
    except ValueError as err:
        field = "tokenizer" if data.tokenizer != "dolma2" else "eos_token_id"
        return [(("training", "data", field), str(err))], {}
    if info.vocab_size > dims.vocab_size:
        why = (
            f"tokenizer {info.name} has {info.vocab_size} ids but size {dims.name} has "
            f"vocab_size={dims.vocab_size} (allowed: vocab_size >= {info.vocab_size})"
        )
        return [(("training", "data", "tokenizer"), why)], {}
    for key, val in (("eos_token_id", eos), ("pad_token_id", pad)):
        if val >= info.vocab_size:
            problems.append(
                (("training", "data", key), f"{key}={val} is outside tokenizer {info.name}'s "
                 f"{info.vocab_size} ids")
            )  # fmt: skip
    dtype = narrowest_dtype(dims.vocab_size)
    seq = settings.training.sequence_length
    scans: dict[str, TokenFileScan] = {}
    ids_in: dict[str, int] = {}  # token ids per file (its size / the dtype's)

    def check_file(path: str, where: tuple[str | int, ...]) -> None:
        p = _local(path)
        if p is None:
            return  # remote, or made later (the job checks it)
        entry = manifest_entry(p)
        if entry is not None and entry["dtype"] != dtype:
            problems.append((where, f"token file {path} is {entry['dtype']} (per {entry['manifest']})"
                             f" but vocab_size={dims.vocab_size} makes OLMo-core read {dtype}"))
            return  # fmt: skip
        if entry is not None and info.sha256 and entry["tokenizer_sha256"] != info.sha256:
            problems.append((where, f"token file {path} was made with tokenizer {entry['tokenizer']}"
                             f" (per {entry['manifest']}), not {info.name}"))
            return  # fmt: skip
        size = p.stat().st_size
        if size % _ITEMSIZE[dtype]:
            problems.append((where, f"token file {path}: {size} bytes is not a whole number of "
                             f"{dtype} ids (wrong dtype? vocab_size={dims.vocab_size} reads {dtype})"))
            return  # fmt: skip
        ids_in[path] = size // _ITEMSIZE[dtype]
        scan = scan_token_file(p, dtype, eos, seq, info.vocab_size)
        if scan.max_id >= info.vocab_size:
            problems.append((where, f"token file {path}: largest id {scan.max_id} >= tokenizer "
                             f"{info.name}'s {info.vocab_size} ids when read as {dtype} (made with "
                             "another tokenizer or dtype?)"))
            return  # fmt: skip
        wider = wider_reading_fits(p, dtype, info.vocab_size) if entry is None else None
        if wider is not None:
            problems.append((where, f"token file {path} looks like a {wider} file (read as {wider}"
                             f" every id fits the vocabulary; OLMo-core will read {dtype})"))
            return  # fmt: skip
        scans[path] = scan

    for i, path in enumerate(data.paths or []):
        check_file(path, ("training", "data", "paths", i))
    short = _shorter_than_a_batch(data.paths or [], ids_in, settings.training)
    if short is not None:
        problems.append(short)
    ev = settings.evaluation
    per_batch = (microbatch or 0) * settings.topology.world_size // seq
    facts: dict[str, EvalSetFacts] = {}
    train_counts = _sum_counts([scans.get(p) for p in data.paths or []])
    for name, paths in ev.lm_sets.items():
        for i, path in enumerate(paths):
            check_file(path, ("evaluation", "lm_sets", name, i))
        got = [scans.get(p) for p in paths]
        if any(s is None for s in got):
            facts[name] = EvalSetFacts(len(paths), None, None, None, None, None)
            continue
        seqs = sum(s.sequences for s in got)  # type: ignore[union-attr]
        if per_batch and seqs < per_batch:
            problems.append(
                (("evaluation", "lm_sets", name), f"eval set {name!r} ({', '.join(paths)}) gives "
                 f"{seqs} sequences of <= {seq} tokens but one eval batch is {per_batch} sequences "
                 "(microbatch x data-parallel size); use more held-out text or a smaller "
                 "microbatch_size")
            )  # fmt: skip
        held_counts = _sum_counts(got)
        entropy = (
            unigram_entropy(train_counts, held_counts, info.vocab_size)
            if train_counts is not None and held_counts is not None
            else None
        )
        facts[name] = EvalSetFacts(
            files=len(paths),
            tokens=sum(s.tokens for s in got),  # type: ignore[union-attr]
            documents=sum(s.documents for s in got),  # type: ignore[union-attr]
            sequences=seqs,
            scored_tokens=sum(s.scored for s in got),  # type: ignore[union-attr]
            unigram_entropy_nats=None if entropy is None else round(entropy, 4),
        )
    return problems, facts


def _shorter_than_a_batch(
    paths: list[str], ids_in: dict[str, int], training: Any
) -> tuple[tuple[str | int, ...], str] | None:
    """The problem of train files that hold less than one global batch, when every file was read.
    OLMo-core cuts each file into whole sequences and drops the rest; a loader with fewer
    sequences than one batch yields no batch, and the trainer then starts empty epochs for ever
    (issue 35: 170,000 in 11 minutes, never a step)."""
    if not paths or any(p not in ids_in for p in paths):
        return None  # remote or not here yet: the job checks at start
    seq, gbs = training.sequence_length, training.global_batch_size
    have = sum(ids_in[p] // seq for p in paths)
    need = gbs // seq
    if have >= need:
        return None
    files = ", ".join(f"{p} ({ids_in[p]} tokens)" for p in paths)
    where: tuple[str | int, ...] = ("training", "data", "paths", *((0,) if len(paths) == 1 else ()))
    return where, (
        f"train data {files} gives {have} sequences of {seq} tokens, fewer than one global batch "
        f"of {need} (training.global_batch_size {gbs} tokens): no step could ever train (allowed: "
        f"at least {gbs} tokens in whole sequences, or a smaller global_batch_size)"
    )


def _sum_counts(scans: list[TokenFileScan | None]) -> dict[int, int] | None:
    """Summed unigram counts of complete scans, or None when any file is unread/partial."""
    if not scans or any(s is None or s.counts is None or not s.complete for s in scans):
        return None
    total: dict[int, int] = {}
    for s in scans:
        for i, n in s.counts.items():  # type: ignore[union-attr]
            total[i] = total.get(i, 0) + n
    return total
