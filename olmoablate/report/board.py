"""`olmoablate board`: every proposal (spec) of a store in one table, and the gate's track record.

From the files only (each spec's plan.json, its runs' status.json and the gate.json its last
report wrote, never rebuilding a report): fast on a laptop with a copy of the store, and exactly
the verdicts the reports published. ``spent``: planned GPU-hours of the runs a spec trains itself
times their share of steps done; ``saved_reuse``: those of the runs it reuses; ``saved_futility``:
gate.json's optional ``futility.gpu_hours_saved``. Proposals sharing a baseline run are named in
``shares_baseline_with`` and count as one group in the track record.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from olmoablate.errors import UserError
from olmoablate.io import file_in_the_way, make_console, print_whole, read_json, write_text_atomic
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import DONE_STATES, GATE_FILE, LIVE_STATES, PLAN_FILE
from olmoablate.plan.planfile import Plan
from olmoablate.plan.store import default_store, spec_dirs
from olmoablate.report import track
from olmoablate.run.files import RunStatus


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
    #: a multiplier gate: the largest target's projection in the gate's unit (``unit``, ``size``,
    #: ``estimate``, ``lower``, ``upper``), or why it was refused (``refused``); None otherwise
    multiplier: dict[str, Any] | None = None
    #: a complementary gate: its factorial word (complementary, redundant, interfering,
    #: inconclusive) beside the verdict it maps to
    factorial: str | None = None

    @property
    def verdict_text(self) -> str:
        return f"{self.verdict} ({self.factorial})" if self.factorial else self.verdict

    @property
    def proposal(self) -> str:
        return f"{self.spec}/{self.gate}/{self.variant}"


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
            "specs": [dataclasses.asdict(s) for s in self.specs],
            "proposals": [dataclasses.asdict(p) for p in self.proposals],
            "track_record": [dataclasses.asdict(t) for t in self.track],
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
        done = 1.0 if state in DONE_STATES else (min(1.0, step / run.steps) if step else 0.0)
        spent += run.gpu_hours * done
    n_done = sum(s in DONE_STATES for s in states)
    if any(s in LIVE_STATES for s in states):
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
        if doc.state in DONE_STATES and _written(doc, rdir.status) > written:
            out.append(run.run_id)
    return out


def _status(rdir: Any) -> RunStatus:
    """A run's status.json (empty when absent or broken: the board never fails on one run)."""
    try:
        return RunStatus.load(rdir.status) or RunStatus()
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
            fac = rec.get("factorial")
            if isinstance(fac, dict) and isinstance(fac.get("verdict"), str):
                p.factorial = fac["verdict"]
            lad = (rec.get("ladder") or {}).get(v["variant"])
            if (m := track.ladder_projection(lad)) is not None:  # a ladder's seeds and noise
                p.multiplier, p.n_seeds, p.noise = m, m["seeds"], m["noise"]
            if p.role != "exploratory" and lad:
                mine = track.ladder_rows(p.proposal, p.spec, p.variant, p.stage, p.verdict, lad)
                p.held_at = {t.size: t.held for t in mine}
                rows.extend(mine)
            elif p.role != "exploratory":
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


FORMATS = ("table", "md", "html", "json")
COLUMNS = (
    "spec", "gate", "variant", "verdict", "effect [bounds]", "multiplier", "seeds", "noise",
    "held at", "state", "GPU-h spent", "saved (reuse)", "saved (futility)",
    "shares baseline with",
)  # fmt: skip


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4g}"


def _bounds(p: ProposalRow) -> str:
    if p.effect is None:
        return "-"
    return f"{_num(p.effect)} [{_num(p.lower)}, {_num(p.upper)}]"


def _costs(s: SpecRow) -> list[str]:
    return [
        f"{s.state} ({s.runs_done}/{s.runs} runs)",
        f"{s.gpu_hours_spent:.4g}",
        f"{s.gpu_hours_saved_reuse:.4g} ({len(s.reused_runs)} run(s))",
        f"{s.gpu_hours_saved_futility:.4g}",
    ]


