"""Reading plan.json documents written by earlier versions, and naming what is wrong in one.

Why apart from the models: the models describe the current format (``PLAN_SCHEMA``); this module
is the reader's tolerance for older files of the same format number — a plan from before several
gates and A/A runs existed still loads — and the part of an error message that names the run
(by id, not by its index in ``runs``), so a user on a cluster knows which entry to look at.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


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


def upgrade(doc: dict[str, Any]) -> dict[str, Any]:
    """Fill the keys a format-1 plan from before several gates and A/A runs existed lacks.

    Such a plan had one gate in ``gate``; it becomes the only entry of ``gates`` (named after
    its variant), exactly what `plan` records for a ``gate:`` spec today.
    """
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
