"""Run state, in one module: what each run is doing now and who holds it.

* **The ledger** (``results/<spec>/ledger.json``, :class:`Ledger`): which job ran which run.
  Launch's own record (the report learns where a run executed from its summary.json); every
  read-decide-write holds ``.ledger.lock`` and every write is atomic, so two concurrent `submit`
  calls serialize and a reader never sees half a file.
* **The leases** (:func:`claim`): one run identity is trained once per store, whichever spec asks.
* **Reconcile** (:func:`reconcile`, the entry point): the scheduler's word (squeue, sacct, the pid
  of a local job) reconciled with the run's own status.json. `submit`, `cancel` and `status` all
  decide from its views.
* **Reasons** (:func:`reason_for`): one line for every run that is not running or completed.
* **Process identity** (:func:`identity`): a local job is its pid *and* start time *and* command.
* **The trainer lock** (:func:`trainer_lock`, :func:`trainer_holder`): one training process per
  run folder, whoever started it; a held lock is a live run whatever the launcher's record says.

No torch, no submitit: `status` must be fast on a login node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import file_lock, read_json, write_json_atomic
from olmoablate.plan.identity import is_run_place
from olmoablate.plan.layout import ResultsDir, RunDir
from olmoablate.plan.names import (
    DONE_STATES,
    ENDED_STATES,
    EXPLAINED_STATES,
    LIVE_STATES,
    RunState,
    now_iso,
)
from olmoablate.plan.store import owner_problem
from olmoablate.run import slurm as sl
from olmoablate.run.files import LedgerFile, LedgerJob, LedgerRun, RunStatus, TrainerHolder
from olmoablate.run.resume import check_resumable, latest_checkpoint_step, stale_done

#: Held for every read-decide-write of the ledger (launch's own file, next to ledger.json).
LOCK_FILE = ".ledger.lock"
SCHEMA = 1


def own_status(run: RunDir) -> RunStatus:
    """The run's own word (status.json); an empty :class:`RunStatus` when it wrote none."""
    return RunStatus.read(run) or RunStatus()


