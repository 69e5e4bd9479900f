"""The results folder ``results/<spec>/``: one object that names every file the stages share.

Why one object: each stage reads only what the previous one wrote here, so "where does the
ledger live" or "what is a run's status file called" must have one answer. Every path of the
layout is a property below; nothing is created or read when the object is made, so building one
is free and works on a copy of a cluster's results anywhere.

::

    results/<spec>/
      plan.json                  plan      (Plan)
      ledger.json                submit    (job ids, attempts, states)
      submitit/                  submit    (submitit's job folders and logs)
      runs/<run_id>/             the training job of that run
        status.json  metrics.jsonl  metrics.parquet  fingerprints.jsonl  summary.json
        wandb.json  checkpoints/  cache/  wandb/  .cancel-requested (cancel -> job)
      runs/.superseded/          replan    (runs moved aside when their entry changed)
      .report-cache/             report    (parse cache; safe to delete)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from olmoablate.contract.plan import PLAN_FILE, Plan
from olmoablate.errors import UserError
from olmoablate.io import read_json

RESULTS_ROOT = Path("results")


class RunDir:
    """``runs/<run_id>/``: what one training run writes (and `cancel` drops in)."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def status(self) -> Path:
        """status.json: state, step, attempts; written by the job, marked by launch."""
        return self.path / "status.json"

    @property
    def metrics(self) -> Path:
        """metrics.jsonl: one JSON object per logged step (the source of truth)."""
        return self.path / "metrics.jsonl"

    @property
    def metrics_parquet(self) -> Path:
        """metrics.parquet: the job's columnar copy of metrics.jsonl (a cache for the report)."""
        return self.path / "metrics.parquet"

    @property
    def fingerprints(self) -> Path:
        """fingerprints.jsonl: per-step hashes of the data each step trained on."""
        return self.path / "fingerprints.jsonl"

    @property
    def summary(self) -> Path:
        """summary.json: the run's measured costs (step time, memory, decode latency, ...)."""
        return self.path / "summary.json"

    @property
    def proof(self) -> Path:
        """proof.json: what the job proved before its first step (contract/proof.py)."""
        return self.path / "proof.json"

    @property
    def wandb(self) -> Path:
        """wandb.json: the run's W&B id, project and URL."""
        return self.path / "wandb.json"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def cache(self) -> Path:
        """The job's scratch (OLMo-core's dataset work dir); safe to delete between attempts."""
        return self.path / "cache"

    @property
    def wandb_dir(self) -> Path:
        """W&B's own files (offline runs: ``wandb sync <wandb_dir>/wandb/offline-run-*``)."""
        return self.path / "wandb"

    @property
    def cancel_marker(self) -> Path:
        """Touched by `cancel`; the job stops at its next metrics step when it sees it."""
        return self.path / ".cancel-requested"

    def read_status(self) -> dict[str, Any] | None:
        """status.json, or None when the job never wrote one (or it is unreadable)."""
        return _read_object(self.status)

    def read_summary(self) -> dict[str, Any] | None:
        """summary.json, or None when the run has not finished (or it is unreadable)."""
        return _read_object(self.summary)


class ResultsDir:
    """``results/<spec>/``: the plan, the launch records and one :class:`RunDir` per run."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"ResultsDir({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResultsDir) and self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    @classmethod
    def for_spec(cls, spec_name: str, results_root: str | Path = RESULTS_ROOT) -> ResultsDir:
        return cls(Path(results_root) / spec_name)

    @property
    def plan_path(self) -> Path:
        return self.root / PLAN_FILE

    @functools.cached_property
    def plan(self) -> Plan:
        """The validated plan (read once per object; a one-line error when it is missing)."""
        return Plan.load(self.plan_path)

    @property
    def ledger(self) -> Path:
        """ledger.json: what `submit` launched (job ids, attempts) — launch's own record."""
        return self.root / "ledger.json"

    @property
    def submitit(self) -> Path:
        return self.root / "submitit"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def superseded(self) -> Path:
        return self.runs_dir / ".superseded"

    @property
    def report_cache(self) -> Path:
        return self.root / ".report-cache"

    def run(self, run_id: str) -> RunDir:
        return RunDir(self.runs_dir / run_id, run_id)


def resolve_results(arg: str | Path, results_root: str | Path = RESULTS_ROOT) -> ResultsDir:
    """The one resolver from what a user typed as SPEC to its results folder.

    SPEC is a results folder (holding plan.json), a plan.json, a spec file (its ``name:`` picks
    ``<results_root>/<name>``; the YAML is only read for that field) or a spec name. Every
    problem is a one-line :class:`UserError`.
    """
    text = str(arg)
    path = Path(text)
    if path.is_dir():
        if (path / PLAN_FILE).is_file():
            return ResultsDir(path)
        raise UserError(
            f"{path}: no {PLAN_FILE} in this directory; run `olmoablate plan SPEC` first"
        )
    if path.is_file():
        if path.name == PLAN_FILE:
            return ResultsDir(path.parent)
        return ResultsDir.for_spec(_spec_name(path), results_root)
    if "/" in text or text.endswith((".yaml", ".yml")):
        raise UserError(f"{text}: no such spec file or results directory")
    return ResultsDir.for_spec(text, results_root)


def _spec_name(path: Path) -> str:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path}: cannot read the spec ({first})") from None
    name = doc.get("name") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name:
        raise UserError(f"{path}: name: required (the spec's name picks its results folder)")
    return name


def _read_object(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
