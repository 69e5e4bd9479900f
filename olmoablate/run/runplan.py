"""One run of a plan, loaded (:meth:`~olmoablate.plan.planfile.Plan.load`) and checked before
any compute is spent: the job must be startable from the results folder alone (inside submitit,
under torchrun), so everything it needs comes from the run entry. On top of the typed load: the
checks across fields of one entry, the certificate check and the run's paths.

The certificate is the guard on the pair contract: ``certificate`` is the hash of the settings a
baseline and its variant share; an arm's entry edited by hand (another LR, another data seed) no
longer matches it and the job refuses to train it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from olmoablate.errors import UserError
from olmoablate.plan.identity import installed_versions, version_mismatch
from olmoablate.plan.layout import ResultsDir, RunDir
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.plan.resolved import RunTraining
from olmoablate.plan.schema import Evaluation


@dataclass(frozen=True)
class RunContext:
    """One run of a plan, with the folder it writes and the plan's working directory."""

    plan: Plan
    run: RunEntry
    workdir: Path
    run_dir: RunDir

    @property
    def plan_path(self) -> Path:
        assert self.plan.path is not None  # always loaded from a file
        return self.plan.path

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def spec_name(self) -> str:
        return self.plan.spec_name

    @property
    def training(self) -> RunTraining:
        return self.run.training

    @property
    def evaluation(self) -> Evaluation:
        return self.run.evaluation

    @property
    def cache_dir(self) -> Path:
        """OLMo-core's trainer, dataset and loader work dirs."""
        return self.run_dir.cache

    def resolve(self, path: str) -> str:
        """A plan path (as written in the spec) -> absolute, relative to the plan's workdir;
        remote URLs pass through for OLMo-core's io layer."""
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


def check_run(run: RunEntry, plan_path: Path) -> None:
    """Rules across fields of one entry, so a bad entry fails in one line before torch loads."""
    where = f"{plan_path}: runs[{run.run_id}].training"
    tr = run.training
    seq = tr.sequence_length
    for name, tokens in (
        ("global_batch_size", tr.global_batch_size),
        ("microbatch_size", tr.microbatch_size),
    ):
        if tokens % seq:
            raise UserError(
                f"{where}.{name} = {tokens} (tokens) must be a multiple of sequence_length = {seq}"
            )
    data = tr.data
    if not data.paths and not data.mix:
        raise UserError(f"{where}.data needs 'paths' or 'mix'")
    vocab = run.size_dims.vocab_size
    if data.vocab_size < 1:
        raise UserError(f"{where}.data.vocab_size = {data.vocab_size} must be an integer >= 1")
    for key, value in (("eos_token_id", data.eos_token_id), ("pad_token_id", data.pad_token_id)):
        if not 0 <= value < vocab:
            raise UserError(
                f"{where}.data.{key} = {value} is outside the model vocabulary "
                f"(size_dims.vocab_size = {vocab}; allowed: 0 to {vocab - 1})"
            )


def _check_versions(plan: Plan, run: RunEntry, path: Path) -> None:
    """The job trains with the software its run identity names (`plan` recorded the versions
    it saw): otherwise another spec would reuse these numbers as that identity's."""
    if plan.identity is None:
        return
    bad = version_mismatch(run.as_json(), plan.identity.versions, installed_versions())
    if bad:
        said = ", ".join(f"{d} {rec} (installed here: {now})" for d, rec, now in bad)
        raise UserError(
            f"{path}: runs[{run.run_id}]: its identity was planned with {said}; re-plan in the "
            f"job's environment (`olmoablate plan {path.parent} --replan` where the jobs run, "
            f"then `olmoablate submit {path.parent} --redo {run.run_id}`) so the identity names "
            "the software that trains it"
        )


class DataChanged(UserError):
    """The job's data is not the bytes the run's identity names; ``str`` is the one line (kept
    as is by :func:`olmoablate.run.faults.classify`: its own commands, not ``--retry-failed``)."""

    one_line = True


def check_data(plan: Plan, run_id: str) -> None:
    """Refuse to train when a data file's bytes differ from what `plan` recorded (issue 35, case
    3): the run would train the new bytes under the old identity, and another spec planning the
    old data would then reuse it at 0 GPU-hours. Hashed afresh at every job start (every rank;
    at most 256 MiB read per file, see :func:`olmoablate.plan.store.data_changes`), never from
    the size+mtime cache."""
    from olmoablate.plan.store import data_changes

    changed = data_changes(plan, [run_id], fresh=True)
    if changed:
        executor = os.environ.get("SUBMITIT_EXECUTOR") or "local"
        raise DataChanged(changed[0].line(plan, "slurm" if executor == "slurm" else "local"))


def load_run(plan_path: str | Path, run_id: str) -> RunContext:
    """The context of ``run_id`` of ``plan_path`` (plan.json or its results folder), or a
    :class:`UserError`. (The launcher's wrapper read the same plan.json in this process just
    before: :meth:`Plan.load` hands back that validated plan.)"""
    plan = Plan.load(Path(plan_path).expanduser().resolve())
    path = plan.path
    assert path is not None
    run = plan.run(run_id)
    check_run(run, path)
    if run.certificate_now() != run.certificate:
        raise UserError(
            f"{path}: runs[{run_id}].certificate does not match the hash of its shared settings "
            f"(entry edited after `plan`?); re-run `olmoablate plan`"
        )
    for pair in plan.pairs_of(run_id):
        if pair.certificate != run.certificate:
            raise UserError(
                f"{path}: pairs[{pair.pair_id}].certificate differs from "
                f"runs[{run_id}].certificate; the arms would not be matched"
            )
    _check_versions(plan, run, path)
    check_data(plan, run_id)
    workdir = Path(plan.workdir).expanduser().resolve()
    return RunContext(
        plan=plan, run=run, workdir=workdir, run_dir=ResultsDir(path.parent).run(run_id)
    )
