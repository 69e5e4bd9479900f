"""The files a run leaves behind, typed: ``status.json``, ``summary.json``, ``ledger.json``,
``proof.json`` and the trainer lock's record (``.trainer.lock``).

Why here: these files cross stages (the job writes status and summary, launch marks the status and
keeps the ledger, `watch` records a futility stop, and `status`, `report`, the store and the board
read them); read by hand, run states had been spelled in six places and two timestamp formats
written. Each file has one model (missing or unreadable: None; a partial file: its missing fields
None) and one writer; a field of the wrong type is a one-line UserError naming the file and the
field; unknown keys are kept (``extra="allow"``), so another release's file round-trips.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)

from olmoablate.errors import Strict, UserError, first_error
from olmoablate.io import read_json, write_json_atomic
from olmoablate.plan.names import RunState, format_time, parse_time

# -- The record of a futility stop, as `olmoablate watch` writes it into status.json: one model,
# because `watch` writes it and `status` and the campaign board read it.


#: The key of the record in status.json (and the file watch keeps its stops in).
STATUS_KEY, WATCH_FILE = "futility_stop", "watch.json"


class FutilityStop(Strict):
    """One variant stopped for futility by its gate's pre-registered design."""

    gate: str
    variant: str
    look: int = Field(ge=1)
    of: int = Field(ge=1)
    fraction: float = Field(gt=0, le=1)  # of the token budget, where the look was taken
    reason: str  # "stopped for futility at look 1 of 3, 25% of tokens"
    gpu_hours_saved: float = Field(ge=0)  # variant-arm GPU-hours not spent (plan's estimates)
    runs: list[str]

    @classmethod
    def of_status(cls, status: Any) -> FutilityStop | None:
        """The record in a parsed status.json, or None (absent or unreadable)."""
        return cls.of_record(status.get(STATUS_KEY) if isinstance(status, dict) else None)

    @classmethod
    def of_record(cls, record: Any) -> FutilityStop | None:
        """From status.json's ``futility_stop`` value (:attr:`RunStatus.futility`), or None."""
        if not isinstance(record, dict):
            return None
        try:
            return cls.model_validate(record)
        except ValidationError:
            return None


class RunDir(Protocol):
    """What the readers need of :class:`olmoablate.plan.layout.RunDir` (no import: the
    layout reads these models)."""

    @property
    def status(self) -> Path: ...

    @property
    def summary(self) -> Path: ...


