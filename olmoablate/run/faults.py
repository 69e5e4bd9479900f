"""One line a person can act on, from whatever exception ended a run (status.json ``reason``).

The root cause (never a traceback: that goes to ``runs/<id>/error.log``) is searched through the
whole exception chain - causes, contexts, exception groups and the per-rank failures that torch's
``CheckpointException`` wraps - because the real error (an ``OSError(ENOSPC)`` in a writer thread)
is usually several wrappers deep. Known causes get their own wording and way out; anything else is
``Type: first line``. Shared by the job and its wrapper, so no torch: types are recognised by name.
"""

from __future__ import annotations

import errno
import json
import shlex
import traceback
from collections.abc import Iterator
from pathlib import Path

#: ``runs/<id>/error.log``: the full traceback of every failed attempt (appended).
ERROR_LOG = "error.log"
MAX_REASON = 500


def redo_advice(results_dir: str | Path, run_id: str) -> str:
    """The commands that recover a run refused or failed for a cause that repeats on a retry
    (a block's formula or code, the spec, a hand-edited plan.json): re-plan from the spec, then
    start the run afresh. ``submit --retry-failed`` would rerun the same plan entry and the same
    recorded code, and a fixed block's new code is refused as "changed since plan".

    Read from plan.json as plain JSON (its spec path, workdir and ``--set`` overrides), because
    the fault may be that the plan no longer loads; then the spec is named ``SPEC``.
    """
    results = Path(results_dir)
    spec, sets = "SPEC", ""
    try:
        raw = json.loads((results / "plan.json").read_text(encoding="utf-8"))
        path = Path(str(raw["spec_path"])).expanduser()
        if not path.is_absolute():
            path = Path(str(raw["workdir"])).expanduser() / path
        spec = shlex.quote(str(path))
        sets = "".join(f" --set {shlex.quote(str(o))}" for o in raw.get("overrides") or [])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return (
        f"`olmoablate plan {spec}{sets} --replan` then "
        f"`olmoablate submit {shlex.quote(str(results))} --redo {shlex.quote(run_id)}`"
    )


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps (breadth first, each once)."""
    todo, seen = [exc], set()
    while todo and len(seen) < 100:
        cur = todo.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        todo.extend(e for e in (cur.__cause__, cur.__context__) if e is not None)
        todo.extend(getattr(cur, "exceptions", None) or [])  # ExceptionGroup
        failures = getattr(cur, "failures", None)  # torch DCP CheckpointException
        if isinstance(failures, dict):
            for value in failures.values():
                first = value[0] if isinstance(value, tuple) and value else value
                if isinstance(first, BaseException):
                    todo.append(first)


def first_line(exc: BaseException) -> str:
    text = str(exc) if type(exc).__name__ != "CheckpointException" else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _frames(exc: BaseException) -> list[str]:
    names: list[str] = []
    for e in chain(exc):
        names += [f.name for f in traceback.extract_tb(e.__traceback__)]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            for value in failures.values():
                if isinstance(value, tuple) and len(value) > 1 and value[1] is not None:
                    names += [getattr(f, "name", "") for f in value[1]]
    return names


def activity(exc: BaseException, step: int | None) -> str:
    """What the job was doing, from the traceback's function names."""
    frames = _frames(exc)
    if any("save_checkpoint" in n or n == "_save_checkpoint" for n in frames):
        return f"writing checkpoint step{step}" if step is not None else "writing a checkpoint"
    if any("load_checkpoint" in n for n in frames):
        return "loading the checkpoint"
    if any("eval" in n for n in frames):
        return f"evaluating at step {step}"
    return f"at step {step}" if step else ""


def _where(err: OSError, fallback: str | None) -> str:
    """`` under FOLDER``: the folder of the file being written (above a writer's temporary
    folder, whose name means nothing to a user), relative to the working directory if inside."""
    name = err.filename or fallback
    if not name:
        return ""
    folder = Path(str(name))
    if err.filename:
        folder = folder.parent
    while folder.parent != folder and ("tmp" in folder.name or folder.name.startswith(".")):
        folder = folder.parent
    try:
        shown = str(folder.relative_to(Path.cwd()))
    except ValueError:
        shown = str(folder)
    return f" under {shown}"


