"""The plan as typed models: ``results/<spec>/plan.json``, written by `plan`, read by every stage.

Why typed: stages re-reading the plan's dicts retyped the spec's defaults, and the copies drifted
(``max_num_timeout: 0`` became 3). A plan records *concrete* values, so plan-only models have no
defaults (a missing field is a one-line error). The JSON form round-trips (:meth:`Plan.as_json`),
so certificates and pre-registration hashes of existing results still match.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    model_serializer,
    model_validator,
)

from olmoablate.errors import NAME_RE, UserError, first_error
from olmoablate.io import (
    MAX_JSON_BYTES,
    InputLimitError,
    parse_json_bounded,
    read_bytes_bounded,
    sha256_of,
    write_json_atomic,
)
from olmoablate.plan.arch import Architecture
from olmoablate.plan.gate import LEGACY_FLOOR, Budget, Gate
from olmoablate.plan.identity import PlanIdentity, certificate_of
from olmoablate.plan.names import PLAN_FILE
from olmoablate.plan.resolved import PlanModel, RunSlurm, RunTraining
from olmoablate.plan.schema import Evaluation, Topology, computes_in_bf16
from olmoablate.plan.sizes import SizeDims

#: plan.json format version. 1: the first release's format (the first gate held twice, at the top
#: level as ``gate``/``gate_sha256``/``gate_raw_sha256`` and as ``gates[0]``); 2: every gate once,
#: in ``gates`` (a ``gate:`` spec is its one-entry case). Format 1 is read through :func:`upgrade`.
PLAN_SCHEMA = 2

#: The format-1 top-level copy of the first gate, and the key of ``gates[0]`` each copies.
_GATE_COPY = ("gate", "gate_sha256", "gate_raw_sha256")


def run_named(err: ValidationError, doc: dict[str, Any]) -> str:
    """`` (run 1B-s0-looped)`` when the error is inside a run entry that has an id."""
    loc = err.errors()[0]["loc"]
    if len(loc) >= 2 and loc[0] == "runs" and isinstance(loc[1], int):
        runs = doc.get("runs")
        if isinstance(runs, list) and loc[1] < len(runs) and isinstance(runs[loc[1]], dict):
            rid = runs[loc[1]].get("run_id")
            if isinstance(rid, str):
                return f" (run {rid})"
    return ""


def upgrade(doc: dict[str, Any], where: str = PLAN_FILE) -> dict[str, Any]:
    """A format-1 plan (``doc`` as parsed) in the current format; a current one as it is.
    The top-level copy of the first gate goes; two copies that differ are an error, since only
    one could be the pre-registered gate. A plan from before ``gates`` existed gets its ``gate``
    as the only entry, as `plan` records a ``gate:`` spec today."""
    if doc.get("schema") != 1:
        return doc
    doc = _fill_v1(doc)
    gates = doc.get("gates")
    first = gates[0] if isinstance(gates, list) and gates and isinstance(gates[0], dict) else None
    for key in _GATE_COPY:
        if key not in doc:
            continue
        copy = doc[key]
        if copy is None and first is None:
            continue
        if first is None or first.get(key) != copy:
            raise UserError(
                f"{where}: {key}: differs from gates[0].{key}, its second copy in this format-1 "
                "plan (edited by hand?); make the two agree, or re-plan deliberately with "
                "`olmoablate plan --replan`"
            )
    doc = {k: v for k, v in doc.items() if k not in _GATE_COPY}
    doc["schema"] = PLAN_SCHEMA
    return doc


def _fill_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Fill the keys a format-1 plan from before several gates and A/A runs existed lacks."""
    if all(k in doc for k in ("gates", "aa_runs", "eval_sets")):
        return doc
    doc = dict(doc)
    doc.setdefault("aa_runs", [])
    doc.setdefault("eval_sets", {})
    if "gates" not in doc:
        g = doc.get("gate")
        doc["gates"] = (
            [
                {
                    "name": (g.get("variant") if isinstance(g, dict) else None) or "gate",
                    "gate": g,
                    "gate_sha256": doc.get("gate_sha256"),
                    "gate_raw_sha256": doc.get("gate_raw_sha256"),
                }
            ]
            if g
            else []
        )
    return doc


BudgetMatch = Literal["tokens", "flops"]


