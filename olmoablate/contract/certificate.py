"""The pairing certificate: a hash of everything the two arms of a pair must share.

Why a hash and not a convention: the claim "the arms differ only in architecture" is the whole
value of an ablation. `plan` computes it for every run; the training job refuses a run whose entry
no longer matches its certificate; `report` recomputes it for both arms and excludes a pair whose
arms disagree. Anything not listed in ``ARM_KEYS`` (or, under FLOPs matching, ``BUDGET_KEYS``)
is part of the certificate — so a new setting is covered by default, not forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olmoablate.io import sha256_of

#: Run-entry keys that identify the arm or are derived from its architecture (costs).
ARM_KEYS: frozenset[str] = frozenset(
    {
        "run_id",
        "pair_id",
        "pairs",
        "arm",
        "role",  # "aa": an A/A baseline of the gate's noise measurement (no pair)
        "architecture",
        "certificate",
        "budget_match",
        "params",
        "non_embedding_params",
        "unique_params",
        "train_flops_per_token",
        "final_train_flops_per_token",
        "total_train_flops",
        "gpu_hours",
        "peak_memory_gb",
        "optimizer_state_gb",
        "loop_counts",
        "code",  # the blocks' code identity: the intervention itself (both arms share the rest)
    }
)

#: Keys that may differ inside a pair when the variant's budget is matched on FLOPs.
BUDGET_KEYS: tuple[tuple[str, ...], ...] = (
    ("tokens",),
    ("steps",),
    ("training", "tokens"),
    ("training", "steps"),
)


def shared_settings(run: Mapping[str, Any], budget_match: str | None = None) -> dict[str, Any]:
    """The part of a run entry that both arms of its pair must have identical.

    ``budget_match`` is the pair's budget rule (default: the run's own ``budget_match``); under
    ``"flops"`` the token budget and step count are allowed to differ and are left out.
    """
    # Shallow copies only: hashing never mutates, and the budget keys are dropped from fresh
    # dicts along their path (the run entry itself is left untouched).
    shared = {k: v for k, v in run.items() if k not in ARM_KEYS}
    if (budget_match or run.get("budget_match")) == "flops":
        for path in BUDGET_KEYS:
            node: Any = shared
            for key in path[:-1]:
                child = node.get(key)
                if not isinstance(child, dict):
                    node = None
                    break
                node[key] = dict(child)
                node = node[key]
            if isinstance(node, dict):
                node.pop(path[-1], None)
    return shared


def certificate_of(run: Mapping[str, Any], budget_match: str | None = None) -> str:
    """sha256 of the run's shared settings (canonical JSON) under the pair's budget rule."""
    return sha256_of(shared_settings(run, budget_match))


def differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two mappings (for error messages and reports)."""
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}.{key}" if prefix else str(key)
        va, vb = a.get(key, "<missing>"), b.get(key, "<missing>")
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out.extend(differences(va, vb, path))
        elif va != vb:
            out.append(path)
    return out
