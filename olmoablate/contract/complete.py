"""Shell completion of SPEC arguments and run ids (``olmoablate --install-completion``).

Why cheap: the shell runs the program on every TAB, so these read directory listings and one
plan.json as plain JSON, never the contract models (no pydantic import on a keystroke).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from olmoablate.contract.filenames import PLAN_FILE
from olmoablate.contract.roots import RESULTS_ROOT, RESULTS_ROOT_ENV

_SUFFIXES = (".yaml", ".yml")


def _root(ctx: Any) -> Path:
    given = (getattr(ctx, "params", None) or {}).get("results_root")
    return Path(given or os.environ.get(RESULTS_ROOT_ENV) or RESULTS_ROOT)


def spec_candidates(incomplete: str, root: Path) -> list[str]:
    """Spec files and folders under what was typed, and spec names with a plan under ``root``."""
    out: list[str] = []
    head, _, tail = incomplete.rpartition("/")
    folder = Path(head or ".")
    try:
        for entry in sorted(folder.iterdir()):
            if not entry.name.startswith(tail) or entry.name.startswith("."):
                continue
            shown = f"{head}/{entry.name}" if head else entry.name
            if entry.is_dir():
                out.append(shown + "/")
            elif entry.suffix in _SUFFIXES:
                out.append(shown)
    except OSError:
        pass
    if "/" not in incomplete:
        try:
            out.extend(
                sorted(
                    d.name
                    for d in root.iterdir()
                    if d.name.startswith(incomplete) and (d / PLAN_FILE).is_file()
                )
            )
        except OSError:
            pass
    return out


def run_id_candidates(spec: str | None, incomplete: str, root: Path) -> list[str]:
    """Run ids of SPEC's plan.json (a results folder, plan.json or spec name) that start so."""
    if not spec:
        return []
    p = Path(spec)
    plan = p if p.name == PLAN_FILE else p / PLAN_FILE if p.is_dir() else root / spec / PLAN_FILE
    if p.is_file() and p.suffix in _SUFFIXES:
        plan = root / p.stem / PLAN_FILE  # the usual case: the spec's name is its file's stem
    try:
        runs = json.loads(plan.read_text(encoding="utf-8")).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r["run_id"] for r in runs if str(r.get("run_id", "")).startswith(incomplete)]


def complete_spec(ctx: Any, param: Any, incomplete: str) -> list[str]:
    return spec_candidates(incomplete, _root(ctx))


def complete_run_ids(ctx: Any, param: Any, incomplete: str) -> list[str]:
    # While completing, click may leave SPEC unparsed in ctx.args (resilient parsing).
    spec = (ctx.params or {}).get("spec") or next(iter(getattr(ctx, "args", None) or []), None)
    return run_id_candidates(spec, incomplete, _root(ctx))
