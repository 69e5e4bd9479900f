"""What a plan costs in total — per size, per stage, per spec — and the spec's GPU-hour budget.

Why in the contract: `plan` prints the totals, `validate` warns (``--strict``: fails) when the
budget is exceeded and `submit` refuses to launch over it; the same sums and the same rule must
serve all three stages. A *stage* is where a size stands in the gates' ladder: a gate's stage
size runs now, the sizes it promotes to run only after a ``proceed`` (so "gate stage" is what a
decision costs and "behind the gate" what the scale-up would). A/A baselines count like any run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from olmoablate.contract.plan import Plan, RunEntry

GATE_STAGE = "gate stage"
BEHIND_GATE = "behind the gate"
UNGATED = "ungated"


@dataclass
class Total:
    runs: int = 0
    gpu_hours: float = 0.0
    tokens: int = 0
    #: Runs another spec of the store trains (same identity): counted, priced at 0 GPU-hours.
    reused: int = 0

    def add(self, run: RunEntry, reused: bool = False) -> None:
        self.runs += 1
        self.reused += int(reused)
        self.gpu_hours += 0.0 if reused else run.gpu_hours
        self.tokens += run.tokens

    def as_json(self) -> dict[str, float | int]:
        return {
            "runs": self.runs,
            "reused": self.reused,
            "gpu_hours": round(self.gpu_hours, 3),
            "tokens": self.tokens,
        }


@dataclass
class Totals:
    by_size: dict[str, Total] = field(default_factory=dict)
    by_stage: dict[str, Total] = field(default_factory=dict)
    stage_of: dict[str, str] = field(default_factory=dict)
    total: Total = field(default_factory=Total)

    def as_json(self) -> dict[str, object]:
        return {
            "by_size": {k: {"stage": self.stage_of[k], **v.as_json()} for k, v in self.by_size.items()},
            "by_stage": {k: v.as_json() for k, v in self.by_stage.items()},
            "total": self.total.as_json(),
        }


def stage_of(plan: Plan) -> dict[str, str]:
    """Each planned size's stage (see module docstring); a gate stage wins over behind-a-gate."""
    stages = {e.gate.stage for e in plan.gates}
    behind = {s for e in plan.gates for s in e.gate.promote_to}
    return {
        s: GATE_STAGE if s in stages else BEHIND_GATE if s in behind else UNGATED
        for s in plan.sizes
    }


def totals(plan: Plan, runs: Iterable[RunEntry] | None = None) -> Totals:
    """Runs, GPU-hours and tokens per size, stage and spec; a run the plan reuses from another
    spec of the store (``plan.identity.reused``) costs this spec nothing."""
    out = Totals(stage_of=stage_of(plan))
    reused = plan.identity.reused if plan.identity is not None else {}
    for s in plan.sizes:
        out.by_size[s] = Total()
    for run in plan.runs if runs is None else runs:
        shared = run.run_id in reused
        out.by_size.setdefault(run.size, Total()).add(run, shared)
        out.by_stage.setdefault(out.stage_of.get(run.size, UNGATED), Total()).add(run, shared)
        out.total.add(run, shared)
    return out


def budget_limits(plan: Plan) -> dict[str, float]:
    """{"total" or a size: max GPU-hours} from ``budget.max_gpu_hours``."""
    cap = plan.budget.max_gpu_hours
    if cap is None:
        return {}
    return {"total": float(cap)} if not isinstance(cap, dict) else {k: float(v) for k, v in cap.items()}


def over_budget(plan: Plan, sizes: set[str] | None = None) -> list[str]:
    """One line per exceeded limit, naming the total and the limit (empty when within).

    ``sizes``: only the per-size limits of these sizes (what `submit --size` launches); the
    whole-spec limit always counts every planned run."""
    t = totals(plan)
    out = []
    for key, limit in budget_limits(plan).items():
        if sizes is not None and key != "total" and key not in sizes:
            continue
        got = t.total if key == "total" else t.by_size.get(key, Total())
        if got.gpu_hours > limit:
            what = "the whole spec" if key == "total" else f"size {key} ({t.stage_of.get(key, '?')})"
            out.append(
                f"budget exceeded: {what} needs {got.gpu_hours:,.1f} GPU-hours "
                f"({got.runs} runs) > budget.max_gpu_hours{'' if key == 'total' else '.' + key} "
                f"= {limit:,.1f}"
            )
    return out
