"""The results folder ``results/<spec>/``: one object that names every file the stages share.

Each stage reads only what the previous one wrote here, so every path has one answer (a property
below); making the object reads nothing, so it works on a copy of a cluster's results anywhere.

::

    results/<spec>/
      plan.json                  plan      (Plan)
      ledger.json                submit    (job ids, attempts, states)
      submitit/                  submit    (submitit's job folders and logs)
      runs/<run_id>/             the training job of that run
        status.json  metrics.jsonl  metrics.arrow  fingerprints.jsonl  summary.json
        wandb.json  checkpoints/  cache/  wandb/  .cancel-requested (cancel -> job)
        identity.json            submit    (the identity trained here)
        reused.json              submit    (trained by another spec of the store: where)
      runs/.superseded/          replan    (runs moved aside when their entry changed)
      .report-cache/             report    (fingerprint checks; safe to delete)

status.json, summary.json and ledger.json are typed by :mod:`olmoablate.run.files`
(:meth:`RunDir.read_status` / :meth:`RunDir.read_summary`); next_plan.json, which `report` writes
next to its gate.json, is a :class:`~olmoablate.plan.planfile.Plan` (``submit next_plan.json``).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from olmoablate.errors import UserError
from olmoablate.io import (
    MAX_YAML_BYTES,
    InputLimitError,
    check_size,
    compose_yaml_bounded,
    read_json,
)
from olmoablate.plan.identity import is_run_place
from olmoablate.plan.names import (
    FINGERPRINTS_FILE,
    IDENTITY_FILE,
    LEDGER_FILE,
    METRICS_COPY_FILE,
    METRICS_FILE,
    PLAN_FILE,
    PROOF_FILE,
    RESULTS_ROOT,
    RESULTS_ROOT_ENV,
    REUSED_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    WANDB_FILE,
)
from olmoablate.plan.planfile import Plan


class _Under:
    """A path of the layout: ``parts`` under a RunDir's ``path`` or a ResultsDir's ``root``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, obj: RunDir | ResultsDir, owner: type) -> Path:
        base = obj.path if isinstance(obj, RunDir) else obj.root
        return base.joinpath(*self.parts)


class RunDir:
    """``runs/<run_id>/``: what one training run writes (and `cancel` drops in)."""

    def __init__(self, path: Path, run_id: str, reused_from: str | None = None) -> None:
        self.path = path
        self.run_id = run_id
        #: ``<spec>/runs/<id>`` under the store when another spec's run is used for this one
        #: (then ``path`` is that run's folder).
        self.reused_from = reused_from

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    status = _Under(STATUS_FILE)  # state, step, attempts; written by the job, marked by launch
    metrics = _Under(METRICS_FILE)  # one JSON object per logged step (the source of truth)
    metrics_copy = _Under(METRICS_COPY_FILE)  # its one cache, columnar (run/columnar.py)
    fingerprints = _Under(FINGERPRINTS_FILE)  # per-step hashes of the data each step trained on
    summary = _Under(SUMMARY_FILE)  # the run's measured costs (step time, memory, decode latency)
    proof = _Under(PROOF_FILE)  # what the job proved before its first step (run/proof.py)
    wandb = _Under(WANDB_FILE)  # the run's W&B id, project and URL
    checkpoints = _Under("checkpoints")
    #: The job's scratch (OLMo-core's dataset work dir); safe to delete between attempts.
    cache = _Under("cache")
    #: W&B's own files (offline runs: ``wandb sync <wandb_dir>/wandb/offline-run-*``).
    wandb_dir = _Under("wandb")
    #: Touched by `cancel`; the job stops at its next metrics step when it sees it.
    cancel_marker = _Under(".cancel-requested")
    #: Held (fcntl.flock) by the one process training the run (run/state.py's trainer lock).
    trainer_lock = _Under(".trainer.lock")
    identity = _Under(IDENTITY_FILE)  # the run identity trained in this folder (by `submit`)
    reused = _Under(REUSED_FILE)  # trained by another spec of the store (``{"from": ...}``)


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

    plan_path = _Under(PLAN_FILE)
    ledger = _Under(LEDGER_FILE)  # what `submit` launched (job ids, attempts): launch's record
    submitit = _Under("submitit")
    runs_dir = _Under("runs")
    superseded = _Under("runs", ".superseded")
    report_cache = _Under(".report-cache")

    @functools.cached_property
    def plan(self) -> Plan:
        """The validated plan (read once per object; a one-line error when it is missing)."""
        return Plan.load(self.plan_path)

    @property
    def store(self) -> Path:
        return self.root.parent

    def run(self, run_id: str) -> RunDir:
        """The folder holding the run's files: its own, or the run of another spec it reuses.
        A reused run may itself have become reused since (a stale lease): followed to the folder
        that trains it, never to partial files left behind; a loop leaves the run its own folder."""
        where = self.reused_from(run_id)
        seen = {f"{self.root.name}/runs/{run_id}"}
        while where is not None and where not in seen:
            seen.add(where)
            spec, _, rid = where.partition("/runs/")
            after = ResultsDir(self.store / spec).reused_from(rid)
            if after is None:
                return RunDir(self.store / where, run_id, reused_from=where)
            where = after
        return RunDir(self.runs_dir / run_id, run_id)

    def own_run(self, run_id: str) -> RunDir:
        """``runs/<run_id>/`` of this spec, reused or not (where launch writes its markers)."""
        return RunDir(self.runs_dir / run_id, run_id)

    def reused_from(self, run_id: str) -> str | None:
        """``<spec>/runs/<id>`` when another spec's run is used for ``run_id``, else None.
        In order: `submit`'s ``reused.json``; the run's own files; the reuse in plan.json."""
        own = self.runs_dir / run_id
        marker = _read_object(own / REUSED_FILE)
        if marker is not None and isinstance(marker.get("from"), str):
            where = str(marker["from"])
            return where if is_run_place(where) else None  # never a folder out of the store
        if (own / STATUS_FILE).exists():
            return None
        try:
            ident = self.plan.identity
        except UserError:
            return None
        return None if ident is None else ident.reused.get(run_id)


