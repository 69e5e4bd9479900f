"""Pre-registration: the report decides with the gate whose hash ``plan`` recorded.

A gate chosen after seeing the results can be tuned into any verdict. If plan.json's gate block
still matches its recorded hash, it is the gate; if it was edited, the gate is recovered from the
spec when the spec still matches; otherwise "pre-registration broken" and no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from olmoablate.errors import UserError
from olmoablate.io import MAX_YAML_BYTES, check_size, compose_yaml_bounded, sha256_of
from olmoablate.plan import identity as ident
from olmoablate.plan.gate import Gate
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.load import apply_overrides, loader_class, spec_sha256
from olmoablate.plan.names import PLAN_FILE
from olmoablate.plan.planfile import Pair, Plan
from olmoablate.plan.sizes import PRESET_NAMES
from olmoablate.plan.store import recorded_identity


@dataclass
class PreRegistered:
    gate: Gate | None  # the gate to decide with (display only when ``broken``)
    source: str  # "plan.json" | "spec" | "plan.json (unverified)"
    warnings: list[str] = field(default_factory=list)
    broken: str | None = None


def _block(gate: Gate | None) -> dict[str, Any] | None:
    """The gate block as plan.json holds it (what ``gate_sha256`` hashes)."""
    return None if gate is None else gate.model_dump(mode="json")


def _spec_path(plan: Plan) -> Path | None:
    if not plan.spec_path:
        return None
    candidates = [Path(plan.spec_path)]
    if plan.workdir:
        candidates.insert(0, Path(plan.workdir) / plan.spec_path)
    return next((c for c in candidates if c.is_file()), None)


def _raw_gate(doc: Any, name: str | None) -> Any:
    """The spec's block of gate ``name`` (``gates.<name>``), or its ``gate:`` block."""
    if not isinstance(doc, dict):
        return None
    if name is not None and isinstance(doc.get("gates"), dict):
        return doc["gates"].get(name)
    return doc.get("gate")


def _gate_name(plan: Plan) -> str | None:
    """The name of the gate ``plan`` decides with (its view's, else the first of ``gates``)."""
    entry = plan.gate_entry()
    return entry.name if entry is not None else plan.gate_name


def _validated(raw: Any) -> Gate | None:
    if not isinstance(raw, dict):
        return None
    try:
        return Gate.model_validate(raw)
    except ValidationError:
        return None


def _spec_doc(path: Path, plan: Plan) -> Any:
    """The spec file as plan read it: within the limits every spec is parsed with (it may have
    changed since planning), the plan's ``--set`` overrides applied."""
    data = path.read_bytes()
    check_size(data, MAX_YAML_BYTES, "the spec")
    doc = compose_yaml_bounded(data.decode("utf-8"), loader_class())[1]
    if plan.overrides and isinstance(doc, dict):
        doc, _ = apply_overrides(doc, plan.overrides, set(PRESET_NAMES) | set(plan.sizes))
    return doc


def _spec_gate(path: Path, plan: Plan) -> tuple[Any, Gate | None]:
    """(raw gate block, validated gate or None) of the spec file (overrides applied)."""
    raw = _raw_gate(_spec_doc(path, plan), _gate_name(plan))
    return raw, _validated(raw)


def resolve_gate(plan: Plan) -> PreRegistered:
    """The pre-registered gate of ``plan`` (a plan, or its view of one gate; see module
    docstring)."""
    gate, recorded = plan.gate, plan.gate_sha256
    if gate is None or not recorded:
        return PreRegistered(gate, f"{PLAN_FILE} (unverified)")
    if sha256_of(_block(gate)) == recorded:
        return PreRegistered(gate, PLAN_FILE)
    path = _spec_path(plan)
    if path is not None:
        try:
            raw, validated = _spec_gate(path, plan)
            spec_same = plan.spec_sha256 == spec_sha256(path.read_bytes(), plan.overrides)
        except Exception as err:  # noqa: BLE001 - reported: an unreadable spec breaks recovery
            raw, validated, spec_same = None, None, False
            why = f"could not re-read {path} ({err.__class__.__name__})"
        else:
            why = f"{path} does not match the recorded hash either"
        hashes = {recorded, plan.gate_raw_sha256}
        gate_same = (validated is not None and sha256_of(_block(validated)) == recorded) or (
            raw is not None and sha256_of(raw) in hashes
        )
        if validated is not None and (gate_same or spec_same):
            return PreRegistered(
                validated,
                "spec",
                [
                    "PRE-REGISTRATION: plan.json's gate block was edited after planning (it no "
                    f"longer matches gate_sha256); the recorded gate was recovered from {path}, "
                    "which still matches it, and is the one used"
                ],
            )
    else:
        why = "the spec file is not found"
    broken = (
        "pre-registration broken: plan.json's gate block no longer matches its recorded "
        f"gate_sha256 and {why}; no verdict can be given (re-plan deliberately with "
        "`olmoablate plan --replan` to pre-register a new gate)"
    )
    return PreRegistered(gate, "plan.json (edited)", [f"GATE: {broken}"], broken)


