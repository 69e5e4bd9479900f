"""What `submit` checks before it launches anything: the plan's budget and its overrides.

Why before submitit is even imported: a plan over ``budget.max_gpu_hours`` must never reach the
cluster (the refusal names the total and the limit), and ``submit --set`` must launch exactly
the plan that `plan --set` made with those overrides, not a plan of the plain file.
"""

from __future__ import annotations

from pathlib import Path

from olmoablate.contract.layout import ResultsDir, resolve_results
from olmoablate.contract.overrides import spec_sha256
from olmoablate.contract.totals import over_budget
from olmoablate.errors import UserError


def results_for(spec: str, results_root: Path, overrides: list[str]) -> ResultsDir:
    """SPEC's results folder; a ``--set name=...`` override picks the folder of that name."""
    for text in overrides:
        key, eq, value = text.partition("=")
        if eq and key.strip() == "name" and value.strip():
            return ResultsDir.for_spec(value.strip(), results_root)
    return resolve_results(spec, results_root)


def check_overrides(spec: str, results: ResultsDir, overrides: list[str]) -> None:
    """With ``--set``: SPEC must be the spec file, and the plan must be the one made from it with
    exactly these overrides (same spec_sha256)."""
    if not overrides:
        return
    path = Path(spec)
    if not (path.is_file() and path.suffix in (".yaml", ".yml")):
        raise UserError(f"--set needs SPEC to be the spec file (got {spec!r})")
    plan = results.plan
    if plan.spec_sha256 != spec_sha256(path.read_bytes(), overrides):
        made = ", ".join(plan.overrides) or "no overrides"
        sets = " ".join(f"--set {o}" for o in overrides)
        raise UserError(
            f"{results.plan_path}: this plan was made from another spec text or other overrides "
            f"({made}), not {spec} with {', '.join(overrides)}; run `olmoablate plan {spec} "
            f"{sets}` first"
        )


def check_budget(results: ResultsDir, only: list[str] | None) -> None:
    """Refuse when the plan exceeds budget.max_gpu_hours (the whole spec, or a size submitted)."""
    plan = results.plan
    sizes = None if only is None else {plan.run(r).size for r in only}
    over = over_budget(plan, sizes)
    if over:
        raise UserError(
            f"{results.plan_path}: {'; '.join(over)}; nothing submitted (raise the budget in the "
            "spec and re-plan, or plan fewer runs)"
        )
