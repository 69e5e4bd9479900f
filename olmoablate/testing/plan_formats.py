"""plan.json as earlier releases wrote it, built from a current plan (for the upgrade tests)."""

from __future__ import annotations

import copy
from typing import Any


def as_format_1(doc: dict[str, Any]) -> dict[str, Any]:
    """A current (format 2) plan document as format 1 held it: the first gate also at the top
    level (``gate``/``gate_sha256``/``gate_raw_sha256``, between ``budget`` and ``eval_sets``)."""
    first = doc["gates"][0] if doc["gates"] else {}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = copy.deepcopy(value)
        if key == "budget":
            out["gate"] = copy.deepcopy(first.get("gate"))
            out["gate_sha256"] = first.get("gate_sha256")
            out["gate_raw_sha256"] = first.get("gate_raw_sha256")
    out["schema"] = 1
    return out
