"""The plan side of scaling ladders (issue 32, docs/scaling.md): ``training.tokens: {per_param:
N}``, the multiplier gate's checks (each refusal names its field), registered gates keeping their
hash, the ladder record in plan.json (targets priced as planned runs) and the plan-time lines."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from olmoablate.io import sha256_of
from olmoablate.plan import accounting as acc
from olmoablate.plan.expand import build_plan
from olmoablate.plan.feasibility import LADDER_ANCHOR, SIM_DRAWS, gate_lines, ladder_runs
from olmoablate.plan.gate import MULTIPLIER_FIELDS, Gate
from olmoablate.plan.load import SpecError, load_spec
from olmoablate.plan.planfile import Plan
from olmoablate.plan.sizes import preset
from olmoablate.plan.validate import gate_summary
from olmoablate.testing import MINIMAL_SPEC, TESTS, run_cli

# Three tiny rungs (custom sizes, compute order r1 < r2 < r3) and the minimal spec's settings.
RUNGS = {
    "r1": {"d_model": 32, "n_layers": 4, "n_heads": 4, "mlp_hidden_size": 64, "sliding_window": 32},
    "r2": {"d_model": 64, "n_layers": 4, "n_heads": 4, "mlp_hidden_size": 128, "sliding_window": 32},
    "r3": {"d_model": 128, "n_layers": 8, "n_heads": 4, "mlp_hidden_size": 384, "sliding_window": 32},
}
GATE = {"stage": "r3", "rule": "multiplier", "variant": "v", "min_multiplier": 1.05,
        "at": ["7B"], "metric": "train/CE loss"}  # fmt: skip


def _doc(**change: Any) -> dict[str, Any]:
    doc = yaml.safe_load(MINIMAL_SPEC.read_text())
    doc["name"] = "ladder"
    doc["sizes"] = list(RUNGS)
    doc["custom_sizes"] = copy.deepcopy(RUNGS)
    doc["seeds"] = [0, 1]
    doc["training"]["tokens"] = {"per_param": 0.001}
    doc["gate"] = dict(GATE)
    doc.update(change)
    return doc


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "s") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(tmp_path: Path, doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, doc))
    return [(p.field, p.message) for p in info.value.problems]


# ------------------------------------------------------------------------- tokens: {per_param: N}
def test_per_param_counts_the_baselines_total_params_rounded_up_to_whole_batches(
    tmp_path: Path,
) -> None:
    doc = _doc(gate=None)
    doc["training"]["tokens"] = {"r1": "1M", "default": {"per_param": 20.5}}
    ls = load_spec(_write(tmp_path, doc))
    gbs = ls.per_size["r2"].training.global_batch_size
    for size in ("r2", "r3"):
        params = acc.param_count(ls.dims[size])  # embeddings included, no architecture
        want = math.ceil(20.5 * params / gbs) * gbs
        assert ls.per_size[size].training.tokens == want
        assert want % gbs == 0 and 0 <= want - 20.5 * params < gbs
    assert ls.per_size["r1"].training.tokens == 1_000_000
    # what every later stage sees is that count
    plan = build_plan(ls)
    run = plan.run("r3-s0-baseline")
    assert run.tokens == run.training.tokens == ls.per_size["r3"].training.tokens


def test_per_param_alone_applies_to_every_size(tmp_path: Path) -> None:
    ls = load_spec(_write(tmp_path, _doc(gate=None)))
    for size, st in ls.per_size.items():
        gbs = st.training.global_batch_size
        assert st.training.tokens == math.ceil(0.001 * acc.param_count(ls.dims[size]) / gbs) * gbs


@pytest.mark.parametrize(
    ("tokens", "field", "said"),
    [
        ({"per_param": 0}, "training.tokens.per_param", "greater than 0"),
        ({"per_param": -3}, "training.tokens.per_param", "greater than 0"),
        ({"per_param": "20"}, "training.tokens.per_param", "valid number"),
        ({"per_param": True}, "training.tokens.per_param", "valid number"),
        ({"perparam": 20}, "training.tokens.perparam", "did you mean 'per_param'"),
        ({"per_param": 20, "min": 1}, "training.tokens.min", "unknown field"),
        ({"r2": {"per_param": 0}, "default": 4096}, "training.tokens.r2.per_param", "greater"),
        ("lots", "training.tokens", "{per_param: N}"),
    ],
)
def test_bad_per_param_is_one_line_at_the_field(
    tmp_path: Path, tokens: Any, field: str, said: str
) -> None:
    doc = _doc(gate=None)
    doc["training"]["tokens"] = tokens
    found = _problems(tmp_path, doc)
    assert any(f == field and said in m for f, m in found), found
    assert all("\n" not in m for _, m in found)


# ------------------------------------------------------------------------ the gate's own checks
@pytest.mark.parametrize(
    ("change", "field", "said"),
    [
        ({"min_multiplier": None}, "gate.min_multiplier", "needs min_multiplier"),
        ({"min_multiplier": 0}, "gate.min_multiplier", "greater than 0"),
        ({"variant": None}, "gate.variant", "needs variant"),
        ({"at": []}, "gate.at", "at least one target"),
        ({"at": ["9B"]}, "gate.at[0]", "unknown size '9B'"),
        ({"at": ["7B", "7B"]}, "gate.at[1]", "listed twice"),
        ({"unit": "bytes"}, "gate.unit", "'flops', 'tokens' or 'params'"),
        ({"stage": "r2"}, "gate.stage", "largest rung, r3"),
        ({"rungs": ["r2", "r3"]}, "gate.rungs", "at least 3 rungs"),
        ({"rungs": ["r1", "r2", "r3", "1B"]}, "gate.rungs[3]", "not in sizes"),
        ({"at": ["r3"], "stage": "r2"}, "gate.rungs", "at least 3 rungs"),
        ({"rungs": ["r1", "r2", "r3"], "at": ["r3"]}, "gate.rungs[2]", "also a target"),
        ({"sequential": {"seed_stages": [2]}}, "gate.sequential", "not supported"),
        ({"noise": {"measure": {"aa_seeds": 1}}}, "gate.noise.measure", "A/A"),
        ({"planning": {"sd_delta": 0.01, "sd_mean": 0.02, "law": {"E": 1, "A": 0, "alpha": 1}}},
         "gate.planning.law.A", "greater than 0"),  # fmt: skip
    ],
)
def test_each_refusal_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, said: str
) -> None:
    gate = {k: v for k, v in {**GATE, **change}.items() if v is not None}
    found = _problems(tmp_path, _doc(gate=gate))
    assert any(f == field and said in m for f, m in found), found


def test_a_rung_the_variant_does_not_train_at_is_refused(tmp_path: Path) -> None:
    doc = _doc(gate={**GATE, "rungs": ["r1", "r2", "r3"]})
    doc["variants"]["v"]["sizes"] = ["r2", "r3"]
    found = _problems(tmp_path, doc)
    assert ("gate.rungs[0]", "variant 'v' does not train at r1 (its sizes: r2, r3); a rung "
            "needs both arms") in found  # fmt: skip
    # by default the rungs are the sizes the variant trains at: two here
    doc["gate"] = dict(GATE)
    assert any(f == "gate.rungs" and "got 2: r2, r3" in m for f, m in _problems(tmp_path, doc))


def test_multiplier_fields_belong_to_rule_multiplier(tmp_path: Path) -> None:
    found = _problems(tmp_path, _doc(gate={"stage": "r3", "min_multiplier": 1.1, "unit": "flops"}))
    assert ("gate", "min_multiplier, unit: only for rule multiplier (rule is quality)") in found


def test_a_target_outside_sizes_needs_a_planned_budget(tmp_path: Path) -> None:
    doc = _doc()
    doc["training"]["tokens"] = 4096  # a count shared by the rungs is no budget for 7B
    found = _problems(tmp_path, doc)
    assert any(f == "gate.at[0]" and "planned budget is unknown" in m and "per_param" in m
               for f, m in found), found  # fmt: skip
    doc["training"]["tokens"] = {"7B": "2T", "default": 4096}  # named for 7B: its budget
    ls = load_spec(_write(tmp_path, doc))
    (target,) = ls.ladders["v"].targets
    assert target.tokens_b == 2 * 10**12 // 256 * 256


def test_default_rungs_are_the_gated_variants_sizes_in_compute_order(tmp_path: Path) -> None:
    doc = _doc(sizes=["r1", "r2", "r3", "60M"], gate={**GATE, "stage": "60M"})
    doc["variants"]["w"] = {"siamese_norm": {}, "sizes": ["r3"]}  # another variant's sizes: no say
    ls = load_spec(_write(tmp_path, doc))
    assert ls.ladders["v"].rungs == ["r1", "r2", "r3", "60M"]
    doc["sizes"] = ["60M", "r2", "r1", "r3"]  # compute order, not spec order
    assert load_spec(_write(tmp_path, doc)).ladders["v"].rungs == ["r1", "r2", "r3", "60M"]


# --------------------------------------------------------------------- registered gates' hashes
def test_registered_gates_keep_their_sha256() -> None:
    """plan.json files written before the rule: every gate re-dumps to its registered hash."""
    fixtures = sorted((TESTS / "fixtures").glob("results_v*/results/*/plan.json"))
    assert fixtures
    for path in fixtures:
        plan = Plan.load(path)
        raw = json.loads(path.read_text())["gates"]
        for entry, doc in zip(plan.gates, raw, strict=True):
            dumped = entry.gate.model_dump()
            assert not set(MULTIPLIER_FIELDS) & set(dumped)
            assert sha256_of(dumped) == entry.gate_sha256, path
            assert entry.model_dump(mode="json") == doc  # no `ladder` key appears
    assert not set(MULTIPLIER_FIELDS) & set(Gate(stage="1B").model_dump(mode="json"))


def test_a_multiplier_gate_dumps_only_what_it_sets() -> None:
    g = Gate.model_validate({**GATE, "unit": "flops"})
    dumped = g.model_dump(mode="json")
    assert dumped["min_multiplier"] == 1.05 and dumped["at"] == ["7B"]
    assert not {"unit", "rungs", "planning"} & set(dumped)
    assert g.targets == ["7B"] and Gate.model_validate({**GATE, "at": [], "promote_to": ["1B"]}).targets == ["1B"]


# ---------------------------------------------------------------------- the ladder in plan.json
def test_targets_are_priced_as_a_planned_run_of_that_size(tmp_path: Path) -> None:
    """A target outside sizes costs what `plan` gives a run of it with the largest rung's
    settings: the same spec with the target in sizes plans runs of exactly those numbers."""
    doc = _doc(budget={"match": "flops"}, gate={**GATE, "at": ["14M"]})
    doc["training"]["tokens"] = {"per_param": 0.1}  # enough steps for the FLOPs match to show
    priced = build_plan(load_spec(_write(tmp_path, doc, "priced"))).gates[0].ladder
    assert priced is not None and priced.rungs == ["r1", "r2", "r3"]
    (t,) = priced.targets
    doc["sizes"] = [*RUNGS, "14M"]
    plan = build_plan(load_spec(_write(tmp_path, doc, "planned")))
    base, var = plan.run("14M-s0-baseline"), plan.run("14M-s0-v")
    assert (t.tokens_b, t.tokens_v) == (base.tokens, var.tokens) and t.tokens_b != t.tokens_v
    assert (t.flops_b, t.flops_v) == (base.total_train_flops, var.total_train_flops)
    assert (t.params_b, t.params_v) == (base.params, var.unique_params)
    assert t.tokens_b == math.ceil(0.1 * acc.param_count(preset("14M")) / 256) * 256
    assert plan.gates[0].ladder == priced  # in sizes, it takes that size's settings: the same here


def test_the_ladder_record_round_trips_and_is_absent_for_other_rules(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_write(tmp_path, _doc())))
    doc = plan.as_json()
    assert doc["gates"][0]["ladder"]["rungs"] == ["r1", "r2", "r3"]
    assert set(doc["gates"][0]["ladder"]["targets"][0]) == {
        "size", "tokens_b", "tokens_v", "flops_b", "flops_v", "params_b", "params_v"
    }  # fmt: skip
    assert Plan.from_json(json.loads(json.dumps(doc))).as_json() == doc
    other = build_plan(load_spec(_write(tmp_path, _doc(gate={"stage": "r3"}), "q"))).as_json()
    assert "ladder" not in other["gates"][0]
    assert acc.stage_of(plan) == {s: acc.GATE_STAGE for s in RUNGS}  # every rung runs now


# ------------------------------------------------------------------------------- plan's lines
def test_cost_line_is_the_ladder_over_one_target_pair(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_write(tmp_path, _doc(gate={**GATE, "at": ["1B", "7B"]}))))
    runs = ladder_runs(plan)
    assert len(runs) == 3 * 2 * 2
    total = sum(r.total_train_flops for r in runs)
    info, warnings = gate_lines(plan)
    assert warnings == []
    cost = info[0]
    assert cost.startswith("ladder: 3 rungs (r1, r2, r3) x 2 arms x 2 seed(s) = 12 runs")
    lad = plan.gates[0].ladder
    assert lad is not None
    for t in lad.targets:
        assert f"{t.size} {total / (t.flops_b + t.flops_v):.2%} of its pair" in cost
    assert f"~{LADDER_ANCHOR:.0%} of its target" in cost
    assert info[1].startswith("noise: paired seeds (2 per rung, pooled over 3 rungs: 3 dof)")
    assert not any("expected interval" in x for x in info)  # only when asked (plan, not validate)
    (line,) = [x for x in gate_lines(plan, simulate=True)[0] if "expected interval" in x]
    assert "not simulated; declare gate.planning" in line
    summary = gate_summary(plan)
    assert "lower bound >= 1.05 at every target (1B, 7B)" in summary
    assert "rungs r1, r2, r3 (stage r3)" in summary and "in flops" in summary


def test_reused_rungs_are_counted_and_marked(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_write(tmp_path, _doc())))
    from olmoablate.plan.store import identify

    ident = identify(plan, tmp_path)
    shared = {r.run_id: "other/runs/x" for r in plan.runs if r.is_baseline}
    plan = plan.model_copy(update={"identity": ident.model_copy(update={"reused": shared})})
    cost = gate_lines(plan)[0][0]
    new = sum(r.total_train_flops for r in ladder_runs(plan) if not r.is_baseline)
    assert f"(6 reused from the store: {new:.3g} FLOPs new)".replace("e+", "e") in cost


def test_one_seed_needs_a_floor(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_write(tmp_path, _doc(seeds=[0]))))
    info, warnings = gate_lines(plan)
    assert len(warnings) == 1 and "noise.floor" in warnings[0] and "refuse" in warnings[0]
    floor = {**GATE, "noise": {"floor": {"sd": 0.01, "pairs": 3}}}
    plan = build_plan(load_spec(_write(tmp_path, _doc(seeds=[0], gate=floor), "f")))
    info, warnings = gate_lines(plan)
    assert warnings == [] and "noise: declared floor sd_d = 0.01 (2 dof" in info[1]


def test_validate_and_plan_show_the_gate(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc())
    out = run_cli("validate", str(path), "--skip-paths", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = run_cli("plan", str(path), "--skip-paths", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "rule multiplier: proceed when" in out.stdout and "ladder: 3 rungs" in out.stdout


# ------------------------------------------------- the expected width (through olmoablate.scaling)
PLANNING = {"sd_delta": 0.01, "sd_mean": 0.03, "law": {"E": 1.7, "A": 400.0, "alpha": 0.15}}


def test_expected_width_is_simulated_reproducibly(tmp_path: Path) -> None:
    doc = _doc(seeds=[0, 1, 2], gate={**GATE, "at": ["1B", "7B"], "planning": PLANNING})
    plan = build_plan(load_spec(_write(tmp_path, doc)))
    info = gate_lines(plan, simulate=True)[0]
    (line,) = [x for x in info if x.startswith("expected interval width")]
    assert f"median upper/lower of {SIM_DRAWS} ladders" in line and "3 seed(s)" in line
    assert "1B " in line and "7B " in line and "% of draws under the planning assumptions" in line
    assert "true multiplier of 1.05 in FLOPs" in line and "set gate.planning.multiplier" in line
    assert [x for x in gate_lines(plan, simulate=True)[0] if x.startswith("expected")] == [line]


def _resolves(line: str) -> float:
    return float(line.split("resolves (proceed or stop) in ")[1].split("%")[0]) / 100


def test_expected_width_follows_the_design(tmp_path: Path) -> None:
    """At the bar the gate almost never decides (either decision would be an error); a true
    multiplier well above it resolves more often, and more seeds narrow the interval."""

    def line(seeds: list[int], **planning: Any) -> str:
        gate = {**GATE, "at": ["1B"], "planning": {**PLANNING, **planning}}
        plan = build_plan(load_spec(_write(tmp_path, _doc(seeds=seeds, gate=gate))))
        return next(x for x in gate_lines(plan, simulate=True)[0] if x.startswith("expected"))

    def width(text: str) -> float:
        return float(text.split(": 1B ")[1].split("x")[0])

    at_bar, above = line([0, 1]), line([0, 1], multiplier=1.5)
    assert _resolves(at_bar) <= 0.15 and _resolves(above) > _resolves(at_bar)
    assert width(line([0, 1, 2, 3])) < width(at_bar)


def test_explain_says_where_two_ladders_share_their_baseline_rungs(tmp_path: Path) -> None:
    from olmoablate.plan.explain import ladder_lines
    from olmoablate.plan.store import identify

    def plan(name: str, **training: Any) -> Plan:
        doc = _doc(name=name)
        doc["training"].update(training)
        p = build_plan(load_spec(_write(tmp_path, doc, name)))
        return p.model_copy(update={"identity": identify(p, tmp_path)})

    a, b = plan("a"), plan("b")  # two specs of one recipe
    (line, _) = ladder_lines(("a", a), ("b", b))
    assert line.startswith("a: gate 'v' (multiplier >= 1.05 in flops at 7B; rungs r1, r2, r3)")
    assert line.endswith("baseline rungs shared with b (same identity: trained once): r1, r2, r3")
    c = plan("c", optimizer={"lr": 2e-3})  # another recipe: no rung shared
    assert ladder_lines(("a", a), ("c", c))[0].endswith("no baseline rung shared with c")
