"""Plan-time gate statistics: A/A baselines in the plan, the noise/MDE/cost lines, the warning."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import yaml

from olmoablate.plan.expand import aa_seeds, build_plan
from olmoablate.plan.feasibility import gate_lines
from olmoablate.plan.load import load_spec
from olmoablate.run.runplan import load_run
from olmoablate.testing import REPO

BODY = yaml.safe_load((REPO / "tests" / "specs" / "bad" / "gate_stage_unknown.yaml").read_text())


def _spec(tmp_path: Path, gate: dict, seeds: list[int] | None = None, name: str = "g") -> Path:
    doc = {**BODY, "name": name, "gate": {"stage": "tiny", "metric": "train/CE loss", **gate}}
    doc["variants"] = {"v": {"depth_attention": {"stride": 2}}, "w": {"siamese_norm": {}}}
    if seeds is not None:
        doc["seeds"] = seeds
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_aa_seeds_add_priced_unpaired_baselines(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_spec(tmp_path, {"noise": {"measure": {"aa_seeds": 2}}}))).as_json()
    aa = [r for r in plan["runs"] if r.get("role") == "aa"]
    assert [r["run_id"] for r in aa] == ["tiny-s1-baseline", "tiny-s2-baseline"]
    assert plan["aa_runs"] == [r["run_id"] for r in aa]
    assert all(r["arm"] == "baseline" and r["pairs"] == [] and r["seed"] in (1, 2) for r in aa)
    base = next(r for r in plan["runs"] if r["run_id"] == "tiny-s0-baseline")
    assert all(r["gpu_hours"] == base["gpu_hours"] and r["steps"] == base["steps"] for r in aa)
    assert not any(p["baseline_run"] in plan["aa_runs"] for p in plan["pairs"])
    # an A/A run is exactly the baseline its seed would have: same certificate
    seeded = build_plan(load_spec(_spec(tmp_path, {}, seeds=[0, 1, 2], name="h"))).as_json()
    twin = next(r for r in seeded["runs"] if r["run_id"] == "tiny-s1-baseline")
    assert twin["certificate"] == aa[0]["certificate"]
    assert aa[0]["training"]["init_seed"] == twin["training"]["init_seed"]
    # and the training job accepts it
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "plan.json").write_text(json.dumps(plan))
    assert load_run(tmp_path / "res" / "plan.json", "tiny-s1-baseline").run.role == "aa"
    assert aa_seeds([3, 0], 2) == [4, 5]


def test_gate_lines_one_seed_no_source_warns(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_spec(tmp_path, {"variant": "v"})))
    info, warnings = gate_lines(plan)
    assert len(warnings) == 1 and "cannot resolve" in warnings[0]
    choices = next(x for x in info if x.startswith("noise choices"))
    assert "aa_seeds 1: +1 run(s)" in choices and "one more seed pair: +2 run(s)" in choices
    assert any("exploratory" in x and "w" in x for x in info)


def test_gate_lines_floor_mde_and_holm(tmp_path: Path) -> None:
    plan = build_plan(
        load_spec(
            _spec(tmp_path, {"noise": {"floor": {"sd": 0.02, "known": True}}, "min_effect": 0.01})
        )
    )
    info, warnings = gate_lines(plan)
    assert warnings == []
    line = next(x for x in info if x.startswith("noise: declared floor"))
    mde = (1.9600 + 0.8416) * 0.02  # known floor: normal; Holm over v, w: the first step at alpha/2
    assert f"MDE {mde:.3g}" in line and f"{0.01 + mde:.3g}" in line
    assert any("Holm" in x and "v, w" in x for x in info)
    aa = build_plan(load_spec(_spec(tmp_path, {"noise": {"measure": {"aa_seeds": 3}}}, name="a")))
    line = next(x for x in gate_lines(aa)[0] if x.startswith("noise: A/A"))
    assert "seeds 1, 2, 3" in line and "3 dof" in line
    two = build_plan(load_spec(_spec(tmp_path, {}, seeds=[0, 1], name="two")))
    assert any(x.startswith("noise: paired seeds (2 seeds") for x in gate_lines(two)[0])
    assert math.isfinite(float(next(x for x in gate_lines(two)[0]).split("MDE = ")[1].split()[0]))


def test_validate_warns_before_gpu_time(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {})
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "olmoablate", "validate", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "cannot resolve" in proc.stderr


def test_replan_adding_seeds_keeps_the_earlier_registration(tmp_path: Path) -> None:
    """issue 23: the gate's design record hashes its seeds; `plan --replan` with more seeds
    keeps the earlier registration, which the report then flags
    (tests/report/test_sequential.py)."""
    from olmoablate.plan.feasibility import carry_registrations

    first = build_plan(load_spec(_spec(tmp_path, {"variant": "v"}, seeds=[0, 1], name="r")))
    again = build_plan(load_spec(_spec(tmp_path, {"variant": "v"}, seeds=[0, 1], name="r")))
    more = build_plan(load_spec(_spec(tmp_path, {"variant": "v"}, seeds=[0, 1, 2, 3], name="r")))
    e1, e2 = first.gates[0], more.gates[0]
    assert e1.seeds == [0, 1] and e2.seeds == [0, 1, 2, 3]
    assert e1.gate_sha256 == e2.gate_sha256 and e1.design_sha256 != e2.design_sha256
    assert carry_registrations(first.as_json(), again).gates[0].history == []
    kept = carry_registrations(first.as_json(), more).gates[0].history
    assert [h.seeds for h in kept] == [[0, 1]]
    # and it survives a second re-plan, then plan.json round-trips
    twice = carry_registrations(carry_registrations(first.as_json(), more).as_json(), more)
    assert [h.seeds for h in twice.gates[0].history] == [[0, 1]]


def test_sequential_design_validated_against_the_seeds(tmp_path: Path) -> None:
    import pytest

    from olmoablate.errors import UserError

    seq = {"variant": "v", "sequential": {"seed_stages": [2, 4]}}
    with pytest.raises(UserError, match="must end at the spec's 3 seeds"):
        load_spec(_spec(tmp_path, seq, seeds=[0, 1, 2], name="q"))
    plan = build_plan(load_spec(_spec(tmp_path, seq, seeds=[0, 1, 2, 3], name="q")))
    assert plan.gates[0].gate.sequential is not None
    line = next(x for x in gate_lines(plan)[0] if x.startswith("sequential design"))
    assert "look 1 of 2: full budget, 2 seed(s): proceed if the one-sided p <= 0.00557" in line
    assert "look 2 of 2: full budget, 4 seed(s)" in line
    with pytest.raises(UserError, match="interim"):
        load_spec(_spec(tmp_path, {"sequential": {"interim": [0.5, 1.2]}}, name="q2"))


def test_aa_not_planned_with_two_seeds(tmp_path: Path) -> None:
    plan = build_plan(
        load_spec(_spec(tmp_path, {"noise": {"measure": {"aa_seeds": 2}}}, seeds=[0, 1], name="n"))
    )
    assert plan.aa_runs == []
    _, warnings = gate_lines(plan)
    assert any("no A/A runs are planned" in w for w in warnings)
    one = build_plan(load_spec(_spec(tmp_path, {"noise": {"measure": {"aa_seeds": 1}}}, name="o")))
    line = next(x for x in gate_lines(one)[0] if x.startswith("noise: A/A"))
    assert "x sd_d at within-seed correlation 0 / 0.5 / 0.9" in line


def test_plan_replan_cli_records_the_earlier_seeds(tmp_path: Path) -> None:
    """`plan --replan` after adding seeds keeps the first registration in plan.json."""
    spec = _spec(tmp_path, {"variant": "v"}, seeds=[0, 1], name="rp")
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def plan(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "olmoablate", "plan", str(spec), *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )

    assert plan().returncode == 0
    doc = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**doc, "seeds": [0, 1, 2]}))
    assert plan().returncode == 0  # no run yet: re-planning is free (no look was possible)
    spec.write_text(yaml.safe_dump({**doc, "seeds": [0, 1, 2, 3]}))
    (tmp_path / "results" / "rp" / "runs" / "tiny-s0-baseline").mkdir(parents=True)
    assert plan().returncode != 0  # runs started: the pre-registered plan is kept
    out = plan("--replan")
    assert out.returncode == 0, out.stderr
    entry = json.loads((tmp_path / "results" / "rp" / "plan.json").read_text())["gates"][0]
    hist = entry["history"]
    assert entry["seeds"] == [0, 1, 2, 3] and [h["seeds"] for h in hist] == [[0, 1], [0, 1, 2]]
    # issue 34: whether a look was possible, and the block each registration decided with
    assert [h["after_runs"] for h in hist] == [False, True]
    assert all(h["gate"] == entry["gate"] for h in hist)
    from olmoablate.plan.planfile import GateEntry
    from olmoablate.report.sequential import first_look

    first = first_look(GateEntry.model_validate(entry))
    assert first is not None and first.seeds == [0, 1, 2]  # the one in force when runs began


def test_plan_states_futility_under_both_interim_models(tmp_path: Path) -> None:
    """Issue 34, items 6 and 7, where a user sees them: `plan` prints the interim bound it will
    use (the declared 50% raised, the same number the report decides with), the one-seed floor
    scaled to each interim fraction, the power lost and a null variant's share of tokens under
    both interim models; a floor from 3 pairs is a warning."""
    from olmoablate.report.sequential import futility_confidence
    from olmoablate.testing import run_cli

    gate = {
        "variant": "v",
        "min_effect": 0.01,
        "noise": {"floor": {"sd": 0.01, "pairs": 3}},
        "sequential": {"interim": [0.25, 0.5]},
    }
    spec = _spec(tmp_path, gate, name="fut")
    out = run_cli("plan", str(spec), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join((out.stdout + out.stderr).split())
    design = load_spec(spec).spec.gate.sequential  # type: ignore[union-attr]
    fq = futility_confidence(design, 0.05, 1, 2.0)
    assert fq > 0.5
    assert (
        f"stop for futility if the {fq:.1%} upper bound < 0.01 (noise: the floor's sd / sqrt(0.25))"
        in text
    )
    line = text.split("futility looks (")[1]
    assert f"upper bound at {fq:.1%}, raised from the declared 50%" in line
    lost = line.split("in points: ")[1]
    precise, brownian = (
        float(lost.split(f"{m} ")[1].split(",")[0].split(";")[0]) for m in ("precise", "brownian")
    )
    assert 0 <= precise <= brownian <= 1.5  # <= 1 point by construction (+ MC error)
    assert "a variant exactly at the bar spends precise" in line and "brownian" in line
    assert "gate.noise.floor is measured from only 3 seed pairs (fewer than 5)" in text


def _power_at(mde: float, case: str, reps: int = 100_000) -> float:
    """Realised chance to proceed at bar + ``mde`` (sd_d = 1, bar 0), decided by the report's own
    vectorised decision (stage_decision with the report's stage levels): the synthetic truth."""
    import numpy as np

    from olmoablate.plan.gate import SequentialDesign
    from olmoablate.report.sequential import FUTILITY, stage_decision, stage_levels

    rng = np.random.default_rng(7)

    def look(d: np.ndarray, n: int, level: float, final: bool) -> np.ndarray:
        x = d[:, :n]
        se = x.std(axis=1, ddof=1) / math.sqrt(n)
        return stage_decision(x.mean(axis=1), se, n - 1, 0.0, level, 0.95, final, 0.5)

    if case == "paired2":
        return float(np.mean(look(rng.standard_normal((reps, 2)) + mde, 2, 0.05, True) == "proceed"))
    if case == "aa1":  # one pair + 1 A/A baseline; run sd 1, rho 0: sd_d = sqrt(2)
        b0, b1, v = rng.standard_normal((3, reps))
        se = np.abs(b0 - b1) / math.sqrt(2) * math.sqrt(2)  # aa_source: run sd x sqrt(2), 1 dof
        d = mde * math.sqrt(2) + v - b0
        return float(np.mean(stage_decision(d, se, 1, 0.0, 0.05, 0.95, True, 0.5) == "proceed"))
    levels = stage_levels(SequentialDesign(seed_stages=[2, 4], spending=case), 0.05, 4)
    d = rng.standard_normal((reps, 4)) + mde
    first, second = look(d, 2, levels[0], False), look(d, 4, levels[1], True)
    return float(np.mean((first == "proceed") | ((first != FUTILITY) & (second == "proceed"))))


def test_plan_prints_the_mde_of_the_registered_design(tmp_path: Path) -> None:
    """Issue 34 item 4, through `olmoablate plan`: at the printed MDE the design proceeds with
    80% probability (within 2 points + 3 MC SE), for seed stages [2, 4] (O'Brien-Fleming and
    Pocock), a paired 2-seed gate and an A/A gate with k = 1. On main the MDE was
    (q_conf + q_power) / sqrt(n) for all of them: 77% (2 seeds, A/A), 79% and 64% ([2, 4])."""
    import re

    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def plan(path: Path) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "olmoablate", "plan", str(path)],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return " ".join(out.stdout.split())  # the console wraps long lines

    doc = {**BODY, "name": "st", "seeds": [0, 1, 2, 3]}
    doc.pop("gate")
    doc["gates"] = {
        s: {"stage": "tiny", "metric": "train/CE loss", "variant": "v",
            "sequential": {"seed_stages": [2, 4], "spending": s}}
        for s in ("obrien_fleming", "pocock")
    }  # fmt: skip
    (tmp_path / "st.yaml").write_text(yaml.safe_dump(doc))
    staged = re.findall(r"MDE = ([0-9.]+) x sd_d", plan(tmp_path / "st.yaml"))
    assert len(staged) == 2, staged
    one = plan(_spec(tmp_path, {"variant": "v", "noise": {"measure": {"aa_seeds": 1}}}, name="o"))
    aa = re.search(r"baseline\(s\) at tiny .*?MDE ([0-9.]+) /", one)
    two = re.search(r"one more seed pair: \+2 run\(s\) \(MDE ([0-9.]+) x sd_d", one)
    assert aa and two, one
    cases = [("obrien_fleming", staged[0]), ("pocock", staged[1]), ("aa1", aa.group(1))]
    cases.append(("paired2", two.group(1)))
    tol = 0.02 + 3 * math.sqrt(0.8 * 0.2 / 100_000)
    realised = {case: _power_at(float(m), case) for case, m in cases}
    assert all(abs(p - 0.8) <= tol for p in realised.values()), (cases, realised)
