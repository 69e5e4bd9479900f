"""Find `results/<spec>/` and its plan.json from whatever the user typed as SPEC.

Why a separate module: submit, status and cancel all accept the same SPEC argument (a spec file,
a spec name or a results directory), and they must agree on where the ledger lives. Nothing here
imports torch, so `status` stays fast on a login node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import read_json

RESULTS_ROOT = Path("results")
PLAN_FILE = "plan.json"


def resolve_results_dir(spec: str, results_root: Path = RESULTS_ROOT) -> Path:
    """Return the results directory for SPEC (file path, spec name, or results dir).

    The YAML is only read for its `name:`; the lead's `plan` already validated it.
    """
    import yaml

    path = Path(spec)
    if path.is_dir():
        if (path / PLAN_FILE).is_file():
            return path
        raise UserError(
            f"{path}: no {PLAN_FILE} in this directory; run `olmoablate plan SPEC` first"
        )
    if path.is_file():
        if path.name == PLAN_FILE:
            return path.parent
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(f"{path}: cannot read the spec ({first})") from None
        name = doc.get("name") if isinstance(doc, dict) else None
        if not isinstance(name, str) or not name:
            raise UserError(f"{path}: field `name` is missing or not a string")
        return results_root / name
    if "/" in spec or spec.endswith((".yaml", ".yml")):
        raise UserError(f"{spec}: no such spec file or results directory")
    return results_root / spec


def load_plan(results_dir: Path) -> dict[str, Any]:
    """Read plan.json, with a one-line error that tells the user what to run when it is missing."""
    plan_path = results_dir / PLAN_FILE
    if not plan_path.is_file():
        raise UserError(f"{plan_path} not found: run `olmoablate plan SPEC` first")
    try:
        plan = read_json(plan_path)
    except (OSError, ValueError) as err:
        raise UserError(f"{plan_path}: unreadable plan ({err})") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("runs"), list):
        raise UserError(f"{plan_path}: field `runs` is missing; rerun `olmoablate plan SPEC`")
    for i, run in enumerate(plan["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("run_id"), str):
            raise UserError(
                f"{plan_path}: runs[{i}].run_id is missing; rerun `olmoablate plan SPEC`"
            )
    return plan


def runs_by_id(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Plan runs keyed by run id, in plan order."""
    return {run["run_id"]: run for run in plan["runs"]}


def check_run_ids(plan: dict[str, Any], run_ids: list[str] | None, option: str) -> list[str]:
    """Validate user-named run ids against the plan (one-line error listing the allowed ids)."""
    known = runs_by_id(plan)
    for rid in run_ids or []:
        if rid not in known:
            allowed = ", ".join(known) or "(none)"
            raise UserError(f"{option} {rid}: not a run of this plan (allowed: {allowed})")
    return list(run_ids or [])


def run_dir(results_dir: Path, run_id: str) -> Path:
    return results_dir / "runs" / run_id


def read_status(results_dir: Path, run_id: str) -> dict[str, Any] | None:
    """The run's own status.json, or None when the job never wrote one (or it is unreadable)."""
    path = run_dir(results_dir, run_id) / "status.json"
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
