"""Per-size data checks of `validate`/`plan`: tokenizer ids, token files, eval sets that fill a batch.

Called by `olmoablate.spec.load` once per size; returns problems as (path inside the resolved
per-size settings, message) so the loader can point at the spec line, plus the facts the plan
records for the report (:class:`EvalSetFacts`: tokens each eval point should score, held-out
unigram entropy).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from olmoablate.contract import sizes as sizes_mod
from olmoablate.contract import tokens as tk
from olmoablate.contract.schema import SizeSettings

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


def resolve_ids(
    settings: SizeSettings, dims: sizes_mod.SizeDims
) -> tuple[tk.TokenizerInfo, int, int]:
    """Tokenizer info and the EOS/PAD ids the runs use (ValueError naming what is missing/wrong).

    ``tokenizer: dolma2`` (the default) with a vocabulary smaller than dolma2's and explicit
    ``eos_token_id``/``pad_token_id`` means synthetic token files with their own ids (tests,
    smoke runs): only the ids are checked, against the size's ``vocab_size``.
    """
    data = settings.training.data
    info = tk.tokenizer_info(data.tokenizer)
    if info.name == "dolma2" and dims.vocab_size < info.vocab_size:
        if data.eos_token_id is None or data.pad_token_id is None:
            raise ValueError(
                f"size {dims.name} has vocab_size={dims.vocab_size} but dolma2 needs vocab_size >= "
                f"{info.vocab_size}; set data.eos_token_id/pad_token_id for custom token files, "
                "or data.tokenizer to a tokenizer.json"
            )
        info = tk.TokenizerInfo("custom ids", dims.vocab_size, None, None, "")
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
        return [
            (
                ("training", "data", "tokenizer"),
                f"tokenizer {info.name} has {info.vocab_size} ids but size {dims.name} has "
                f"vocab_size={dims.vocab_size} (allowed: vocab_size >= {info.vocab_size})",
            )
        ], {}
    for key, val in (("eos_token_id", eos), ("pad_token_id", pad)):
        if val >= info.vocab_size:
            problems.append(
                (("training", "data", key), f"{key}={val} is outside tokenizer {info.name}'s "
                 f"{info.vocab_size} ids")
            )  # fmt: skip
    dtype = tk.narrowest_dtype(dims.vocab_size)
    seq = settings.training.sequence_length
    scans: dict[str, tk.TokenFileScan] = {}

    def check_file(path: str, where: tuple[str | int, ...]) -> None:
        p = _local(path)
        if p is None:
            return  # remote, or made later (the job checks it)
        entry = tk.manifest_entry(p)
        if entry is not None and entry["dtype"] != dtype:
            problems.append((where, f"token file {path} is {entry['dtype']} (per {entry['manifest']})"
                             f" but vocab_size={dims.vocab_size} makes OLMo-core read {dtype}"))
            return  # fmt: skip
        if entry is not None and info.sha256 and entry["tokenizer_sha256"] != info.sha256:
            problems.append((where, f"token file {path} was made with tokenizer {entry['tokenizer']}"
                             f" (per {entry['manifest']}), not {info.name}"))
            return  # fmt: skip
        item = {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8}[dtype]
        size = p.stat().st_size
        if size % item:
            problems.append((where, f"token file {path}: {size} bytes is not a whole number of "
                             f"{dtype} ids (wrong dtype? vocab_size={dims.vocab_size} reads {dtype})"))
            return  # fmt: skip
        scan = tk.scan_token_file(p, dtype, eos, seq, info.vocab_size)
        if scan.max_id >= info.vocab_size:
            problems.append((where, f"token file {path}: largest id {scan.max_id} >= tokenizer "
                             f"{info.name}'s {info.vocab_size} ids when read as {dtype} (made with "
                             "another tokenizer or dtype?)"))
            return  # fmt: skip
        wider = tk.wider_reading_fits(p, dtype, info.vocab_size) if entry is None else None
        if wider is not None:
            problems.append((where, f"token file {path} looks like a {wider} file (read as {wider}"
                             f" every id fits the vocabulary; OLMo-core will read {dtype})"))
            return  # fmt: skip
        scans[path] = scan

    for i, path in enumerate(data.paths or []):
        check_file(path, ("training", "data", "paths", i))
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
            tk.unigram_entropy(train_counts, held_counts, info.vocab_size)
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


def _sum_counts(scans: list[tk.TokenFileScan | None]) -> dict[int, int] | None:
    """Summed unigram counts of complete scans, or None when any file is unread/partial."""
    if not scans or any(s is None or s.counts is None or not s.complete for s in scans):
        return None
    total: dict[int, int] = {}
    for s in scans:
        for i, n in s.counts.items():  # type: ignore[union-attr]
            total[i] = total.get(i, 0) + n
    return total