def classify(
    exc: BaseException,
    *,
    step: int | None = None,
    resume: str = "olmoablate submit ... --retry-failed",
    where: str | None = None,
    log: str | None = None,
    redo: str | None = None,
) -> str:
    """The one-line reason for ``exc`` (module docstring): ``cause; fix, then RESUME``.

    ``resume`` is the command that continues the run, ``where`` the folder to name when the
    error names none, ``log`` where the traceback went (named in the line). An exception whose
    class sets ``one_line = True`` is its own complete line with its own way out (e.g. the
    job's data check: ``--retry-failed`` would only repeat it).
    ``redo`` (see :func:`redo_advice`), given for failures before training started, is the
    way out of an unrecognised error: there it comes from the block's code, the spec or the plan
    and repeats on a plain retry; the environment's faults recognised above keep ``resume``.
    """
    own = next((e for e in chain(exc) if getattr(type(e), "one_line", False)), None)
    if own is not None:
        return cut(str(own))
    doing = activity(exc, step)
    seen = f" (traceback in {log})" if log else ""

    def line(cause: str, fix: str = "") -> str:
        return cut(cause.strip(), f"{seen}; {fix}{'then ' if fix else ''}{resume}")

    causes = list(chain(exc))
    texts = " | ".join(f"{type(e).__name__}: {e}" for e in causes if e is not exc) + str(exc)
    low = texts.lower()
    names = {type(e).__name__ for e in causes}
    for e in causes:
        if type(e).__name__ == "NoUsableCheckpoint":
            return cut(str(e))
    oserrors = [e for e in causes if isinstance(e, OSError) and e.errno is not None]
    full = "disk full (No space left on device)"
    for e in oserrors:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            what = full if e.errno == errno.ENOSPC else "disk quota exceeded"
            return line(f"{what} {doing}{_where(e, where)}", "free space, ")
    if "no space left on device" in low:
        return line(f"{full} {doing}", "free space, ")
    for e in oserrors:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            what = f"{e.strerror}: {e.filename}" if e.filename else str(e.strerror)
            return line(f"permission denied ({what}) {doing}", "fix the permissions or path, ")
    for e in causes:
        if isinstance(e, FileNotFoundError) or (isinstance(e, OSError) and e.errno == errno.ENOENT):
            name = getattr(e, "filename", None) or first_line(e)
            return line(
                f"missing file ({name}) {doing}",
                "restore it (data: `olmoablate data prepare`; or re-plan), ",
            )
    if names & {"OutOfMemoryError", "MemoryError"} or "out of memory" in low:
        oom = next(
            (e for e in causes if type(e).__name__ in ("OutOfMemoryError", "MemoryError")), exc
        )
        return line(
            f"out of memory {doing} ({first_line(oom)[:160] or type(oom).__name__})",
            "lower training.micro_batch_size or use more devices, ",
        )
    peer_lost = any(
        s in low for s in ("connection closed by peer", "connection reset by peer", "broken pipe")
    )
    if peer_lost or (
        ("nccl" in low or "gloo" in low or "DistBackendError" in names)
        and ("timeout" in low or "timed out" in low or "watchdog" in low)
    ):
        what = "lost a peer rank" if peer_lost else "NCCL/collective timeout"
        return line(
            f"{what} {doing} (a rank stopped responding: a node lost or hung)",
            "check the nodes (sinfo), ",
        )
    if "CheckpointException" in names or any(
        s in texts for s in ("PytorchStreamReader failed", "unexpected EOF", "UnpicklingError")
    ):
        root = next((e for e in causes if type(e).__name__ != "CheckpointException"), exc)
        return line(
            f"corrupt or unreadable checkpoint {doing} "
            f"({type(root).__name__}: {first_line(root)[:160]})",
            "move the newest checkpoints/stepN aside, ",
        )
    root = causes[-1] if len(causes) > 1 else exc
    shown = f"{type(exc).__name__}: {first_line(exc)}"
    if root is not exc:
        shown += f" (caused by {type(root).__name__}: {first_line(root)})"
    if redo is not None:
        if "`olmoablate submit " in shown:  # the refusal names its own way out
            return cut(f"{shown} {doing}", seen)
        return cut(f"{shown} {doing}", f"{seen}; fix the cause, then {redo}")
    return line(f"{shown} {doing}")


def cut(text: str, keep: str = "") -> str:
    """``text`` on one line of at most MAX_REASON characters, then ``keep`` whole: where the
    traceback went and the command that recovers the run are never cut, however long the cause."""
    one, tail = " ".join(text.split()).strip(), " ".join(keep.split())
    return (one if len(one) <= MAX_REASON else one[: MAX_REASON - 1] + "…") + tail


def write_traceback(log_path: Path, exc: BaseException, header: str) -> bool:
    """Append the full traceback of ``exc`` to ``log_path``; False when it cannot be written
    (a full disk): the caller then leaves it on stderr, i.e. in the job's own log."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    for e in chain(exc):
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            text += f"\n{type(e).__name__} per rank:\n{e}\n"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"==== {header}\n{text}\n")
        return True
    except OSError:
        return False
