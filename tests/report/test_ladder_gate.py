"""A `rule: multiplier` gate through the whole report, on synthetic ladders whose run losses are
drawn from a known truth (`olmoablate.scaling.Truth`): the verdict in gate.json, the card
sentence, the plots, next_plan.json, the board's multiplier column, the track record at a target
with results, and `olmoablate.results`' ladder frame."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from olmoablate import results, scaling
from olmoablate.io import read_json
from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP, RunState
from olmoablate.report.assemble import build_all, write_next_plans
from olmoablate.report.board import build_board, rows
from olmoablate.report.cards import cards
from olmoablate.report.collect import collect
from olmoablate.report.document import write_all
from olmoablate.testing.synthetic import (
    ArmTruth,
    SynthSpec,
    check_against_report,
    ladder_truths,
    make_results,
    synthetic_plan,
)

EVAL = "eval/lm/demo-heldout/CE loss"
PARAMS = {"r1": 10_000_000, "r2": 30_000_000, "r3": 90_000_000, "t1": 1_000_000_000}
TOKENS = 200 * 2048  # SynthSpec's steps x global batch
LAW = scaling.Law(1.8, 174.0, 0.15)
BIG = {"size": "7B", "tokens_b": 10**11, "tokens_v": 10**11, "flops_b": 4 * 10**21,
       "flops_v": 4 * 10**21, "params_b": 7 * 10**9, "params_v": 7 * 10**9}  # fmt: skip


def _spec(name: str, targets: list[Any]) -> SynthSpec:
    gate = {
        "rule": "multiplier", "stage": "r3", "variant": "sn_da", "metric": EVAL,
        "min_multiplier": 1.05, "at": ["t1", "7B"], "max_step_time_overhead": None,
    }  # fmt: skip
    return SynthSpec(
        name=name, sizes=("r1", "r2", "r3", "t1"), seeds=(0, 1, 2), size_params=PARAMS,
        gate=gate, ladder={"rungs": ["r1", "r2", "r3"], "targets": targets},
    )  # fmt: skip


def _report(store: Path, name: str, m0: float, sd_delta: float = 0.003, **kw: Any) -> Path:
    """A ladder proposal in ``store``: losses from a truth with multiplier ``m0`` (``kw``: more
    of the truth, or ``runs``: ArmTruths replacing some runs)."""
    override = kw.pop("runs", {})
    spec = _spec(name, ["t1", BIG])
    truth = scaling.Truth(LAW, m0, 0.0, 6 * PARAMS["r2"] * TOKENS, sd_delta, 0.01, **kw)
    root = store / name
    truths = ladder_truths(spec, synthetic_plan(spec), truth, np.random.default_rng(3))
    make_results(root, spec, {**truths, **override})
    report = build_all(collect(root, use_cache=False, workers=1))
    write_next_plans(report, root)  # as `olmoablate report` does
    write_all(report, root, ["json", "md", "csv"])
    return root


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("ladders") / "results"
    _report(s, "worth", 1.3)
    _report(s, "worse", 0.8)
    _report(s, "curved", 1.2, curvature=0.03)
    _report(s, "marginal", 1.06, sd_delta=0.01)
    running = ArmTruth(state=RunState.RUNNING, stop_at=120)
    _report(s, "training", 1.3, runs={"r3-s2-sn_da": running})
    return s


def _gate(root: Path) -> dict[str, Any]:
    return read_json(root / "gate.json")


def test_a_worthwhile_variant_proceeds_with_its_projections(store: Path) -> None:
    root = store / "worth"
    g = _gate(root)
    assert g["verdict"] == PROCEED and g["rule"] == "multiplier"
    lad = g["ladder"]["sn_da"]
    assert lad["decision"] == PROCEED and lad["unit"] == "flops" and not lad["refused"]
    assert [r["size"] for r in lad["rungs"]] == ["r1", "r2", "r3"]
    assert set(lad["fits"]) == {"flops", "tokens", "params"}
    proj = {p["size"]: p["multiplier"] for p in lad["fits"]["flops"]["projections"]}
    assert set(proj) == {"t1", "7B"} and proj["7B"]["lower"] >= 1.05
    assert proj["t1"]["lower"] < 1.3 < proj["t1"]["upper"]
    # the track record at t1 (results there): the realized multiplier, inside the projection
    (check,) = lad["track"]
    assert check["size"] == "t1" and check["inside_anchored"] is True
    assert check["anchored"] == pytest.approx(1.3, rel=0.1)
    # the fitted law's own level is off at 11x the largest rung's compute (3 rungs, 3 law
    # parameters): the brief's law-only realized multiplier carries that error
    assert check["baseline_predicted"] != pytest.approx(check["baseline_loss"], abs=0.01)
    # next_plan.json promotes the targets the plan has runs for
    nxt = read_json(root / "next_plan.json")
    assert {r["size"] for r in nxt["runs"]} == {"t1"}
    assert any("7B" in s and "not in the plan" in s for s in g["next_steps"])
    md = (root / "report.md").read_text()
    assert "worth 1.3" in md and "x compute [" in md and "(one-sided 95% bounds)" in md
    assert "## Ladder: sn_da (sn_da)" in md
    assert (root / "plots" / "gate__sn_da.png").is_file()
    assert (root / "plots" / "ladder__sn_da__sn_da__loss.png").is_file()


def test_the_card_sentence_names_rung_projections_and_bounds(store: Path) -> None:
    report = build_all(collect(store / "worth", use_cache=True, workers=1))
    (card,) = cards(report)
    s = card.effect_text
    assert s.startswith("worth ") and " compute [" in s and " at r3; projected " in s
    assert " at t1, " in s and s.endswith(" at 7B: proceed (one-sided 95% bounds)")
    assert card.reason == "every lower bound >= min_multiplier 1.05."
    assert card.comparison.startswith("sn_da vs baseline at the rungs r1, r2, r3")


def test_a_worse_variant_stops(store: Path) -> None:
    g = _gate(store / "worse")
    assert g["verdict"] == STOP
    assert g["ladder"]["sn_da"]["reason"].endswith("an upper bound < min_multiplier 1.05")
    assert not (store / "worse" / "next_plan.json").exists()


def test_lack_of_fit_refuses_and_the_verdict_is_inconclusive(store: Path) -> None:
    g = _gate(store / "curved")
    lad = g["ladder"]["sn_da"]
    assert g["verdict"] == INCONCLUSIVE and lad["refused"].startswith("lack of fit")
    assert lad["fits"]["flops"]["projections"] == [] and lad["track"][0]["projected"] is None
    assert "projection refused: lack of fit" in (store / "curved" / "report.md").read_text()


def test_an_undecided_ladder_says_what_would_resolve_it(store: Path) -> None:
    g = _gate(store / "marginal")
    lad = g["ladder"]["sn_da"]
    assert g["verdict"] == INCONCLUSIVE and not lad["refused"]
    assert lad["reason"].endswith("not separable from min_multiplier 1.05")
    seeds, rung = g["next_steps"]
    assert seeds.startswith("one more seed pair at every rung (+3 pairs): the gate resolves in")
    assert rung.startswith("one more rung at 4x the largest rung's compute (3 seed pair(s))")


def test_unfinished_runs_keep_the_ladder_inconclusive(store: Path) -> None:
    g = _gate(store / "training")
    assert g["verdict"] == INCONCLUSIVE
    assert g["ladder"]["sn_da"]["decision"] == PROCEED  # the interim fit, shown
    assert any("not finished; the verdict waits" in r for r in g["reasons"])
    assert g["ladder"]["sn_da"]["left_out"] == [
        "pair r3-s2-sn_da: not complete (variant r3-s2-sn_da is running at 2.46e+05/4.1e+05 tokens)"
    ]


def test_board_multiplier_column_and_track_record(store: Path) -> None:
    board = build_board(store)
    by = {p.spec: p for p in board.proposals}
    m = by["worth"].multiplier
    assert m is not None and m["size"] == "7B" and m["unit"] == "flops" and m["lower"] >= 1.05
    curved = by["curved"].multiplier
    assert curved is not None and curved["unit_word"] == "compute"
    assert curved["refused"] == _gate(store / "curved")["ladder"]["sn_da"]["refused"]
    assert by["worth"].n_seeds == 3 and by["worth"].noise == "seeds (6 dof)"
    cells = {r[0]: r[5] for r in rows(board)}
    assert cells["worth"] == f"{m['estimate']:.3g}x compute [{m['lower']:.3g}, {m['upper']:.3g}] at 7B"
    assert m["lower"] < 1.3 < m["upper"]  # the truth (gamma 0: 1.3x at every scale)
    assert cells["curved"] == "compute: refused (inconclusive)"
    assert by["worth"].held_at == {"t1": True} and by["worse"].held_at == {"t1": True}
    worth = next(t for t in board.track if t.spec == "worth")
    assert worth.effect == pytest.approx(1.3, rel=0.1) and worth.ranked_same
    assert board.summary["proposals"] == 2  # worth and worse decided, with t1 results
    assert by["training"].held_at == {} and by["marginal"].held_at == {}


def test_results_ladder_frame(store: Path) -> None:
    rs = check_against_report(store / "worth")  # every frame against the files, ladder included
    f = rs.ladder
    assert list(f.columns) == list(results.LADDER_COLUMNS)
    assert len(f) == 3 * (3 + 2)  # three units x (three rungs + two targets)
    flops = f[f.unit == "flops"].set_index("size")
    assert flops.loc[["r1", "r2", "r3"], "projected"].eq(False).all()
    assert flops.loc[["t1", "7B"], "projected"].eq(True).all()
    assert flops["decided"].all() and not f[f.unit != "flops"]["decided"].any()
    g = json.loads((store / "worth" / "gate.json").read_text())
    for p in g["ladder"]["sn_da"]["fits"]["flops"]["projections"]:
        row = flops.loc[p["size"]]
        assert math.isclose(row.multiplier, p["multiplier"]["estimate"])
        assert math.isclose(row.lower, p["multiplier"]["lower"])
    refused = results.load(store / "curved").ladder
    assert refused[refused.projected].multiplier.isna().all()
    assert refused[refused.projected].refused.str.startswith("lack of fit").all()
