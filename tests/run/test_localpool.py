"""Progress output outside a terminal: plain whole lines at a bounded rate, tables never cut."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.io import make_console, print_whole
from olmoablate.run.localpool import Progress, plain_line, status_table
from olmoablate.run.state import RunView
from olmoablate.testing.plans import make_plan, run_entry

LONG = "tiny-s0-siamese_norm_and_depth_attention_stride2_no_recent_window"


def _view(rid: str, state: str, step: int | None) -> RunView:
    return RunView(
        run_id=rid,
        group_id="tiny-s0",
        state=state,
        executor="local",
        job_id="4242",
        step=step,
        total_steps=20,
        tokens=None if step is None else step * 512,
        last_loss=6.123456 if step else None,
        tokens_per_s=1234.5 if step else None,
        eta_s=12.0,
    )


def test_plain_progress_is_whole_and_rate_bounded() -> None:
    """State changes always print; a moving step prints at most once per interval; the final
    table shows every cell whole although the console is 80 columns (not a terminal)."""
    buf = io.StringIO()
    console = make_console(file=buf)
    assert console.width == 80 and not console.is_terminal
    views = [_view(LONG, "queued", None)]
    prog = Progress(
        lambda: views, lambda v: status_table(list(v)), interval_s=3600, console=console
    )
    assert not prog.is_live
    prog.start()
    views[0] = _view(LONG, "running", 1)
    prog.update()
    for step in range(2, 20):  # many updates, no state change: no new line within the interval
        views[0] = _view(LONG, "running", step)
        prog.update()
    views[0] = _view(LONG, "completed", 20)
    prog.stop()
    out = buf.getvalue()
    lines = [ln for ln in out.splitlines() if " run=" in ln]
    assert [re.search(r"state=(\S+)", ln).group(1) for ln in lines] == [
        "queued",
        "running",
        "completed",
    ]
    assert f"run={LONG} state=completed step=20/20 tokens=10.2k loss=6.1235" in lines[-1]
    assert "\x1b[" not in out and "…" not in out
    assert LONG in out.split(lines[-1], 1)[1]  # the final table, run id whole


def test_print_whole_widens_instead_of_cutting() -> None:
    buf = io.StringIO()
    console = make_console(file=buf)
    print_whole(console, status_table([_view(LONG, "running", 3)], title="t"))
    out = buf.getvalue()
    assert LONG in out and "…" not in out and "6.1235" in out
    assert max(len(ln) for ln in out.splitlines()) > 80
    assert console.width == 80  # restored


def test_plain_line_names_every_field() -> None:
    line = plain_line(_view(LONG, "running", 5))
    for key in ("run=", "state=running", "step=5/20", "tokens=", "loss=6.1235", "tok/s=1,234"):
        assert key in line
    assert "job=4242" in line and "executor=local" in line


@pytest.mark.slow
def test_submit_with_stdout_to_a_file(tmp_path: Path) -> None:
    """The real `submit --executor local` with stdout redirected to a file (a Slurm/CI log):
    plain progress lines, no escape codes, no cell cut, the final table whole."""
    runs = [
        run_entry("tiny-s0-baseline", "baseline", {}, steps=6, pair_id=LONG),
        run_entry(LONG, "variant_long", {"layers": {"n_layers": 2}}, steps=6, pair_id=LONG),
    ]
    results = make_plan(tmp_path, runs).parent
    log = tmp_path / "submit.log"
    with log.open("w") as fh:
        res = subprocess.run(
            [sys.executable, "-m", "olmoablate", "submit", str(results), "-j", "2"],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "80"},
            timeout=600,
        )
    assert res.returncode == 0, res.stderr
    out = log.read_text()
    assert "\x1b[" not in out and "…" not in out
    lines = [ln for ln in out.splitlines() if re.match(r"^\d{4}-\d\d-\d\dT\S+ run=", ln)]
    for rid in ("tiny-s0-baseline", LONG):
        mine = [ln for ln in lines if f" run={rid} " in ln]
        assert mine and "state=completed step=6/6" in mine[-1], out
        assert len(mine) <= 6  # state changes plus at most one line per 30 s of steps
    table = out.split(lines[-1], 1)[1]
    assert LONG in table and "completed" in table
    assert "submitted 2 job(s)" in out
    assert re.search(rf"^submitted {LONG}\s+job \d+$", out, re.M)  # one line, not wrapped
