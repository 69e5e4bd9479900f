"""Execution parity of a pair: both arms must have run the same execution for their cost to
be compared.

Why: ``topology.attention_backend: auto`` is resolved on each node at job start (flash_2 where
flash-attn imports, else torch SDPA with an explicit mask), and the arms of a pair may run on
different nodes, in different attempts, with another torch build. The pairing certificate fixes
what the plan *asked* for; ``summary.json``'s ``execution`` block (written by the training job)
records what *ran*. A kernel, dtype, compile or world-size difference between the arms would be
charged to the variant's step-time and memory overhead and could decide the gate, so a pair whose
records differ is flagged in the report and its measured cost is kept out of the gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmoablate.contract.runfiles import RunSummary

#: The fields of ``summary.json``'s ``execution`` block that must be equal in both arms of a
#: pair for their measured cost (step time, tokens/s, memory, decode) to be compared.
PARITY_KEYS = (
    "device",
    "world_size",
    "data_parallel",
    "param_dtype",
    "autocast_dtype",
    "compute_dtype",
    "attention_backend",
    "compile",
    "gpu_model",
)


def execution_of(summary: RunSummary | None) -> Mapping[str, Any] | None:
    """The ``execution`` block of a run's summary.json (None when the run has none yet), as
    recorded: a field the job did not write stays absent (``not recorded``)."""
    block = summary.execution if summary is not None else None
    return block.as_json() if block is not None else None


def execution_mismatch(
    baseline: Mapping[str, Any] | None, variant: Mapping[str, Any] | None
) -> list[str]:
    """What differs between the two arms' execution records (empty: comparable).

    Neither arm recorded yet (runs in progress, or older runs): nothing to compare, empty. One
    arm recorded and the other not: the execution of the pair cannot be shown to match, which
    is a difference too. A field missing from one record only is reported as ``not recorded``.
    """
    if baseline is None and variant is None:
        return []
    if baseline is None or variant is None:
        who = "baseline" if baseline is None else "variant"
        return [f"the {who} recorded no execution block (summary.json), the other arm did"]
    out = []
    for key in PARITY_KEYS:
        b, v = baseline.get(key, _MISSING), variant.get(key, _MISSING)
        if b != v:
            out.append(f"{key}: baseline {_show(b)}, variant {_show(v)}")
    return out


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "not recorded"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={value[k]}" for k in sorted(value)) + "}"
    return str(value)


def parity_note(problems: list[str]) -> str:
    """The report's one line for a pair whose arms ran different executions."""
    return (
        "arms ran different executions (" + "; ".join(problems) + "): measured cost not "
        "comparable, kept out of the gate"
    )
