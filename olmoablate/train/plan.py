"""Reading one run out of ``plan.json`` and checking it before any compute is spent.

Why a separate module: the job must be startable from the results folder alone (on a login node,
inside submitit, under torchrun), so everything it needs comes from the run entry. Loading it is
cheap and torch-free, and every problem with it becomes a one-line :class:`UserError` that names
the file and field instead of an OLMo-core traceback ten minutes into a Slurm job.

The certificate check is the guard on the pair contract: a baseline and its variant must share
every setting except the architecture. The plan stores ``certificate`` = hash of those shared
settings; if someone edits one arm's entry by hand (another LR, another data seed) the hash no
longer matches and the job refuses to train it.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmoablate.contract.certificate import certificate_of
from olmoablate.errors import UserError
from olmoablate.io import read_json

OPTIMIZERS = ("adamw", "skip_step_adamw")
SCHEDULES = ("cosine", "linear", "constant", "wsd")
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class RunContext:
    """One run of a plan, with every path resolved to an absolute path."""

    plan_path: Path
    plan: dict[str, Any]
    run: dict[str, Any]
    workdir: Path
    run_dir: Path

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])

    @property
    def spec_name(self) -> str:
        return str(self.plan.get("spec_name", "spec"))

    @property
    def training(self) -> dict[str, Any]:
        return self.run["training"]

    @property
    def evaluation(self) -> dict[str, Any]:
        return self.run.get("evaluation") or {}

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def resolve(self, path: str) -> str:
        """A plan path (as written in the spec) -> absolute, relative to the plan's workdir.

        Remote URLs (s3://, gs://, http(s)://, weka://) pass through for OLMo-core's io layer.
        """
        expanded = os.path.expandvars(path)
        if "$" in expanded:
            missing = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
            raise UserError(
                f"{self.plan_path}: path {path!r} uses environment variable(s) "
                f"{', '.join(missing)} that are not set in the job's environment"
            )
        if "://" in expanded:
            return expanded
        p = Path(expanded).expanduser()
        return str(p if p.is_absolute() else (self.workdir / p))


def _require(obj: dict[str, Any], key: str, where: str, plan_path: Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise UserError(f"{plan_path}: run entry is missing field '{where}.{key}'")
    return obj[key]


def _check_choice(value: Any, allowed: tuple[str, ...], field: str, plan_path: Path) -> None:
    if value not in allowed:
        raise UserError(
            f"{plan_path}: {field} = {value!r} is not supported; allowed: {', '.join(allowed)}"
        )


def _check_positive_int(value: Any, field: str, plan_path: Path, *, zero_ok: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero_ok else 1):
        bound = ">= 0" if zero_ok else ">= 1"
        raise UserError(f"{plan_path}: {field} = {value!r} must be an integer {bound}")
    return value


def validate_run(run: dict[str, Any], plan_path: Path) -> None:
    """Check the fields the job reads, so bad entries fail in one line before torch loads."""
    rid = run.get("run_id", "?")
    where = f"runs[{rid}]"
    for key in ("size_dims", "training", "certificate", "arm", "group_id"):
        _require(run, key, where, plan_path)
    tr = run["training"]
    seq = _check_positive_int(
        _require(tr, "sequence_length", f"{where}.training", plan_path),
        f"{where}.training.sequence_length",
        plan_path,
    )
    gbs = _check_positive_int(
        _require(tr, "global_batch_size", f"{where}.training", plan_path),
        f"{where}.training.global_batch_size",
        plan_path,
    )
    if gbs % seq:
        raise UserError(
            f"{plan_path}: {where}.training.global_batch_size = {gbs} (tokens) must be a "
            f"multiple of sequence_length = {seq}"
        )
    mbs = tr.get("microbatch_size") or gbs
    _check_positive_int(mbs, f"{where}.training.microbatch_size", plan_path)
    if mbs % seq:
        raise UserError(
            f"{plan_path}: {where}.training.microbatch_size = {mbs} (tokens) must be a "
            f"multiple of sequence_length = {seq}"
        )
    _check_positive_int(
        _require(tr, "steps", f"{where}.training", plan_path), f"{where}.training.steps", plan_path
    )
    opt = _require(tr, "optimizer", f"{where}.training", plan_path)
    _check_choice(opt.get("name"), OPTIMIZERS, f"{where}.training.optimizer.name", plan_path)
    lr = opt.get("lr")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr < 0:
        raise UserError(
            f"{plan_path}: {where}.training.optimizer.lr = {lr!r} must be a number >= 0"
        )
    sched = _require(tr, "schedule", f"{where}.training", plan_path)
    _check_choice(sched.get("name"), SCHEDULES, f"{where}.training.schedule.name", plan_path)
    _check_choice(tr.get("precision", "auto"), PRECISIONS, f"{where}.training.precision", plan_path)
    data = _require(tr, "data", f"{where}.training", plan_path)
    if not data.get("paths") and not data.get("mix"):
        raise UserError(f"{plan_path}: {where}.training.data needs 'paths' or 'mix'")
    for key in ("vocab_size", "eos_token_id", "pad_token_id"):
        _check_positive_int(
            _require(data, key, f"{where}.training.data", plan_path),
            f"{where}.training.data.{key}",
            plan_path,
            zero_ok=key != "vocab_size",
        )
    vocab = int(run["size_dims"].get("vocab_size") or data["vocab_size"])
    for key in ("eos_token_id", "pad_token_id"):
        if data[key] >= vocab:
            raise UserError(
                f"{plan_path}: {where}.training.data.{key} = {data[key]} is outside the model "
                f"vocabulary (size_dims.vocab_size = {vocab})"
            )
    ev = run.get("evaluation") or {}
    if ev.get("lm_sets"):
        if not isinstance(ev["lm_sets"], dict):
            raise UserError(
                f"{plan_path}: {where}.evaluation.lm_sets must map a set name to a list of paths"
            )
        _check_positive_int(ev.get("interval"), f"{where}.evaluation.interval", plan_path)


def load_run(plan_path: str | Path, run_id: str) -> RunContext:
    """Load ``plan_path`` and return the context of ``run_id`` after validating it.

    Raises :class:`UserError` for a missing plan, unknown run id, malformed entry or a
    certificate that does not match the run's shared settings.
    """
    path = Path(plan_path).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"{path}: plan file not found (run `olmoablate plan SPEC` first)")
    try:
        plan = read_json(path)
    except ValueError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    runs = plan.get("runs") if isinstance(plan, dict) else None
    if not isinstance(runs, list):
        raise UserError(f"{path}: field 'runs' is missing or not a list")
    by_id = {r.get("run_id"): r for r in runs if isinstance(r, dict)}
    if run_id not in by_id:
        known = ", ".join(sorted(str(k) for k in by_id)) or "none"
        raise UserError(f"{path}: no run '{run_id}' in field 'runs'; known: {known}")
    run = copy.deepcopy(by_id[run_id])
    validate_run(run, path)

    match = run.get("budget_match") or (plan.get("budget") or {}).get("match") or "tokens"
    expected = certificate_of(run, str(match))
    if run["certificate"] != expected:
        raise UserError(
            f"{path}: runs[{run_id}].certificate does not match the hash of its shared settings "
            f"(entry edited after `plan`?); re-run `olmoablate plan`"
        )
    for pair in plan.get("pairs") or []:
        if run_id in (pair.get("baseline_run"), pair.get("variant_run")):
            if pair.get("certificate") not in (None, run["certificate"]):
                raise UserError(
                    f"{path}: pairs[{pair.get('pair_id')}].certificate differs from "
                    f"runs[{run_id}].certificate; the arms would not be matched"
                )

    workdir = Path(plan.get("workdir") or Path.cwd()).expanduser().resolve()
    run_dir = path.parent / "runs" / run_id
    return RunContext(plan_path=path, plan=plan, run=run, workdir=workdir, run_dir=run_dir)
