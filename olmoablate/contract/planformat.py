"""Reading plan.json documents written by earlier versions, and naming what is wrong in one.

Why apart from the models: the models describe the current format (``PLAN_SCHEMA``); this module
is the reader's tolerance for older files — a plan from before several gates and A/A runs existed,
or one of format 1 that held its (first) gate twice, still loads — and the part of an error
message that names the run (by id, not by its index in ``runs``), so a user on a cluster knows
which entry to look at. An upgraded plan is the current format in memory (and when written).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from olmoablate.contract.filenames import PLAN_FILE
from olmoablate.errors import UserError

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

    Format 1 held the first gate twice: ``gate`` (with its two hashes) at the top level and
    ``gates[0]``. The copy goes (``gates`` is the one source); two copies that differ are an
    error naming the file and the field, since only one of them could be the pre-registered gate.
    A plan from before several gates and A/A runs existed had its one gate only in ``gate``; it
    becomes the only entry of ``gates`` (named after its variant), exactly what `plan` records
    for a ``gate:`` spec today.
    """
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
