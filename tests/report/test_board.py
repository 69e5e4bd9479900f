"""The board and the gate's track record (`olmoablate.report.board`, `.track`), from synthetic
stage and promoted-size results reported by the report's own code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmoablate.report import track
from olmoablate.report.assemble import build_all
from olmoablate.report.board import build_board
from olmoablate.report.collect import collect
from olmoablate.report.document import write_all
from olmoablate.testing import run_cli as _cli
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"
GATE = {"metric": EVAL, "min_effect": 0.01, "promote_to": ["3B"], "noise": {"floor": {"sd": 0.005, "known": True}}}


def _proposal(store: Path, name: str, at_1b: float, at_3b: float) -> None:
    """A spec gated at 1B and promoted to 3B; ``at_*``: the variant's loss offset there
    (negative = better than the baseline)."""
    spec = SynthSpec(name=name, sizes=("1B", "3B"), gate=GATE)
    truths = {"1B-s0-sn_da": ArmTruth(offset=at_1b), "3B-s0-sn_da": ArmTruth(offset=at_3b)}
    root = store / name
    make_results(root, spec, truths)
    write_all(build_all(collect(root, use_cache=False, workers=1)), root, ["json"])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    s = tmp_path / "results"
    _proposal(s, "holds", -0.05, -0.04)  # proceed at 1B, still better at 3B
    _proposal(s, "flips", -0.05, +0.03)  # proceed at 1B, worse at 3B: did not hold
    _proposal(s, "stopped", +0.05, +0.05)  # stop at 1B, still worse at 3B: held
    _proposal(s, "unsure", -0.004, -0.05)  # inconclusive at 1B: not a decision, not counted
    return s


def test_track_record_from_stage_and_promoted_results(store: Path) -> None:
    board = build_board(store)
    by = {p.spec: p for p in board.proposals}
    assert {s: by[s].verdict for s in by} == {
        "holds": "proceed",
        "flips": "proceed",
        "stopped": "stop",
        "unsure": "inconclusive",
    }
    assert by["holds"].held_at == {"3B": True}
    assert by["flips"].held_at == {"3B": False}
    assert by["stopped"].held_at == {"3B": True}
    assert by["unsure"].held_at == {}
    assert by["holds"].effect == pytest.approx(0.05, abs=0.005)
    assert by["holds"].lower is not None and by["holds"].noise
    flips = next(t for t in board.track if t.spec == "flips")
    assert flips.effect == pytest.approx(-0.03, abs=0.005) and not flips.ranked_same
    s = board.summary
    assert (s["proposals"], s["held"], s["independent_groups"]) == (3, 2, 3)
    assert s["decision_accuracy"] == pytest.approx(2 / 3)
    lo, hi = s["interval_95"]
    assert lo < 2 / 3 < hi


def test_proposals_sharing_a_baseline_count_as_one_group() -> None:
    rows = [
        track.TrackRow(p, p, "v", "1B", "proceed", 0.05, "3B", e, None, None, 0.01, e > 0, e > 0)
        for p, e in (("a", 0.04), ("b", -0.02), ("c", 0.03))
    ]
    alone = track.summary(rows, {"a": 0, "b": 1, "c": 2})
    shared = track.summary(rows, {"a": 0, "b": 0, "c": 1})  # a and b share one baseline run
    assert alone["decision_accuracy"] == shared["decision_accuracy"] == pytest.approx(2 / 3)
    assert (alone["independent_groups"], shared["independent_groups"]) == (3, 2)
    assert shared["decision_accuracy_by_group"] == pytest.approx((0.5 + 1.0) / 2)
    # fewer independent groups: a wider interval from the same proposals
    a_lo, a_hi = alone["interval_95"]
    s_lo, s_hi = shared["interval_95"]
    assert s_hi - s_lo > a_hi - a_lo


def test_held_rules() -> None:
    assert track.held("proceed", 0.001, 0.01) and not track.held("proceed", -0.001, 0.01)
    assert track.held("stop", 0.01, 0.01) and not track.held("stop", 0.02, 0.01)
    with pytest.raises(ValueError):
        track.held("inconclusive", 0.0, 0.01)


def test_board_cli_formats_and_load_all_round_trip(store: Path, tmp_path: Path) -> None:
    from olmoablate.results import Campaign, load_all

    out = _cli("board", str(store), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "flips" in out.stdout and "decision accuracy 67%" in out.stdout
    assert "effect [bounds]" in out.stdout and "+0.0501 [+0.04" in out.stdout  # not markup
    got = _cli("board", str(store), "--format", "json", cwd=tmp_path)
    doc = json.loads(got.stdout)
    assert [p["spec"] for p in doc["proposals"]] == ["flips", "holds", "stopped", "unsure"]
    files = _cli("board", str(store), "--format", "md,html", "--out", "boardout", cwd=tmp_path)
    assert files.returncode == 0, files.stderr
    md = (tmp_path / "boardout" / "board.md").read_text()
    assert "| flips | gate | sn_da | proceed |" in md and "3B: NOT held" in md
    assert "<td>holds</td>" in (tmp_path / "boardout" / "board.html").read_text()
    bad = _cli("board", str(store), "--format", "pdf", cwd=tmp_path)
    assert bad.returncode == 2 and "allowed values" in bad.stderr

    camp = load_all(store)
    assert list(camp.proposals["spec"]) == ["flips", "holds", "stopped", "unsure"]
    assert camp.summary["proposals"] == 3 and len(camp.track) == 3
    again = Campaign.from_json(json.loads(got.stdout.replace(str(store), str(store))))
    import pandas.testing as pdt

    pdt.assert_frame_equal(again.proposals, camp.proposals)
    pdt.assert_frame_equal(again.specs, camp.specs)
    pdt.assert_frame_equal(again.track, camp.track)


def _gateless(store: Path, name: str) -> None:
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.testing import plans as sp
    from olmoablate.testing.plans import run_entry

    runs = [run_entry("tiny-s0-baseline", "baseline", {}, pair_id="tiny-s0")]
    sp.build_plan(runs, spec_name=name, workdir=str(store.parent)).write(
        ResultsDir(store / name).plan_path
    )


def test_a_spec_without_a_gate_is_on_the_board(store: Path, tmp_path: Path) -> None:
    _gateless(store, "nogate")
    out = _cli("board", str(store), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "nogate" in out.stdout
    md = _cli("board", str(store), "--format", "md", cwd=tmp_path).stdout
    assert "| nogate |" in md


@pytest.mark.parametrize(
    "gate", ['{"gates": [1]}', '{"variants": [{}]}', '{"variants": 3}', '{"gates": "x"}', "[1]", "{"]
)
def test_a_malformed_gate_json_is_a_problem_line_not_a_traceback(
    store: Path, tmp_path: Path, gate: str
) -> None:
    (store / "flips" / "gate.json").write_text(gate)
    out = _cli("board", str(store), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "holds" in out.stdout and "flips" in out.stdout
    assert "problem:" in out.stdout and "flips/gate.json" in out.stdout


def test_board_on_what_is_not_a_store_says_so_in_one_line(store: Path, tmp_path: Path) -> None:
    out = _cli("board", str(store / "holds"), cwd=tmp_path)
    assert out.returncode == 2 and "one spec's results folder" in out.stderr, out.stderr
    (tmp_path / "empty").mkdir()
    out = _cli("board", str(tmp_path / "empty"), cwd=tmp_path)
    assert out.returncode == 2 and "no results folder" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    (store / "holds" / "plan.json").write_text("{not json")
    out = _cli("board", str(store), cwd=tmp_path)
    assert out.returncode == 0 and "problem:" in out.stdout and "holds" in out.stdout


def test_a_verdict_older_than_its_runs_results_is_flagged(store: Path, tmp_path: Path) -> None:
    """A run finished (or was redone) after the last `report`: the board's verdict for that
    spec is stale, and says so."""
    import datetime

    status = store / "flips" / "runs" / "1B-s0-baseline" / "status.json"
    doc = json.loads(status.read_text())
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=1)
    status.write_text(json.dumps({**doc, "updated": later.isoformat()}))
    out = _cli("board", str(store), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "problem:" in out.stdout and "flips/gate.json is older" in out.stdout
    assert "holds/gate.json is older" not in out.stdout