class Ledger:
    """In-memory view of ledger.json; mutate only inside ``Ledger.locked``."""

    def __init__(self, results: ResultsDir, data: dict[str, Any]) -> None:
        self.results = results
        self.data = data

    @property
    def path(self) -> Path:
        return self.results.ledger

    @classmethod
    def read(cls, results: ResultsDir) -> Ledger:
        """Read without the lock (for `status`): atomic writes make this safe."""
        path = results.ledger
        if not path.exists():
            return cls(results, {"schema": SCHEMA, "spec_sha256": None, "runs": {}})
        try:
            data = read_json(path)
        except (OSError, ValueError) as err:
            raise UserError(
                f"{path}: unreadable ledger ({err}); move it aside to start over"
            ) from None
        LedgerFile.check(data, str(path))  # a one-line error naming the field
        return cls(results, data)

    @classmethod
    @contextlib.contextmanager
    def locked(cls, results: ResultsDir) -> Iterator[Ledger]:
        """Hold the ledger lock for a whole read-decide-write; saves on clean exit."""
        with file_lock(results.root / LOCK_FILE):
            ledger = cls.read(results)
            yield ledger
            ledger.save()

    def save(self) -> None:
        self.data["schema"] = SCHEMA
        self.data["updated"] = now_iso()
        write_json_atomic(self.path, self.data)

    @property
    def runs(self) -> dict[str, dict[str, Any]]:
        return self.data["runs"]

    @property
    def spec_sha256(self) -> str | None:
        """The spec hash the ledger's jobs were submitted for."""
        return LedgerFile.check(self.data, str(self.path)).spec_sha256

    def entry(self, run_id: str) -> dict[str, Any] | None:
        return self.runs.get(run_id)

    def record(self, run_id: str) -> LedgerRun | None:
        """The run's entry, typed (None: never submitted, or forgotten by --redo)."""
        entry = self.entry(run_id)
        return None if entry is None else LedgerRun.of(entry, f"{self.path}: runs.{run_id}")

    def mark_queued(
        self, run_id: str, owner_pid: int, host: str, owner_identity: dict[str, Any] | None = None
    ) -> None:
        """A local `submit` (process ``owner_pid`` on ``host``) holds the run in its queue."""
        entry = self.runs.setdefault(
            run_id, {"executor": "local", "attempts": 0, "job_ids": [], "jobs": []}
        )
        entry.update(
            executor="local",
            state=RunState.QUEUED,
            owner_pid=owner_pid,
            owner_identity=owner_identity,
            reason=None,
            updated=now_iso(),
            host=host,
        )

    def record_submission(
        self,
        run_id: str,
        job_id: str,
        executor: str,
        state: str,
        host: str | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        """A job was started for the run (``host``, ``identity``: the machine and the process's
        identity, :func:`identity`, for local jobs)."""
        entry = self.runs.setdefault(
            run_id, {"executor": executor, "state": state, "attempts": 0, "job_ids": [], "jobs": []}
        )
        attempt = LedgerRun.of(entry, str(self.path)).attempts + 1
        entry.update(attempts=attempt, executor=executor, state=state, reason=None)
        entry.setdefault("job_ids", []).append(job_id)
        job = {"job_id": job_id, "executor": executor, "submitted": now_iso(), "attempt": attempt}
        if host is not None:
            job["host"] = host
        if identity is not None:
            job["identity"] = identity
        entry.setdefault("jobs", []).append(job)
        entry["updated"] = now_iso()

    def set_state(self, run_id: str, state: str, reason: str | None = None) -> None:
        if run_id in self.runs:
            self.runs[run_id].update(state=state, reason=reason, updated=now_iso())

    def forget(self, run_id: str) -> None:
        """Drop a run's history (for --redo): its old jobs belong to a superseded spec."""
        old = self.runs.pop(run_id, None)
        if old is not None:
            self.data.setdefault("superseded", {}).setdefault(run_id, []).append(old)


# -- Leases. Two specs planned before either was submitted each plan their own copy of a shared
# baseline, and their `submit`s may start at the same moment. Every `submit` decides under the
# store's lock (``<store>/.store/lock``, taken before the spec's ledger lock): a lease file
# ``<store>/.store/leases/<identity>.json`` names the spec and run that trains the identity. A
# lease held by another spec's run that is live or done means this spec uses that run
# (``runs/<id>/reused.json``, read by every later stage as its own, `ResultsDir.run`) and sends
# nothing; a lease whose run failed, was cancelled, is gone or now trains another identity (its
# spec re-planned, `olmoablate.plan.store`) is stale and taken over.


STORE_DIR = ".store"


def lease_path(store: Path, identity: str) -> Path:
    return store / STORE_DIR / "leases" / f"{identity}.json"


@contextlib.contextmanager
def store_locked(results: ResultsDir) -> Iterator[None]:
    with file_lock(results.store / STORE_DIR / "lock"):
        yield


def owner_state(store: Path, spec: str, run_id: str) -> str | None:
    """The reconciled state of run ``run_id`` of spec ``spec`` (None: no such plan or run).

    An owner whose plan or ledger cannot be read cannot hold a lease; an owner whose Slurm job
    the controller cannot answer for can (it may be running): that is a :class:`UserError`
    (submit stops, nothing sent), never a takeover that trains the identity twice."""
    owner = ResultsDir(store / spec)
    if not owner.plan_path.is_file():
        return None
    try:
        owner.plan  # noqa: B018  (loads and validates it)
        ledger = Ledger.read(owner)
    except (UserError, OSError, ValueError):  # an unreadable owner cannot hold a lease
        return None
    try:
        views = reconcile(owner, ledger, follow_reuse=False, require_scheduler=True)
    except UserError as err:
        raise UserError(
            f"the lease of {spec}/runs/{run_id} (the same run identity) cannot be checked: {err}"
        ) from None
    except (OSError, ValueError):  # its files are unreadable: it cannot hold a lease
        return None
    view = views.get(run_id)
    return None if view is None else view.state


def claim(results: ResultsDir, run_id: str) -> str | None:
    """Take the lease of ``run_id``'s identity, or return ``<spec>/runs/<id>`` of the live or
    done run of another spec that holds it (and mark this run as reusing it). Call under
    :func:`store_locked`. Plans without identities (older ones) train as before."""
    plan = results.plan
    if plan.identity is None or run_id not in plan.identity.runs:
        return None
    ident = plan.identity.runs[run_id]
    store = results.store
    path = lease_path(store, ident)
    try:
        lease = read_json(path)
    except (OSError, ValueError):  # no lease, or an unreadable one: taken over
        lease = None
    me = (results.root.name, run_id)
    own = results.own_run(run_id)
    if isinstance(lease, dict) and (lease.get("spec"), lease.get("run_id")) != me:
        spec, rid = str(lease.get("spec")), str(lease.get("run_id"))
        where = f"{spec}/runs/{rid}"
        # the holder's run must still be this identity (its spec may have been re-planned)
        if (
            is_run_place(where)
            and owner_problem(store, where, ident) is None
            and owner_state(store, spec, rid) in LIVE_STATES | DONE_STATES
        ):
            own.path.mkdir(parents=True, exist_ok=True)
            write_json_atomic(own.reused, {"from": where, "identity": ident, "at": now_iso()})
            return where
    write_json_atomic(
        path,
        {
            "identity": ident,
            "spec": me[0],
            "run_id": run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "at": now_iso(),
        },
    )
    own.reused.unlink(missing_ok=True)  # trained here now, whatever an older lease said
    return None


def apply_leases(
    results: ResultsDir,
    send: list[str],
    skip: list[tuple[str, str]],
    redo: Collection[str] = (),
) -> tuple[list[str], list[tuple[str, str]]]:
    """``send`` without the runs another spec trains (then skipped "reused from ...", as are the
    skipped runs that are reused); a folder of another identity is refused first."""
    check_resumable(results, send, redo)
    skip = stale_done(results, skip)
    skip = [
        (rid, why if where is None else f"{why}, reused from {results.store / where}")
        for rid, why in skip
        for where in [results.run(rid).reused_from]
    ]
    keep: list[str] = []
    for rid in send:
        where = claim(results, rid)
        if where is None:
            keep.append(rid)
        elif rid in redo:
            raise UserError(
                f"--redo {rid}: it is {results.store / where}, trained by another spec of the "
                "store (one identity is trained once); --redo it there"
            )
        else:
            skip.append((rid, f"reused from {results.store / where}"))
    return keep, skip


# -- Reasons. Two sources, in this order: the job's own word (status.json ``reason``) and, when the
# job ended outside the training loop (SIGKILL, out of memory, node failure), Slurm's accounting.
# Either way the line ends with where the run would resume and the command that resumes it.


def exit_text(record: dict[str, str]) -> str:
    """``signal 9`` / ``exit code 1`` from a sacct record (ExitCode, DerivedExitCode and the
    steps' StepExitCodes are ``code:signal``; a killed task's signal shows in its step, while the
    batch script's own ExitCode then reads ``9:0``): a signal wins over an exit code."""
    codes: list[int] = []
    signals: list[int] = []
    values = [str(record.get(f) or "") for f in ("ExitCode", "DerivedExitCode")]
    values += str(record.get("StepExitCodes") or "").split(",")
    for value in values:
        code, _, sig = value.partition(":")
        if code.isdigit():
            codes.append(int(code))
        if sig.isdigit():
            signals.append(int(sig))
    if any(signals):
        return f"signal {max(signals)}"
    if any(codes):
        return f"exit code {max(codes)}"
    return "exit code 0"


def resume_hint(results: ResultsDir, run_id: str, state: str, command: bool = True) -> str:
    """Where the run resumes and (unless ``command`` is False) the command that does it."""
    step = latest_checkpoint_step(results.run(run_id).checkpoints)
    flag = " --retry-failed" if state == RunState.FAILED else ""
    cmd = f": olmoablate submit {results.root}{flag}" if command else ""
    if state == RunState.DIVERGED:
        return ""  # final: never retried (use --redo to start over)
    if step is None:
        return f"; no checkpoint, restarts from step 0{cmd}"
    return f"; resumable from checkpoint step {step}{cmd}"


def reason_for(
    results: ResultsDir,
    run_id: str,
    state: str,
    own: RunStatus,
    sacct: dict[str, str] | None,
    ledger_reason: str | None,
) -> str | None:
    """The reason line of a run in ``state`` (None for running/completed/pending runs), from
    its status.json (``own``), Slurm's record of its last job and the ledger's reason."""
    if state not in EXPLAINED_STATES:
        return None
    step = own.step
    at = f" at step {step}" if step is not None and step > 0 else " before training started"
    cause: str | None = None
    # ENDED_STATES are written only from inside the job: its own final word
    if own.state == state or (own.state in ENDED_STATES and own.reason):
        cause = own.reason
    if cause is None and sacct is not None and sacct.get("State"):
        # The job ended outside the training loop: Slurm's word.
        slurm_state = str(sacct["State"]).split()[0]
        cause = f"{slurm_state}, {exit_text(sacct)}{at}"
    if cause is None:
        cause = own.reason or ledger_reason
    if cause is None:
        cause = f"job ended{at} without a final state"
    if "--redo" in cause:
        return cause  # the job's own way out: only starting over helps
    # the job's own line (:mod:`olmoablate.run.faults`) may name the command already: then only where
    return f"{cause}{resume_hint(results, run_id, state, 'olmoablate submit' not in cause)}"


def requeued_reason(results: ResultsDir, run_id: str, own: RunStatus) -> str | None:
    """The reason of a run Slurm requeued after a failure (``NODE_FAIL`` with ``JobRequeue``):
    the job's own cause without its way out (the requeue is that), and where it resumes."""
    if own.state != RunState.FAILED or not own.reason:
        return None
    cause = own.reason.split("; ")[0]
    step = latest_checkpoint_step(results.run(run_id).checkpoints)
    where = f"checkpoint step {step}" if step is not None else "step 0"
    return f"requeued by Slurm after: {cause}; resumes from {where} once its nodes are up"


# -- Process identity. A pid names a process only until it exits (a reboot, a results folder copied
# to a machine of the same name): a local job counts as alive only while its start time
# (/proc/<pid>/stat field 22), boot id and command line all still match; anything else is never
# signalled.


#: What every local job's controller runs: the identity of jobs recorded before identities were.
LOCAL_JOB_COMMAND = "submitit.local._local"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def boot_id() -> str | None:
    data = _read("/proc/sys/kernel/random/boot_id")
    return data.decode().strip() if data else None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of ``pid`` from /proc/<pid>/stat, or None."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    try:
        fields = data.decode(errors="replace").rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str | None:
    data = _read(f"/proc/{pid}/cmdline")
    return data.replace(b"\0", b" ").decode(errors="replace").strip() if data else None


def identity(pid: int) -> dict[str, Any] | None:
    """What makes ``pid`` this process and no other (None: it does not run, or no /proc).
    Between fork and exec there is no command line yet: asked again for up to half a second."""
    stat, cmd = _stat(pid), _cmdline(pid)
    for _ in range(50):
        if cmd or stat is None:
            break
        time.sleep(0.01)
        stat, cmd = _stat(pid), _cmdline(pid)
    if stat is None or cmd is None or stat[0] in ("Z", "X"):
        return None
    return {
        "start_ticks": stat[1],
        "boot_id": boot_id(),
        "cmdline_sha256": hashlib.sha256(cmd.encode()).hexdigest()[:16],
    }


def is_same_process(pid: int, recorded: dict[str, Any] | None) -> bool:
    """Whether ``pid`` is alive and is the process ``recorded`` describes (:func:`identity`);
    without one (older ledgers) it must at least run a local job's command line."""
    now = identity(pid)
    if now is None:
        return False
    if not recorded:
        return LOCAL_JOB_COMMAND in (_cmdline(pid) or "")
    return all(now.get(k) == recorded.get(k) for k in ("start_ticks", "boot_id", "cmdline_sha256"))


# -- The trainer lock. The launcher's record of a job is not the trainer: `kill -9` of a local
# job's controller (the pid `status` shows) leaves its training process running, and a second
# `submit` used to start another trainer in the same folder. So the training process itself holds
# an exclusive lock on ``runs/<id>/.trainer.lock`` (fcntl.flock, released by the kernel when the
# process ends, kill -9 included) from before it writes anything until it is done; a second
# trainer refuses with one line (:class:`RunBusyError`), and reconcile counts a held lock as a
# running run, so `status` never calls it resumable and `submit` never sends it. The file records
# who holds it (pid, identity, host, since; :class:`olmoablate.run.files.TrainerHolder`), for the
# messages and for `cancel`.


class RunBusyError(UserError):
    """Another process trains this run folder (one line, naming it)."""


#: The trainer locks this process holds (re-entrant: the job wrapper and the training job inside
#: it both take it; the outermost holder releases it).
_HELD: set[str] = set()
#: How long a trainer tries before it refuses (a `status` probe holds the lock for microseconds).
LOCK_WAIT_S = 2.0


@contextlib.contextmanager
def trainer_lock(run: RunDir, *, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold ``run``'s trainer lock for the block (re-entrant within a process);
    :class:`RunBusyError` when another process holds it after ``wait_s``. A filesystem without
    locks (flock fails otherwise) trains unlocked, as before."""
    path = run.trainer_lock
    key = str(path)
    if key in _HELD:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    locked = False
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RunBusyError(
                        f"{run.path} is being trained by another process "
                        f"({TrainerHolder.read_lock(path).text}); not starting a second trainer "
                        "(`olmoablate status` shows the run running; `olmoablate cancel` stops it)"
                    ) from None
                time.sleep(0.05)
            except OSError as err:
                if err.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    break  # no locks on this filesystem
                raise
        if locked:
            me = os.getpid()
            record = TrainerHolder(
                pid=me, host=socket.gethostname(), identity=identity(me), since=now_iso()
            )
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record.as_json()) + "\n").encode(), 0)
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def trainer_holder(run: RunDir) -> TrainerHolder | None:
    """The record of the process that holds ``run``'s trainer lock (empty when it is held but
    not yet written), None when no process holds it. A shared-lock probe: never blocks, and a
    trainer starting at that instant waits for it (:data:`LOCK_WAIT_S`)."""
    path = run.trainer_lock
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return TrainerHolder.read_lock(path)
        except OSError:
            return None  # no locks on this filesystem: nothing to tell
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def signal_trainer(run: RunDir, sig: int) -> int | None:
    """Send ``sig`` to the process holding ``run``'s trainer lock when it is on this machine and
    still the process its record names (:func:`is_same_process`); its pid, else None."""
    holder = trainer_holder(run)
    pid = holder.pid if holder is not None else None
    if holder is None or not pid or holder.host != socket.gethostname():
        return None
    if not is_same_process(pid, holder.identity):
        return None
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return None
    return pid


def wait_for_trainer(run: RunDir, poll_s: float = 0.2) -> None:
    """Until no process holds ``run``'s trainer lock (a trainer stopping at a checkpoint)."""
    while trainer_holder(run) is not None:
        time.sleep(poll_s)


# -- Completion. A run is completed by its own final word, or, when the job ended before writing
# it, by the step count *and* its final metrics row on disk: the status.json of the last step is
# written when that step's loss is logged, before its row (final evaluation included) reaches
# metrics.jsonl, so a kill in between used to leave a `completed` run without its final numbers,
# which `submit` then skipped for good.


#: How much of the end of metrics.jsonl is read to find its last row.
_TAIL_BYTES = 1 << 16


def last_row_step(run: RunDir) -> int | None:
    """The step of the last complete row of ``run``'s metrics.jsonl (None: no such row); only
    its end is read (more while no whole row is in it)."""
    try:
        with open(run.metrics, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            want = _TAIL_BYTES
            while True:
                start = max(0, size - want)
                fh.seek(start)
                lines = fh.read().split(b"\n")[:-1]  # after the last newline: torn or empty
                if start > 0:
                    lines = lines[1:]  # the first may be cut
                for line in reversed(lines):
                    try:
                        return int(json.loads(line)["step"])
                    except (ValueError, KeyError, TypeError):
                        continue
                if start == 0:
                    return None
                want *= 4
    except OSError:
        return None


# -- Reconcile. The run's own word wins for `completed`/`diverged` (completion is decided by the
# step count and the final row, not an exit code); the scheduler wins for liveness, and a held
# trainer lock is alive whatever the scheduler says.


@dataclasses.dataclass
class RunView:
    """One line of `olmoablate status`."""

    run_id: str
    group_id: str
    state: str
    executor: str | None = None
    job_id: str | None = None
    attempts: int = 0
    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    total_tokens: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    scheduler_state: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def pid_alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (PID 1 may reap late)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def local_job_alive(job: LedgerJob) -> bool:
    """Whether the local job still runs: same host, same process (:func:`is_same_process`)."""
    if job.host and job.host != socket.gethostname():
        return False  # another machine's job: we cannot see it; treat as ended
    try:
        return is_same_process(int(job.job_id), job.identity)
    except ValueError:
        return False


def _eta(own: RunStatus, total_tokens: int) -> float | None:
    if not own.tokens_per_s or own.tokens is None or not total_tokens:
        return None
    return max(0.0, (total_tokens - own.tokens) / own.tokens_per_s)


def reconcile(
    results: ResultsDir,
    ledger: Ledger,
    *,
    sacct_max_age_s: float = 10.0,
    require_scheduler: bool = False,
    follow_reuse: bool = True,
) -> dict[str, RunView]:
    """Current state of every run of the plan.

    A run this spec reuses from another spec of the store (``ResultsDir.run``) has that run's
    state, with the reason saying where it is (``follow_reuse``: one level, never a loop), while
    that run is still the identity this plan expects; otherwise it is ``missing`` (trained here
    by the next `submit`) and the reason says what moved (`olmoablate.plan.store`)."""
    runs = results.plan.runs_by_id
    records = {rid: ledger.record(rid) for rid in runs}
    slurm_jobs = {
        rid: rec.last_job
        for rid, rec in records.items()
        if rec is not None and rec.last_job is not None and rec.last_job.executor == "slurm"
    }
    slurm_ids = [job.job_id for job in slurm_jobs.values()]
    live = sl.squeue_states(slurm_ids) if slurm_ids else {}
    if live is None and require_scheduler:
        raise UserError("cannot reach the Slurm controller (squeue failed); is the cluster up?")
    acct = sl.sacct_states(results, slurm_ids, max_age_s=sacct_max_age_s) if slurm_ids else {}
    views: dict[str, RunView] = {}
    for rid, run in runs.items():
        status = own_status(results.run(rid))
        known = records[rid] is not None
        rec = records[rid] or LedgerRun()  # never submitted: an empty entry
        job = rec.last_job
        step, total = status.step, status.total_steps or run.steps
        view = RunView(
            run_id=rid,
            group_id=run.group_id,
            state=RunState.MISSING,
            executor=rec.executor,
            job_id=job.job_id if job is not None else None,
            attempts=rec.attempts,
            step=step,
            total_steps=total,
            tokens=status.tokens,
            total_tokens=run.tokens,
            last_loss=status.last_loss,
            tokens_per_s=status.tokens_per_s,
            eta_s=_eta(status, run.tokens),
        )
        views[rid] = view
        own = status.state
        reached_end = step is not None and total > 0 and step >= total
        ledger_state = rec.state
        cancelled = ledger_state == RunState.CANCELLED

        # Is a job for this run alive right now?
        sched: str | None = None
        if job is not None and job.executor == "slurm":
            jid = job.job_id
            if live and jid in live:
                view.scheduler_state = live[jid]
                sched = sl.map_slurm_state(live[jid])
            elif acct and jid in acct:
                view.scheduler_state = acct[jid].get("State")
                sched = sl.map_slurm_state(view.scheduler_state)
            elif live is not None:
                sched = "ended"  # the controller no longer has it and accounting forgot it
            # else: nobody to ask; fall back to status.json below
        elif job is not None and job.executor == "local":
            sched = RunState.RUNNING if local_job_alive(job) else "ended"
            view.scheduler_state = "alive" if sched == RunState.RUNNING else "exited"
        elif ledger_state == RunState.QUEUED:
            owner, ident = rec.owner_pid, rec.owner_identity
            alive = owner and (is_same_process(owner, ident) if ident else pid_alive(owner))
            sched = RunState.QUEUED if alive else "ended"

        if sched not in (RunState.PENDING, RunState.RUNNING):
            holder = trainer_holder(results.run(rid))
            if holder is not None:  # its controller may be gone: the trainer is not
                sched = RunState.RUNNING
                view.scheduler_state = f"trainer {holder.text}"
        live_now = sched in (RunState.PENDING, RunState.RUNNING, RunState.QUEUED)
        if own == RunState.COMPLETED or (
            reached_end
            and not live_now
            and own not in (RunState.DIVERGED, RunState.FAILED)
            and (last_row_step(results.run(rid)) or 0) >= total
        ):
            # The step count decides completion, but only once the job has let go of the run and
            # its final row (loss and final evaluation) is on disk: the last step's status is
            # written when its loss is logged, before that row is written.
            view.state = RunState.COMPLETED
        elif own == RunState.DIVERGED:
            view.state = RunState.DIVERGED
        elif live_now:
            view.state = RunState.CANCELLING if cancelled else sched
            if sched == RunState.RUNNING and own == RunState.PENDING:
                view.state = RunState.RUNNING
        elif cancelled or own == RunState.CANCELLED or sched == RunState.CANCELLED:
            view.state = RunState.CANCELLED
        elif own == RunState.FAILED or sched == RunState.FAILED or ledger_state == RunState.FAILED:
            view.state = RunState.FAILED
        elif known:
            # The job ended (or nobody can tell us about it) before the run reached its last step:
            # it was interrupted and can resume from its checkpoint.
            view.state = RunState.INTERRUPTED if sched is not None or own else RunState.UNKNOWN
        elif status.present:  # trained before, without a ledger (e.g. the ledger moved)
            view.state = RunState.INTERRUPTED
        sacct = acct.get(slurm_jobs[rid].job_id) if acct and rid in slurm_jobs else None
        view.reason = reason_for(results, rid, view.state, status, sacct, rec.reason)
        if view.reason is None and view.state == RunState.PENDING:
            view.reason = requeued_reason(results, rid, status)
        if view.reason is None and status.recovery:
            view.reason = status.recovery  # e.g. a completed run that skipped a broken checkpoint
    if follow_reuse:
        _reused_views(results, views, sacct_max_age_s)
    return views


def _reused_views(results: ResultsDir, views: dict[str, RunView], sacct_max_age_s: float) -> None:
    owners: dict[str, dict[str, RunView]] = {}
    plans: dict[str, Any] = {}  # the owners' plans, loaded once per view
    for rid, view in views.items():
        where = results.run(rid).reused_from
        if where is None:
            continue
        spec, _, owner_rid = where.partition("/runs/")
        if spec not in owners:
            owner = ResultsDir(results.store / spec)
            try:
                owners[spec] = reconcile(
                    owner, Ledger.read(owner), sacct_max_age_s=sacct_max_age_s, follow_reuse=False
                )
            except UserError:
                owners[spec] = {}
        got = owners[spec].get(owner_rid)
        note = f"reused from {results.store / where}"
        if got is None:
            view.state, view.reason = RunState.MISSING, f"{note}: that run is not in its plan"
            continue
        mine = results.plan.identity.runs.get(rid) if results.plan.identity is not None else None
        moved = owner_problem(results.store, where, mine, plans) if mine is not None else None
        if moved is not None:  # not this run any more: `submit` trains it here
            views[rid] = RunView(
                run_id=rid,
                group_id=view.group_id,
                state=RunState.MISSING,
                total_steps=results.plan.run(rid).steps,
                total_tokens=view.total_tokens,
                reason=f"{note}, but {moved}",
            )
            continue
        views[rid] = dataclasses.replace(
            got,
            run_id=rid,
            group_id=view.group_id,
            reason=f"{note}" + (f"; {got.reason}" if got.reason else ""),
        )