class RunFile(BaseModel):
    """A run file: unknown keys are kept, ``None`` stands for an absent field."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=True, validate_assignment=False)

    @classmethod
    def of(cls, data: Any, where: str) -> Any:
        """From a parsed file (``where`` names it in errors); None for None or an empty object."""
        if data is None or data == {}:
            return None
        if not isinstance(data, dict):
            raise UserError(f"{where}: not a JSON object")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise UserError(f"{where}: {first_error(err)}") from None

    @classmethod
    def load(cls, path: Path) -> Any:
        """The file at ``path``; None when it is missing or not JSON (a truncated copy): the run
        then has no such file yet."""
        try:
            data = read_json(path)
        except (OSError, ValueError):
            return None
        return cls.of(data, str(path))

    def has(self, name: str) -> bool:
        """The file holds ``name`` (even as null), as opposed to a field left out."""
        return name in self.model_fields_set

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class RunStatus(RunFile):
    """``runs/<id>/status.json``: state, step, attempt and the one-line reason of a stop.

    Written by the training job (:meth:`write`), marked by launch and watch (:meth:`update`).
    ``executor`` and ``host``: who started the attempt and the node its rank 0 runs on.
    """

    run_id: str | None = None
    pair_id: str | None = None
    arm: str | None = None
    attempt: int | None = None
    state: RunState | None = None
    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    diverged_at_step: int | None = None
    reason: str | None = None
    #: A resume that had to skip incomplete checkpoints (olmoablate.run.callbacks), one line.
    recovery: str | None = None
    #: The signals an interrupted attempt saw, in order (the job wrapper decides from them).
    signals: list[str] | None = None
    #: `watch`'s record of a futility stop (:class:`olmoablate.run.files.FutilityStop`).
    futility_stop: dict[str, Any] | None = None
    executor: str | None = None
    host: str | None = None
    updated: datetime.datetime | None = None

    @field_validator("updated", mode="before")
    @classmethod
    def _updated(cls, v: Any) -> Any:
        return v if v is None else (parse_time(v) or v)

    @field_serializer("updated")
    def _dump_updated(self, v: datetime.datetime | None) -> str | None:
        return None if v is None else format_time(v)

    @classmethod
    def read(cls, run: RunDir) -> RunStatus | None:
        return cls.load(run.status)

    @property
    def present(self) -> bool:
        """The file exists and holds at least one field."""
        return bool(self.model_fields_set)

    @property
    def futility(self) -> FutilityStop | None:
        return FutilityStop.of_record(self.futility_stop)

    def write(self, path: Path, updated: datetime.datetime | None = None) -> RunStatus:
        """The one writer of status.json (``updated`` = now unless given: synthetic results keep
        a fixed time); returns what it wrote."""
        when = updated or datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        out = self.model_copy(update={"updated": when})
        out.__pydantic_fields_set__.add("updated")
        write_json_atomic(path, out.as_json())
        return out

    @classmethod
    def update(cls, path: Path, **fields: Any) -> RunStatus:
        """Set ``fields`` of the status.json at ``path``, keeping every other field (what the
        training job wrote); an unreadable file is started over."""
        try:
            old = read_json(path)
        except (OSError, ValueError):
            old = {}
        if not isinstance(old, dict):
            old = {}
        new = {k: (v.value if isinstance(v, RunState) else v) for k, v in fields.items()}
        status = cls.of({**old, **new}, str(path)) or cls()
        return status.write(path)


class ExecutionRecord(RunFile):
    """``summary.json``'s ``execution`` block (:mod:`olmoablate.run.summary`)."""

    device: str | None = None
    world_size: int | None = None
    data_parallel: str | None = None
    param_dtype: str | None = None
    autocast_dtype: str | None = None
    compute_dtype: str | None = None
    attention_backend: str | None = None
    compile: dict[str, Any] | None = None
    gpu_model: str | None = None


class RunSummary(RunFile):
    """``runs/<id>/summary.json``: what the run measured (cost) and how and where it executed,
    written once per attempt by the training job. The report learns where a run ran from here,
    never from launch's ledger."""

    params: int | None = None
    non_embedding_params: int | None = None
    unique_params: int | None = None
    effective_params: int | None = None
    peak_memory_gb: float | None = None
    mean_step_time_s: float | None = None
    steady_steps: int | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu: float | None = None
    steps_this_attempt: int | None = None
    steps: int | None = None
    tokens: int | None = None
    wall_time_s: float | None = None
    optimizer_state_bytes: int | None = None
    loss_spikes: int | None = None
    execution: ExecutionRecord | None = None
    #: The node rank 0 ran on (where the steps were timed).
    hostname: str | None = None
    #: Every node of the job (Slurm's node list; the one host of a local run).
    nodes: list[str] | None = None
    #: ``local`` | ``slurm`` (who started the job; None: started by hand or an older release).
    executor: str | None = None
    decode_latency_s: float | None = None
    kv_cache_bytes: int | None = None
    decode_prompt_tokens: int | None = None
    decode_new_tokens: int | None = None
    decode_device: str | None = None
    state: RunState | None = None

    @classmethod
    def read(cls, run: RunDir) -> RunSummary | None:
        return cls.load(run.summary)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.as_json())