def _size_dims(value: Any) -> Any:
    """``size_dims`` (a JSON object) -> :class:`SizeDims`, every field present and an int/bool."""
    if not isinstance(value, dict):
        return value
    names = [f.name for f in fields(SizeDims)]
    missing = [n for n in names if n not in value]
    unknown = [k for k in value if k not in names]
    if missing or unknown:
        raise ValueError(
            f"size dimensions need exactly {', '.join(names)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    for n in names:
        want = str if n == "name" else bool if n == "preset" else int
        v = value[n]
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise ValueError(f"{n} must be {want.__name__}, got {v!r}")
    return SizeDims(**value)


class BlockCode(PlanModel):
    """:func:`olmoablate.plan.blocks.code_identity`, checked by submit, the job and the report."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    files: int
    sha256: str


class RunEntry(PlanModel):
    """One training run: an arm of one or more pairs, or an A/A baseline (``role: aa``)."""

    #: Part of a path (runs/<run_id>/): a name, never ``..`` or ``a/b`` (a hostile plan.json).
    run_id: Annotated[str, Field(pattern=NAME_RE)]
    group_id: str
    pair_id: str
    pairs: list[str]
    size: str
    arm: str
    seed: int
    architecture: Architecture
    budget_match: BudgetMatch
    size_dims: Annotated[SizeDims, BeforeValidator(_size_dims)]
    params: int
    non_embedding_params: int
    unique_params: int
    train_flops_per_token: int
    final_train_flops_per_token: int
    tokens: int
    steps: int
    total_train_flops: int
    gpu_hours: float
    peak_memory_gb: float
    optimizer_state_gb: float
    training: RunTraining
    evaluation: Evaluation
    topology: Topology
    slurm: RunSlurm
    #: Looped variants: the loop counts every eval point scores (always including the trained b).
    loop_counts: list[int] | None = None
    role: Literal["aa"] | None = None
    #: Each block's code identity at plan time (absent for a baseline and in older plans).
    code: dict[str, BlockCode] | None = None
    certificate: str

    @field_serializer("architecture")
    def _arch(self, arch: Architecture) -> dict[str, Any]:
        return arch.as_mapping()

    @property
    def bf16(self) -> bool:
        return computes_in_bf16(self.training.precision, self.topology)

    @property
    def is_baseline(self) -> bool:
        return self.arm == "baseline"

    @property
    def is_aa(self) -> bool:
        return self.role == "aa"

    def as_json(self) -> dict[str, Any]:
        """The entry as plan.json holds it (what the certificate hashes)."""
        return _drop_absent(self.model_dump(mode="json"), ("loop_counts", "role", "code"))

    def certificate_now(self, budget_match: str | None = None) -> str:
        """Recomputed, to catch a hand-edited arm (the job and the report compare it)."""
        return certificate_of(self.as_json(), budget_match)


class Pair(PlanModel):
    pair_id: str
    group_id: str
    size: str
    seed: int
    variant: str
    baseline_run: str
    variant_run: str
    budget_match: BudgetMatch
    certificate: str
    differs: list[str]


class GateRegistration(PlanModel):
    """An earlier pre-registration of a gate, kept by ``plan --replan`` (what it overwrote).
    ``gate``: the block it registered, so the report can still decide with it (the gate in force
    at the first look spent the level; docs/gate-statistics.md); ``after_runs``: whether runs of
    the spec had started when it was replaced (a look was possible). Both absent in plans from
    before them: the block is then unknown and a look is assumed."""

    created: str
    seeds: list[int] | None
    gate_sha256: str | None
    gate: Gate | None = None
    after_runs: bool | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:  # an old plan's record round-trips as written
        out = handler(self)
        for k in ("gate", "after_runs"):
            if out.get(k) is None:
                out.pop(k, None)
        return out

    def block(self, current: GateEntry) -> Gate | None:
        """The gate this registration decided with: its recorded block when it matches its hash,
        the current block when the hashes agree (only the seeds changed), else None (unknown)."""
        if self.gate is not None and sha256_of(self.gate.model_dump(mode="json")) == self.gate_sha256:
            return self.gate
        return current.gate if self.gate_sha256 == current.gate_sha256 else None


class LadderTarget(PlanModel):
    """One target of a multiplier gate, priced at its planned budget (docs/scaling.md): each
    arm's tokens and whole-run training FLOPs as `plan` prices a run of that size (the variant's
    tokens follow the spec's budget match), the baseline's total parameters and the variant's
    unique ones (``RunEntry.unique_params``: a looped model's reused weights count once). The
    report builds ``olmoablate.scaling.Target(size, flops_v, tokens_v, params_v)`` from it."""

    size: str
    tokens_b: int
    tokens_v: int
    flops_b: int
    flops_v: int
    params_b: int
    params_v: int


class LadderRecord(PlanModel):
    """A multiplier gate's ladder as planned: ``rungs`` in the baseline's training-FLOPs order
    (their runs are the plan's entries of those sizes) and the ``targets`` it projects to."""

    rungs: list[str]
    targets: list[LadderTarget]


class GateEntry(PlanModel):
    """One pre-registered gate: its block and the hashes `report` checks it against.
    ``seeds``/``design_sha256`` are absent in plans from before sequential designs (reported as
    then); ``history``: registrations a ``plan --replan`` replaced (seeds added after a look);
    ``ladder``: a multiplier gate's rungs and priced targets (absent for other rules)."""

    name: str
    gate: Gate
    gate_sha256: str
    gate_raw_sha256: str | None
    seeds: list[int] | None = None
    design_sha256: str | None = None
    history: list[GateRegistration] = []
    ladder: LadderRecord | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:  # an old plan's entry round-trips as written
        out = handler(self)
        for k in ("seeds", "design_sha256", "ladder"):
            if out.get(k) is None:
                out.pop(k, None)
        if not out.get("history"):
            out.pop("history", None)
        return out


class EvalSetInfo(PlanModel):
    """One LM eval set, measured from its files at plan time (None: not readable, e.g. remote)."""

    files: int
    tokens: int | None
    documents: int | None
    sequences: int | None
    scored_tokens: int | None
    unigram_entropy_nats: float | None


class Plan(PlanModel):

    schema_version: int = Field(alias="schema")
    spec_name: str
    description: str
    spec_path: str
    workdir: str
    spec_sha256: str
    #: ``--set`` overrides, in order (hashed into ``spec_sha256``); not written when none. A plain
    #: ``[]``: ``default_factory=list`` makes pydantic inspect the builtin, ~3 ms of `validate`.
    overrides: list[str] = Field([], exclude_if=lambda v: not v)
    created: str
    olmoablate_version: str
    sizes: list[str]
    seeds: list[int]
    variants: dict[str, Architecture]
    budget: Budget
    eval_sets: dict[str, dict[str, EvalSetInfo]]
    gates: list[GateEntry]
    aa_runs: list[str]
    accounting: dict[str, str]
    pairs: list[Pair]
    runs: list[RunEntry]
    #: Run identities and reuse across the store; None (not written) in plans from before them.
    identity: PlanIdentity | None = None
    #: A view's gate (:meth:`gate_views`); None: the plan itself, whose gate is the first.
    gate_name: str | None = Field(None, exclude=True)

    _path: Path | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _identity_fits(self) -> Plan:
        if self.identity is not None:
            ids = {r.run_id for r in self.runs}
            odd = sorted(set(self.identity.runs) ^ ids) or sorted(set(self.identity.reused) - ids)
            if odd:
                raise ValueError(
                    f"identity: names other runs than the plan's ({', '.join(odd[:4])})"
                )
        return self

    @field_serializer("variants")
    def _variants(self, variants: dict[str, Architecture]) -> dict[str, Any]:
        return {k: v.as_mapping() for k, v in variants.items()}

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read and validate ``path`` (a plan.json or its results folder); one-line errors.
        A job start loads it twice in one process: unchanged bytes return the same frozen plan."""
        p = Path(path)
        plan_path = p / PLAN_FILE if p.is_dir() else p
        if not plan_path.is_file():
            raise UserError(f"{plan_path} not found: run `olmoablate plan SPEC` first")
        try:
            data = read_bytes_bounded(plan_path, MAX_JSON_BYTES)
            key = (str(plan_path.resolve()), hashlib.sha256(data).hexdigest())
            if _LAST_LOADED and _LAST_LOADED[0] == key:
                return _at(_LAST_LOADED[1], plan_path)
            doc = parse_json_bounded(data)
        except InputLimitError as err:
            raise UserError(f"{plan_path}: refused: {err}") from None
        except (OSError, ValueError) as err:
            raise UserError(f"{plan_path}: unreadable plan ({err})") from None
        plan = cls.from_json(doc, where=str(plan_path))
        plan._path = plan_path
        _LAST_LOADED[:] = [key, plan]
        return plan

    @classmethod
    def from_json(cls, doc: Any, where: str = PLAN_FILE) -> Plan:
        if not isinstance(doc, dict):
            raise UserError(f"{where}: not a plan (expected a JSON object)")
        version = doc.get("schema")
        if isinstance(version, int) and version > PLAN_SCHEMA:
            raise UserError(
                f"{where}: schema: plan format {version} was written by a newer olmoablate "
                f"(this one reads format {PLAN_SCHEMA}); upgrade olmoablate"
            )
        try:
            return cls.model_validate(upgrade(doc, where), context={LEGACY_FLOOR: True})
        except ValidationError as err:
            raise UserError(
                f"{where}: {first_error(err)}{run_named(err, doc)}; rerun `olmoablate plan SPEC`"
            ) from None

    def as_json(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", by_alias=True)
        out["runs"] = [r.as_json() for r in self.runs]
        return _drop_absent(out, ("identity",))

    def write(self, path: str | Path) -> None:
        write_json_atomic(path, self.as_json())

    @property
    def path(self) -> Path | None:
        return self._path

    @functools.cached_property
    def runs_by_id(self) -> dict[str, RunEntry]:
        return {r.run_id: r for r in self.runs}

    @functools.cached_property
    def pairs_by_id(self) -> dict[str, Pair]:
        return {p.pair_id: p for p in self.pairs}

    def run(self, run_id: str) -> RunEntry:
        return self._lookup("run", run_id, self.runs_by_id)

    def pair(self, pair_id: str) -> Pair:
        return self._lookup("pair", pair_id, self.pairs_by_id)

    def _lookup(self, what: str, key: str, table: dict[str, Any]) -> Any:
        if key not in table:
            raise UserError(
                f"{self._where()}: no {what} {key!r} in this plan "
                f"(allowed: {', '.join(table) or '(none)'})"
            )
        return table[key]

    def pairs_of(self, run_id: str) -> list[Pair]:
        return [p for p in self.pairs if run_id in (p.baseline_run, p.variant_run)]

    def check_run_ids(self, run_ids: list[str] | None, option: str) -> list[str]:
        """User-named run ids, checked against the plan (one-line error naming the allowed)."""
        for rid in run_ids or []:
            if rid not in self.runs_by_id:
                allowed = ", ".join(self.runs_by_id) or "(none)"
                raise UserError(f"{option} {rid}: not a run of this plan (allowed: {allowed})")
        return list(run_ids or [])

    # ``gate``, ``gate_sha256``, ``gate_raw_sha256``: of this plan's (or view's) entry of ``gates``
    @property
    def gate(self) -> Gate | None:
        return getattr(self.gate_entry(), "gate", None)

    @property
    def gate_sha256(self) -> str | None:
        return getattr(self.gate_entry(), "gate_sha256", None)

    @property
    def gate_raw_sha256(self) -> str | None:
        return getattr(self.gate_entry(), "gate_raw_sha256", None)

    def gate_views(self) -> list[tuple[str, Plan]]:
        """(name, this plan viewed as that gate's) per gate. Why: every piece of the gate code
        reads ``plan.gate``; a view puts each pre-registered gate there in turn."""
        out = []
        for e in self.gates:
            view = self.model_copy(update={"gate_name": e.name})
            view._path = self._path
            out.append((e.name, view))
        return out

    def gate_entry(self) -> GateEntry | None:
        for e in self.gates:
            if self.gate_name is None or e.name == self.gate_name:
                return e
        return None

    def _where(self) -> str:
        return str(self._path) if self._path is not None else PLAN_FILE


#: (path and sha256 of the bytes, plan) of the last :meth:`Plan.load` (see there).
_LAST_LOADED: list[Any] = []


def _at(plan: Plan, path: Path) -> Plan:
    """``plan`` as loaded from ``path`` (the same file named another way)."""
    if plan.path == path:
        return plan
    other = plan.model_copy()
    other._path = path
    return other


def _drop_absent(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Optional keys left out when unset, as earlier releases wrote them."""
    for k in keys:
        if d.get(k) is None:
            d.pop(k, None)
    return d
