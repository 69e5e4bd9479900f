"""Where each run lives outside the results folder: its W&B run (``runs/<id>/wandb.json``).

Why a file written by the job and not a W&B API call: the report must work on a laptop from a
copied results folder, offline; the training job records the id, project and (when online) the
URL once, and `report` and `olmoablate.results` only read it.
"""

from __future__ import annotations

import json
from typing import Any

from olmoablate.report.read.collect import Results


def wandb_links(results: Results) -> dict[str, dict[str, Any]]:
    """run_id -> the W&B record of that run, for runs that logged to W&B."""
    out: dict[str, dict[str, Any]] = {}
    for rid, run in results.runs.items():
        path = run.dir.wandb
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            out[rid] = rec
    return out


def wandb_section(
    results: Results,
) -> tuple[str, str, list[tuple[list[str], list[list[Any]]]]] | None:
    """The report's "W&B runs" section (None when no run logged to W&B)."""
    links = wandb_links(results)
    if not links:
        return None
    rows = []
    for rid, rec in links.items():
        where = rec.get("url") or (
            f"offline: wandb sync {results.runs[rid].directory / 'wandb' / 'wandb'}/offline-run-*"
        )
        rows.append([rid, rec.get("job_type"), rec.get("group"), rec.get("id"), where])
    text = (
        "One W&B run per arm (the same run across requeues); every metric is charted against "
        "tokens, and train FLOPs is logged for a compute axis."
    )
    return ("W&B runs", text, [(["run", "arm", "group", "W&B id", "link"], rows)])
