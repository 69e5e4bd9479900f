"""Several gates in one plan: one pre-registered verdict per proposal.

Why views: every piece of the gate (pre-registration check, noise source, MDE lines, the
report's statistics) reads one gate from ``plan["gate"]``/``plan["gate_sha256"]``. A spec with
``gates:`` records each block with its own sha256 in ``plan["gates"]`` (and the first one in
``plan["gate"]``, the place of the ``gate:`` shorthand); a *view* is the plan with one of them in
that place, so each gate is checked and decided by the very same code, independently. Pure
Python: `validate`/`plan` import this on a login node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def gate_entries(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"name", "gate", "gate_sha256", "gate_raw_sha256"}]``: every gate of the plan (a plan
    written before ``gates`` existed, or from a ``gate:`` spec, has one)."""
    gates = plan.get("gates")
    if isinstance(gates, list) and gates:
        return [dict(g) for g in gates if isinstance(g, dict)]
    g = plan.get("gate")
    if not g:
        return []
    return [
        {
            "name": (g.get("variant") if isinstance(g, dict) else None) or "gate",
            "gate": g,
            "gate_sha256": plan.get("gate_sha256"),
            "gate_raw_sha256": plan.get("gate_raw_sha256"),
        }
    ]


def gate_views(plan: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(gate name, the plan with that gate in ``gate``/``gate_sha256``) for every gate."""
    out = []
    for e in gate_entries(plan):
        view = dict(plan)
        view.update(
            gate=e.get("gate"),
            gate_sha256=e.get("gate_sha256"),
            gate_raw_sha256=e.get("gate_raw_sha256"),
        )
        if isinstance(plan.get("gates"), list) and plan["gates"]:
            view["gate_name"] = e.get("name")  # its block in the spec: gates.<name>
        out.append((str(e.get("name")), view))
    return out
