"""The pairing-certificate check: do two plan entries still form a valid pair?

Why it lives in the report and not only in ``plan``: a pair whose arms differ in anything but the
declared architecture measures the wrong thing, and plan.json can be edited after planning. The
report recomputes the certificate (:mod:`olmoablate.contract.certificate`, the same hash ``plan``
wrote) and marks such a pair INVALID, kept out of the gate, instead of silently giving a delta.
"""

from __future__ import annotations

from typing import Any

from olmoablate.contract.certificate import differences, shared_settings
from olmoablate.contract.plan import RunEntry
from olmoablate.contract.proof import ProofRecord
from olmoablate.contract.runstates import RunState


def certificate_problems(baseline: RunEntry, variant: RunEntry, budget_match: str) -> list[str]:
    """Why the two plan entries do not form a valid pair (empty list = valid).

    Recomputes the pairing certificate (`olmoablate.contract.certificate`, the same hash `plan`
    wrote) of both arms under the pair's budget rule, and checks each entry still matches the
    certificate recorded for it (a plan.json edited after planning is caught here).
    """
    problems: list[str] = []
    if baseline.certificate_now(budget_match) != variant.certificate_now(budget_match):
        diff = differences(
            shared_settings(baseline.as_json(), budget_match),
            shared_settings(variant.as_json(), budget_match),
        )
        diff = _allow_reference_depth(diff, baseline, variant)
        if diff:
            problems.append(f"settings differ beyond the architecture: {', '.join(diff[:8])}")
    for who, entry in (("baseline", baseline), ("variant", variant)):
        if entry.certificate and entry.certificate != entry.certificate_now():
            problems.append(
                f"{who} {entry.run_id}: plan entry no longer matches its recorded "
                "certificate (plan.json edited after planning?)"
            )
    return problems


def proof_problems(entry: RunEntry, record: ProofRecord | None) -> tuple[list[str], list[str]]:
    """(problems, notes) from what the job proved at its last (re)start (proof.json).

    A run that trained block code other than the plan recorded, or another parameter count than
    planned, is no longer the planned arm: the pair is invalid. A run without a record (trained
    by a job from before proofs) is compared, with a note that its costs are unverified. Only
    for plans that record code identities (older plans predate both).
    """
    if record is None:
        return [], [f"{entry.run_id}: costs not verified at job start (no proof.json)"]
    problems = []
    planned = {k: v.sha256 for k, v in (entry.code or {}).items()}
    if entry.code is not None and record.code != planned:
        problems.append(f"{entry.run_id}: trained block code other than the plan recorded")
    if record.unique_params != entry.unique_params:
        problems.append(
            f"{entry.run_id}: built {record.unique_params:,} unique parameters, the plan says "
            f"{entry.unique_params:,}"
        )
    return problems, []


def _allow_reference_depth(diff: list[str], baseline: RunEntry, variant: RunEntry) -> list[str]:
    """A `layers:` reference arm is declared to change the depth; that difference is allowed."""
    if variant.architecture.layers is not None or baseline.architecture.layers is not None:
        return [d for d in diff if d != "size_dims.n_layers"]
    return diff


def token_shortfall(arm: str, run: Any) -> str | None:
    """Why a *completed* arm cannot be matched at its planned tokens (None when it can).

    ``run`` is the report's RunData. A run whose status says completed but whose metrics end
    before its planned token count (a truncated or partly copied metrics.jsonl) would make the
    gate compare the arms at different points of their schedules; the pair is INVALID (out of
    the gate) unless the gate sets ``allow_partial_pairs``. Runs still training are not judged
    here: they are incomplete, not inconsistent.
    """
    planned = int(run.entry.tokens)
    logged = float(run.max_tokens)
    if run.state != RunState.COMPLETED or logged >= planned:
        return None
    return (
        f"{arm} {run.run_id} is completed but its metrics end at {logged:,.0f} of "
        f"{planned:,} planned tokens (metrics.jsonl truncated?); out of the gate unless "
        "gate.allow_partial_pairs"
    )