class TrainerHolder(RunFile):
    """``runs/<id>/.trainer.lock``'s content: the process that holds the run's trainer lock
    (:func:`olmoablate.run.state.trainer_lock` writes it once the lock is its own)."""

    pid: int | None = None
    host: str | None = None
    #: :func:`olmoablate.run.state.identity` of ``pid`` (a pid that differs is never signalled).
    identity: dict[str, Any] | None = None
    since: str | None = None

    @classmethod
    def read_lock(cls, path: Path) -> TrainerHolder:
        """The record (empty when the holder has not written it yet or it is unreadable)."""
        try:
            return cls.load(path) or cls()
        except UserError:
            return cls()

    @property
    def text(self) -> str:
        """``pid 123 on node1 since 2026-…`` (what is known of the holder)."""
        parts = [f"pid {self.pid}" if self.pid else "a process"]
        parts += [f"on {self.host}"] if self.host else []
        parts += [f"since {self.since}"] if self.since else []
        return " ".join(parts)


class LedgerJob(RunFile):
    """One job the ledger recorded for a run."""

    job_id: str
    executor: str  # "slurm" | "local"
    submitted: str | None = None
    attempt: int | None = None
    #: Local jobs: the machine that started them (their pid means nothing on another one).
    host: str | None = None
    #: Local jobs: :func:`olmoablate.run.state.identity` (a pid that differs is never signalled).
    identity: dict[str, Any] | None = None

    @field_validator("job_id", mode="before")
    @classmethod
    def _job_id(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class LedgerRun(RunFile):
    """One run's entry of ``results/<spec>/ledger.json``: the launcher's side of its state."""

    executor: str | None = None
    state: RunState | None = None
    attempts: int = 0
    job_ids: list[str] = Field(default_factory=list)
    jobs: list[LedgerJob] = Field(default_factory=list)
    reason: str | None = None
    updated: str | None = None
    #: Runs queued by a local `submit`: that process (the queue dies with it), its identity and
    #: its machine.
    owner_pid: int | None = None
    owner_identity: dict[str, Any] | None = None
    host: str | None = None

    @field_validator("job_ids", mode="before")
    @classmethod
    def _job_ids(cls, v: Any) -> Any:
        return [str(j) for j in v] if isinstance(v, list) else v

    @property
    def last_job(self) -> LedgerJob | None:
        return self.jobs[-1] if self.jobs else None


class LedgerFile(RunFile):
    """``results/<spec>/ledger.json`` (:class:`olmoablate.run.state.Ledger` reads and writes it)."""

    schema_version: int | None = Field(None, alias="schema")
    spec_name: str | None = None
    spec_sha256: str | None = None
    updated: str | None = None
    runs: dict[str, LedgerRun]

    @classmethod
    def check(cls, data: Any, where: str) -> LedgerFile:
        """``data`` (a parsed ledger.json) typed, or a one-line error that says what to do."""
        if not isinstance(data, dict):
            what = "not a JSON object"
        elif "runs" not in data:
            what = "field `runs` is missing"
        elif not isinstance(data["runs"], dict):
            what = "field `runs` is not an object"
        else:
            return cls.of(data, where) or cls(runs={})
        raise UserError(f"{where}: {what}; move the file aside to start over")


# -- proof.json: what the job proved before its first step (block code, unique parameters, FLOPs
# per token; :mod:`olmoablate.run.proof` writes it); the report never compares a pair whose arm
# trained other code or another parameter count than planned.


class ProofRecord(BaseModel):
    """The last (re)start's checks: block code hashes, unique parameters, FLOPs per token."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run_id: str
    #: block key -> sha256 of its source files, as verified against the plan's ``code``
    code: dict[str, str]
    unique_params: int
    #: matrix-product training FLOPs per token counted on the built model, and the formula's
    counted_flops_per_token: float
    formula_flops_per_token: int
    flops_tolerance: float
    seq_len: int
    attempt: int
    checked: str

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> ProofRecord | None:
        """The record at ``path``; None when there is none (a run from before proofs)."""
        if not path.is_file():
            return None
        try:
            return cls.model_validate(read_json(path))
        except ValidationError as err:
            raise UserError(f"{path}: {first_error(err)}") from None
        except (OSError, ValueError) as err:
            raise UserError(f"{path}: unreadable ({err})") from None
