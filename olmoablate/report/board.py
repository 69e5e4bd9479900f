"""`olmoablate board`: every proposal (spec) of a store in one table, and the gate's track record.

Why from the files only: the board is read by whoever decides which proposal gets a 3B/7B run,
often on a laptop with a copy of the store; it reads each spec's plan.json, its runs'
status.json and the gate.json its last `report` wrote (never rebuilding a report, so it stays
fast and shows exactly the verdicts the reports published). A spec never reported shows its
state and costs with no verdict.

Costs: ``spent`` is the planned GPU-hours of the runs the spec trains itself, times the share of
their steps done; ``saved_reuse`` the planned GPU-hours of the runs it reuses from other specs;
``saved_futility`` what a futility stop saved, read from the optional gate.json field
``futility: {"stopped": bool, "gpu_hours_saved": float}`` of a gate record (absent: 0).

Independence: two proposals whose pairs use one baseline run (the same identity) are not
independent comparisons; ``shares_baseline_with`` names the other specs, and the track record
(:mod:`olmoablate.report.gate.track`) counts them as one group.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from olmoablate.contract.filenames import GATE_FILE, PLAN_FILE
from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.plan import Plan
from olmoablate.contract.runfiles import RunStatus
from olmoablate.contract.runstates import DONE_STATES, LIVE_STATES
from olmoablate.errors import UserError
from olmoablate.io import read_json
from olmoablate.report.gate import track
from olmoablate.store.index import spec_dirs

LIVE, FINAL = LIVE_STATES, DONE_STATES


@dataclasses.dataclass
class SpecRow:
    spec: str
    state: str
    runs: int
    runs_done: int
    reported: bool
    gpu_hours_planned: float
    gpu_hours_spent: float
    gpu_hours_saved_reuse: float
    gpu_hours_saved_futility: float
    reused_runs: list[str]
    shares_baseline_with: list[str]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ProposalRow:
    spec: str
    gate: str
    variant: str
    role: str
    stage: str
    promote_to: list[str]
    metric: str
    verdict: str
    gate_verdict: str
    effect: float | None
    lower: float | None
    upper: float | None
    n_seeds: int | None
    noise: str | None
    min_effect: float
    state: str
    shares_baseline_with: list[str]
    held_at: dict[str, bool]

    @property
    def proposal(self) -> str:
        return f"{self.spec}/{self.gate}/{self.variant}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Board:
    root: Path
    specs: list[SpecRow]
    proposals: list[ProposalRow]
    track: list[track.TrackRow]
    summary: dict[str, Any]
    problems: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "specs": [s.as_dict() for s in self.specs],
            "proposals": [p.as_dict() for p in self.proposals],
            "track_record": [t.as_dict() for t in self.track],
            "summary": self.summary,
            "problems": self.problems,
        }


def _spec_costs(rd: ResultsDir, plan: Plan, futility: float) -> tuple[SpecRow, str]:
    states: list[str | None] = []
    planned = spent = saved = 0.0
    reused: list[str] = []
    for run in plan.runs:
        rdir = rd.run(run.run_id)
        status = _status(rdir)
        state = status.state
        states.append(state)
        if rdir.reused_from is not None:
            saved += run.gpu_hours
            reused.append(run.run_id)
            continue
        planned += run.gpu_hours
        step = status.step
        done = 1.0 if state in FINAL else (min(1.0, step / run.steps) if step else 0.0)
        spent += run.gpu_hours * done
    n_done = sum(s in FINAL for s in states)
    if any(s in LIVE for s in states):
        state = "training"
    elif n_done == len(states):
        state = "trained"
    elif not any(states):
        state = "planned"
    else:
        state = "partial"
    row = SpecRow(
        rd.root.name, state, len(states), n_done, False, round(planned, 4), round(spent, 4),
        round(saved, 4), round(float(futility), 4), reused, [],
    )  # fmt: skip
    return row, state


class _Malformed(ValueError):
    """A gate.json whose shape this board cannot read (hand-edited, truncated, another tool's)."""


def _gate_doc(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(gate.json's object or None, the problem with it: None when it is absent or an object)."""
    if not path.exists():
        return None, None
    try:
        doc = read_json(path)
    except (OSError, ValueError) as err:
        return None, f"{path}: unreadable ({err}); its spec is shown as not reported"
    if not isinstance(doc, dict):
        return None, f"{path}: not a JSON object; its spec is shown as not reported"
    return doc, None


def _records(gate: dict[str, Any]) -> list[dict[str, Any]]:
    recs = gate["gates"] if "gates" in gate else [gate]
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise _Malformed("'gates' is not a list of gate records")
    for r in recs:
        vs = r.get("variants") or []
        if not isinstance(vs, list) or not all(
            isinstance(v, dict) and "variant" in v and "verdict" in v for v in vs
        ):
            raise _Malformed("'variants' is not a list of records with 'variant' and 'verdict'")
    return recs


def _estimate(v: dict[str, Any]) -> dict[str, Any]:
    for c in v.get("checks") or []:
        if c.get("estimate"):
            return dict(c["estimate"])
    return {}


def _size_estimates(record: dict[str, Any], variant: str) -> dict[str, dict[str, Any] | None]:
    rows = (record.get("consistency") or {}).get("rows") or []
    return {r["size"]: r.get("estimate") for r in rows if r.get("variant") == variant}


def _baseline_identities(plan: Plan) -> set[str]:
    if plan.identity is None:
        return set()
    return {plan.identity.runs[r.run_id] for r in plan.runs if r.is_baseline}


def _newer_than(rd: ResultsDir, plan: Plan, path: Path) -> list[str]:
    """The runs whose final status.json is newer than ``path`` (the spec's gate.json): they
    finished, or were redone, after the report that wrote it."""
    try:
        written = path.stat().st_mtime
    except OSError:
        return []
    out = []
    for run in plan.runs:
        rdir = rd.run(run.run_id)
        doc = _status(rdir)
        if doc.state in FINAL and _written(doc, rdir.status) > written:
            out.append(run.run_id)
    return out


def _status(rdir: Any) -> RunStatus:
    """A run's status.json (empty when absent or broken: the board never fails on one run)."""
    try:
        return rdir.read_status() or RunStatus()
    except UserError:
        return RunStatus()


def _written(status: RunStatus, path: Path) -> float:
    """When status.json was last written: its own ``updated`` time (kept by a copy of the store,
    which resets files' mtimes), else the file's mtime."""
    if status.updated is not None:
        return status.updated.timestamp()
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _reported(
    spec: str, state: str, blocks: dict[str, Any], records: list[dict[str, Any]]
) -> tuple[list[ProposalRow], list[track.TrackRow]]:
    """The proposal rows (and track-record rows) of one spec's gate records."""
    proposals: list[ProposalRow] = []
    rows: list[track.TrackRow] = []
    for rec in records:
        g = blocks.get(rec.get("name", ""))
        promote = list(g.promote_to) if g is not None else []
        min_effect = g.min_effect if g is not None else 0.0
        for v in rec.get("variants") or []:
            est = _estimate(v)
            sizes = _size_estimates(rec, v["variant"])
            p = ProposalRow(
                spec, str(rec.get("name")), v["variant"], str(v.get("role")),
                str(rec.get("stage")), promote, str(rec.get("metric")), str(v["verdict"]),
                str(rec.get("verdict")), est.get("mean"), est.get("lower"), est.get("upper"),
                est.get("n_seeds"), est.get("source") or (rec.get("noise_source") or {}).get("kind"),
                float(min_effect), state, [], {},
            )  # fmt: skip
            if p.role != "exploratory":
                mine = track.track_rows(
                    p.proposal, p.spec, p.variant, p.stage, p.verdict, p.effect, min_effect,
                    [(s, sizes.get(s)) for s in promote],
                )  # fmt: skip
                p.held_at = {t.size: t.held for t in mine}
                rows.extend(mine)
            proposals.append(p)
    return proposals, rows


def build_board(root: str | Path) -> Board:
    """The board of every spec (results folder with a plan.json) directly under ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root}: no such store (a folder holding results/<spec>/ folders)")
    if (root / PLAN_FILE).is_file():
        raise UserError(
            f"{root}: one spec's results folder, not a store; the store is the folder above it "
            f"(olmoablate board {root.parent})"
        )
    if not spec_dirs(root):
        raise UserError(
            f"{root}: no results folder (<spec>/{PLAN_FILE}) in this folder; give the store "
            "(the folder `plan --store` wrote into; default results)"
        )
    specs: list[SpecRow] = []
    proposals: list[ProposalRow] = []
    rows: list[track.TrackRow] = []
    problems: list[str] = []
    baselines: dict[str, set[str]] = {}
    for rd in spec_dirs(root):
        try:
            plan = Plan.load(rd.plan_path)
        except UserError as err:
            problems.append(str(err))
            continue
        gate_path = rd.root / GATE_FILE
        gate, bad = _gate_doc(gate_path)
        blocks = {e.name: e.gate for e in plan.gates}
        mine: tuple[list[ProposalRow], list[track.TrackRow]] = ([], [])
        try:
            records = _records(gate) if gate else []
            futility = sum(
                float((r.get("futility") or {}).get("gpu_hours_saved") or 0.0) for r in records
            )
            srow, state = _spec_costs(rd, plan, futility)
            mine = _reported(srow.spec, state, blocks, records)
        except (_Malformed, TypeError, ValueError, AttributeError, KeyError) as err:
            bad = f"{gate_path}: malformed ({err}); its spec is shown as not reported"
            records = []
            srow, state = _spec_costs(rd, plan, 0.0)
        if bad is not None:
            problems.append(bad)
        newer = _newer_than(rd, plan, gate_path) if records else []
        if newer:
            problems.append(
                f"{gate_path} is older than the results of {len(newer)} run(s) "
                f"({', '.join(newer[:3])}{', ...' if len(newer) > 3 else ''}): its verdict "
                f"predates them; re-run `olmoablate report {rd.root}`"
            )
        srow.reported = bool(records)
        specs.append(srow)
        baselines[srow.spec] = _baseline_identities(plan)
        if not records:
            for name, g in blocks.items():
                proposals.append(
                    ProposalRow(
                        srow.spec, name, g.variant or "(all)", "primary", g.stage,
                        list(g.promote_to), g.metric, "not reported", "not reported", None,
                        None, None, None, None, g.min_effect, state, [], {},
                    )
                )  # fmt: skip
            continue
        proposals.extend(mine[0])
        rows.extend(mine[1])
    share = {
        s: sorted(o for o in baselines if o != s and baselines[o] & baselines[s]) for s in baselines
    }
    for srow in specs:
        srow.shares_baseline_with = share.get(srow.spec, [])
    for p in proposals:
        p.shares_baseline_with = share.get(p.spec, [])
    groups = _groups(share)
    summary = track.summary(rows, {p.proposal: groups[p.spec] for p in proposals})
    return Board(root, specs, proposals, rows, summary, problems)


def _groups(share: dict[str, list[str]]) -> dict[str, int]:
    """spec -> id of its connected component under "shares a baseline run"."""
    out: dict[str, int] = {}
    for start in share:
        if start in out:
            continue
        gid, todo = len(set(out.values())), [start]
        while todo:
            s = todo.pop()
            if s in out:
                continue
            out[s] = gid
            todo.extend(share.get(s, []))
    return out
