"""Who a pid is: a local job is identified by pid *and* start time *and* command line.

A pid alone names a process only until it exits: after a reboot, or in a results folder copied
to another machine of the same hostname, the ledger's pid may belong to an unrelated process,
and `cancel` would signal it. So the launcher records, when it starts a local job, the
process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), the boot id
(``/proc/sys/kernel/random/boot_id``: start times restart at every boot) and its command line;
a process counts as the job only when all three still match. Anything else - another process,
no recorded identity and not our command, no ``/proc`` - is "not running", and is never
signalled. No torch, no submitit.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

#: What every local job's controller runs (launch/localpool.py): the fallback identity of jobs
#: recorded before identities were (their pid must at least run this).
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

    A process caught between fork and exec (just started) has no command line yet: asked again
    for up to half a second, so the launcher records the command it started.
    """
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
    """Whether ``pid`` is alive and is the process ``recorded`` describes (:func:`identity`).

    Without a recorded identity (ledgers of older versions) the pid must at least run a local
    job's command line.
    """
    now = identity(pid)
    if now is None:
        return False
    if not recorded:
        return LOCAL_JOB_COMMAND in (_cmdline(pid) or "")
    return all(now.get(k) == recorded.get(k) for k in ("start_ticks", "boot_id", "cmdline_sha256"))