def rows(board: Board) -> list[list[str]]:
    """The table's cells, spec by spec: one row per gated variant, a spec's costs on its first
    row only (a spec's GPU-hours are counted once however many gates it has); a spec without a
    gate gets one row of its own (its state and costs; nothing to decide)."""
    out: list[list[str]] = []
    for s in board.specs:
        mine = [p for p in board.proposals if p.spec == s.spec]
        if not mine:
            out.append(
                [s.spec, "(no gate)", "-", "-", "-", "-", "-", "-", "-", *_costs(s),
                 ", ".join(s.shares_baseline_with) or "-"]
            )  # fmt: skip
        for i, p in enumerate(mine):
            held = ", ".join(f"{k}: {'held' if v else 'NOT held'}" for k, v in p.held_at.items())
            out.append(
                [
                    p.spec, p.gate, p.variant + ("" if p.role == "primary" else f" ({p.role})"),
                    p.verdict_text, _bounds(p), track.multiplier_text(p.multiplier, p.verdict),
                    str(p.n_seeds or "-"), p.noise or "-", held or "-",
                    *(_costs(s) if i == 0 else ["", "", "", ""]),
                    ", ".join(p.shares_baseline_with) or "-",
                ]
            )  # fmt: skip
    return out


def summary_lines(board: Board) -> list[str]:
    s = board.summary
    lines = []
    if s["proposals"]:
        iv = s["interval_95"]
        lines.append(
            f"track record: decision accuracy {s['decision_accuracy']:.0%} "
            f"({s['held']} of {s['proposals']} decided proposals held at their promoted sizes; "
            f"{s['independent_groups']} independent group(s), by group "
            f"{s['decision_accuracy_by_group']:.0%}, 95% interval "
            f"[{iv[0]:.0%}, {iv[1]:.0%}] over the groups)"
        )
    else:
        lines.append("track record: no decided proposal has results at a promoted size yet")
    shared = sorted({p.spec for p in board.proposals if p.shares_baseline_with})
    if shared:
        lines.append(
            "not independent: " + ", ".join(shared) + " share baseline runs (one noisy baseline "
            "moves all of their verdicts); the track record counts them as one group"
        )
    lines.extend(f"problem: {p}" for p in board.problems)
    return lines


def to_markdown(board: Board) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join(
        "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |\n" for r in rows(board)
    )
    tail = "".join(f"\n- {line}" for line in summary_lines(board))
    return f"# Board: {board.root}\n\n{head}{body}{tail}\n"


def to_html(board: Board) -> str:
    e = html.escape
    th = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    trs = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows(board))
    lis = "".join(f"<li>{e(x)}</li>" for x in summary_lines(board))
    return (
        f"<!doctype html><meta charset='utf-8'><title>board {e(str(board.root))}</title>"
        "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px}"
        f"</style><h1>Board: {e(str(board.root))}</h1><table><tr>{th}</tr>{trs}</table>"
        f"<ul>{lis}</ul>\n"
    )


def print_table(board: Board) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    table = Table(title=f"board: {board.root}")
    for c in COLUMNS:
        table.add_column(escape(c))
    for r in rows(board):
        table.add_row(*(escape(c) for c in r))  # "[lower, upper]" is not markup
    print_whole(console, table)
    for line in summary_lines(board):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def board_command(
    root: Annotated[
        Path | None,
        typer.Argument(
            metavar="ROOT", help="The store (default: $OLMOABLATE_RESULTS_ROOT or results)."
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="Comma-separated: table, md, html, json (default table)."),
    ] = "table",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write board.md / board.html / board.json here."),
    ] = None,
) -> None:
    """One table of every spec under the store: verdicts, effects, noise, costs, track record.

    ROOT is the store (the folder holding results/<spec>/ folders), not one spec's folder."""
    formats = [f.strip().lower() for f in fmt.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(f"--format {fmt!r}: allowed values are {', '.join(FORMATS)}")
    blocker = file_in_the_way(out) if out is not None else None
    if blocker is not None:
        what = "is a file" if blocker == out else f"is under a file ({blocker})"
        raise UserError(f"--out {out}: {what}; give a folder (created if missing)")

    board = build_board(root if root is not None else Path(default_store()))
    text: dict[str, Any] = {
        "md": to_markdown,
        "html": to_html,
        "json": lambda b: json.dumps(b.as_json(), indent=2) + "\n",
    }
    for f in formats:
        if f == "table":
            print_table(board)
        elif out is not None:
            path = out / f"board.{f}"
            write_text_atomic(path, text[f](board))
            typer.echo(f"wrote {path}")
        else:
            typer.echo(text[f](board), nl=False)