def resolve_results(arg: str | Path, results_root: str | Path = RESULTS_ROOT) -> ResultsDir:
    """The one resolver from what a user typed as SPEC to its results folder: a results folder, a
    plan.json, another plan file (its ``spec_name``), a spec file (its ``name:``) or a name."""
    text = str(arg)
    path = Path(text)
    if path.is_dir():
        if (path / PLAN_FILE).is_file():
            return ResultsDir(path)
        raise UserError(f"{path}: no {PLAN_FILE} in this directory; run `olmoablate plan SPEC` first")
    if path.is_file():
        if path.name == PLAN_FILE:
            return ResultsDir(path.parent)
        if path.suffix == ".json":  # another plan of the spec (the report's next_plan.json)
            return ResultsDir.for_spec(Plan.load(path).spec_name, results_root)
        return ResultsDir.for_spec(_spec_name(path), results_root)
    if "/" in text or text.endswith((".yaml", ".yml")):
        raise UserError(f"{text}: no such spec file or results directory")
    return ResultsDir.for_spec(text, results_root)


def _spec_name(path: Path) -> str:
    import yaml

    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
        check_size(data, MAX_YAML_BYTES, "the spec")
        _, doc = compose_yaml_bounded(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, InputLimitError) as err:
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


# Command-line options every command shares, defined once.

#: ``--results-root DIR`` (alias ``--store``; default ``$OLMOABLATE_RESULTS_ROOT`` or results).
RootOpt = Annotated[
    Path,
    typer.Option(
        "--results-root",
        "--store",
        metavar="DIR",
        envvar=RESULTS_ROOT_ENV,
        help="The store: the folder that holds one results folder per spec (for a SPEC given "
        "by name).",
    ),
]

# Shell completion of SPEC arguments and run ids: the shell runs the program on every TAB, so these
# read directory listings and plan.json as plain JSON, never the models.

_SUFFIXES = (".yaml", ".yml")


def _root(ctx: Any) -> Path:
    given = (getattr(ctx, "params", None) or {}).get("results_root")
    return Path(given or os.environ.get(RESULTS_ROOT_ENV) or RESULTS_ROOT)


def spec_candidates(incomplete: str, root: Path) -> list[str]:
    """Spec files and folders under what was typed, and spec names with a plan under ``root``."""
    out: list[str] = []
    head, _, tail = incomplete.rpartition("/")
    folder = Path(head or ".")
    try:
        for entry in sorted(folder.iterdir()):
            if not entry.name.startswith(tail) or entry.name.startswith("."):
                continue
            shown = f"{head}/{entry.name}" if head else entry.name
            if entry.is_dir():
                out.append(shown + "/")
            elif entry.suffix in _SUFFIXES:
                out.append(shown)
    except OSError:
        pass
    if "/" not in incomplete:
        try:
            found = (d for d in root.iterdir() if d.name.startswith(incomplete))
            out.extend(sorted(d.name for d in found if (d / PLAN_FILE).is_file()))
        except OSError:
            pass
    return out


def run_id_candidates(spec: str | None, incomplete: str, root: Path) -> list[str]:
    """Run ids of SPEC's plan.json (a results folder, plan.json or spec name) that start so."""
    if not spec:
        return []
    p = Path(spec)
    plan = p if p.name == PLAN_FILE else p / PLAN_FILE if p.is_dir() else root / spec / PLAN_FILE
    if p.is_file() and p.suffix in _SUFFIXES:
        plan = root / p.stem / PLAN_FILE  # the usual case: the spec's name is its file's stem
    try:
        runs = json.loads(plan.read_text(encoding="utf-8")).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r["run_id"] for r in runs if str(r.get("run_id", "")).startswith(incomplete)]


def complete_spec(ctx: Any, param: Any, incomplete: str) -> list[str]:
    return spec_candidates(incomplete, _root(ctx))


def complete_run_ids(ctx: Any, param: Any, incomplete: str) -> list[str]:
    # While completing, click may leave SPEC unparsed in ctx.args (resilient parsing).
    spec = (ctx.params or {}).get("spec") or next(iter(getattr(ctx, "args", None) or []), None)
    return run_id_candidates(spec, incomplete, _root(ctx))
