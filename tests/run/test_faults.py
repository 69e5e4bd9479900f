"""The one-line reasons of olmoablate.run.faults, from real exceptions raised by the real calls
(a write to a path under a file, a missing file, a chained error), plus the wording of the
classes that need hardware to provoke (out of memory, NCCL timeout)."""

from __future__ import annotations

from pathlib import Path

from olmoablate.run.faults import chain, classify, write_traceback

RESUME = "olmoablate submit results/x --retry-failed"


def _raised(fn) -> BaseException:  # type: ignore[no-untyped-def]
    try:
        fn()
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError("did not raise")


def test_missing_file_through_a_wrapper(tmp_path: Path) -> None:
    def load() -> None:
        try:
            (tmp_path / "data" / "train.bin").read_bytes()
        except OSError as err:
            raise RuntimeError("dataset build failed") from err

    line = classify(_raised(load), resume=RESUME)
    assert line.startswith(f"missing file ({tmp_path / 'data' / 'train.bin'})"), line
    assert line.endswith(f"then {RESUME}") and "\n" not in line


def test_permission_and_unknown(tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:  # root writes anyway
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        err = _raised(lambda: (ro / "x").write_text("x"))
        assert classify(err, step=3, resume=RESUME).startswith("permission denied (")
    denied = PermissionError(13, "Permission denied", "/data/train.bin")
    assert classify(denied, step=3, resume=RESUME).startswith(
        "permission denied (Permission denied: /data/train.bin) at step 3"
    )
    err = _raised(lambda: int("seven"))
    line = classify(err, step=7, resume=RESUME)
    assert line.startswith("ValueError: invalid literal") and "at step 7" in line
    log = tmp_path / "error.log"
    assert write_traceback(log, err, "attempt 1") and "Traceback" in log.read_text()
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert not write_traceback(blocker / "error.log", err, "x")  # cannot be written: False


def test_wording_of_hardware_faults() -> None:
    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError, matched by name
        pass

    oom = classify(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), step=4)
    assert oom.startswith("out of memory at step 4 (CUDA out of memory.") and "micro_batch" in oom
    nccl = classify(RuntimeError("NCCL watchdog: collective operation timeout"), step=9)
    assert nccl.startswith("NCCL/collective timeout at step 9")
    peer = classify(RuntimeError("[gloo] Connection closed by peer [198.18.0.12]:2345"), step=9)
    assert peer.startswith("lost a peer rank at step 9 (a rank stopped responding")
    inner = OSError(28, "No space left on device", "/r/runs/a/checkpoints/tmp-step5/x.distcp")
    outer = RuntimeError("save failed")
    outer.__cause__ = inner
    assert inner in list(chain(outer))
    full = classify(outer, step=5, resume=RESUME)
    assert full.startswith(
        "disk full (No space left on device) at step 5 under /r/runs/a/checkpoints"
    )