def check_gate_unchanged(plan: Plan) -> list[str]:
    """Loud warnings when the gate was edited after planning (pre-registration lock)."""
    out: list[str] = []
    block = _block(plan.gate)
    if block is not None and plan.gate_sha256 and sha256_of(block) != plan.gate_sha256:
        out.append(
            "GATE CHANGED: plan.json's gate block does not match its recorded gate_sha256 "
            "(plan.json was edited after planning)"
        )
    path = _spec_path(plan)
    if path is None:
        return out
    try:
        doc = _spec_doc(path, plan)
    except Exception as err:  # noqa: BLE001 - reported, never fatal
        out.append(f"spec {path}: could not re-read to check the gate ({err.__class__.__name__})")
        return out
    raw = _raw_gate(doc, _gate_name(plan))
    if plan.gate_raw_sha256:
        changed = sha256_of(raw) != plan.gate_raw_sha256
    elif plan.gate_sha256 and sha256_of(raw) == plan.gate_sha256:
        changed = False
    elif raw is None or plan.gate is None:
        changed = (raw is None) != (plan.gate is None)
    else:  # no raw hash recorded: compare with the schema's defaults applied on both sides
        changed = _validated(raw) != plan.gate
    if changed:
        out.append(
            f"GATE CHANGED AFTER PLANNING: the gate block in {path} differs from the one recorded "
            "in plan.json; this report uses the recorded (pre-registered) gate"
        )
    return out


# Run identities, checked again by the report: a run reused from another spec counts only if its
# recorded identity is the one this plan expects, and a pair's arms must have equal identities
# except the architecture (plan.identity.pair_key). Plans from before identities skip both.


def reuse_problems(layout: ResultsDir, plan: Plan) -> dict[str, list[str]]:
    """run_id -> why its reused run cannot be taken as this plan's run (reused runs only)."""
    out: dict[str, list[str]] = {}
    if plan.identity is None:
        return out
    owners: dict[str, Plan | str] = {}
    for run in plan.runs:
        rid = run.run_id
        where = layout.run(rid).reused_from
        if where is None:
            continue
        mine = plan.identity.runs.get(rid)
        spec, _, owner_rid = where.partition("/runs/")
        if spec not in owners:
            try:
                owners[spec] = Plan.load(layout.store / spec)
            except UserError as err:
                owners[spec] = str(err)
        owner = owners[spec]
        if isinstance(owner, str):
            out[rid] = [f"reused run {where}: its plan cannot be read ({owner})"]
            continue
        theirs = owner.identity.runs.get(owner_rid) if owner.identity is not None else None
        recorded = recorded_identity(layout.store / where)
        problems = []
        if theirs != mine:
            problems.append(
                f"reused run {where} has identity {ident.short(str(theirs))} in its plan, this "
                f"plan expects {ident.short(str(mine))} (`olmoablate explain` shows why)"
            )
        if recorded is not None and recorded != mine:
            problems.append(
                f"reused run {where} trained identity {ident.short(recorded)} (identity.json), "
                f"this plan expects {ident.short(str(mine))}"
            )
        if problems:
            out[rid] = problems
    return out


def pair_identity_problems(plan: Plan, pair: Pair, budget_match: str) -> list[str]:
    """Why the pair's arms are not "equal identities except the architecture" (empty: they are)."""
    if plan.identity is None:
        return []
    base, var = plan.runs_by_id.get(pair.baseline_run), plan.runs_by_id.get(pair.variant_run)
    if base is None or var is None:
        return []
    pb, pv = plan.identity.payload_of(base.as_json()), plan.identity.payload_of(var.as_json())
    depth = base.architecture.layers is not None or var.architecture.layers is not None
    if ident.pair_key(pb, budget_match, depth) == ident.pair_key(pv, budget_match, depth):
        return []
    skip = set(ident.ARCH_KEYS)
    fields = [f for f, _, _ in ident.diff(pb, pv) if f.split(".")[0].split("[")[0] not in skip]
    return [f"identities differ beyond the architecture: {', '.join(fields[:8])}"]
