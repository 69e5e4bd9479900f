"""`olmoablate board [ROOT]`: the board (:mod:`olmoablate.report.board`) as a terminal table,
markdown, HTML or JSON. Login-node light: rich only, no pandas or matplotlib."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from olmoablate.errors import UserError
from olmoablate.io import file_in_the_way

if TYPE_CHECKING:  # the board reads plans (pydantic models): loaded when the command runs
    from olmoablate.report.board import Board, ProposalRow, SpecRow

FORMATS = ("table", "md", "html", "json")
COLUMNS = (
    "spec", "gate", "variant", "verdict", "effect [bounds]", "seeds", "noise", "held at",
    "state", "GPU-h spent", "saved (reuse)", "saved (futility)", "shares baseline with",
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
                [s.spec, "(no gate)", "-", "-", "-", "-", "-", "-", *_costs(s),
                 ", ".join(s.shares_baseline_with) or "-"]
            )  # fmt: skip
        for i, p in enumerate(mine):
            held = ", ".join(f"{k}: {'held' if v else 'NOT held'}" for k, v in p.held_at.items())
            out.append(
                [
                    p.spec, p.gate, p.variant + ("" if p.role == "primary" else f" ({p.role})"),
                    p.verdict, _bounds(p), str(p.n_seeds or "-"), p.noise or "-", held or "-",
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

    from olmoablate.console import make_console, print_whole

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
    from olmoablate.store import default_store

    formats = [f.strip().lower() for f in fmt.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(f"--format {fmt!r}: allowed values are {', '.join(FORMATS)}")
    blocker = file_in_the_way(out) if out is not None else None
    if blocker is not None:
        what = "is a file" if blocker == out else f"is under a file ({blocker})"
        raise UserError(f"--out {out}: {what}; give a folder (created if missing)")
    from olmoablate.report.board import build_board

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
            from olmoablate.io import write_text_atomic

            path = out / f"board.{f}"
            write_text_atomic(path, text[f](board))
            typer.echo(f"wrote {path}")
        else:
            typer.echo(text[f](board), nl=False)
