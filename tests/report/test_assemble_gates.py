"""Several gates per spec: one pre-registered, hashed verdict per proposal, decided independently;
the report opens with one verdict card per gate and gate.json holds every gate; the pairs are
measured once and shared by every gate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from olmoablate.io import read_json, sha256_of, write_json_atomic
from olmoablate.plan.expand import build_plan
from olmoablate.plan.gate import Gate
from olmoablate.plan.load import load_spec
from olmoablate.testing import REPO
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, check_against_report, make_results


def test_demo_spec_preregisters_one_gate_per_proposal() -> None:
    plan = build_plan(load_spec(REPO / "specs" / "demo.yaml")).as_json()
    gates = {g["name"]: g for g in plan["gates"]}
    assert list(gates) == ["siamese_depth", "looped"]
    assert gates["siamese_depth"]["gate"]["rule"] == "quality"
    assert gates["siamese_depth"]["gate"]["variant"] == "siamese_depth"
    assert gates["looped"]["gate"]["rule"] == "quality_per_param"
    assert gates["looped"]["gate"]["reference"] == "olmo3_4layer"
    for g in gates.values():
        assert g["gate_sha256"] == sha256_of(g["gate"]) and g["gate_raw_sha256"]
    assert "gate" not in plan  # stored once, in `gates` (issue 22)


def _gate(**kw: Any) -> dict[str, Any]:
    return Gate.model_validate(
        {"stage": "1B", "promote_to": ["3B"], "metric": "eval/lm/demo-heldout/CE loss"}
        | {"min_effect": 0.01, **kw}
    ).model_dump()


def _two_gate_results(root: Path) -> Path:
    make_results(
        root,
        SynthSpec(
            seeds=(0, 1, 2),
            variants={
                "sn_da": {"siamese_norm": {"output_norms": False}},
                "looped": {"looped": {"body_layers": 4, "loops": 4, "tail": 2}},
                "ref4": {"layers": {"n_layers": 4}},
            },
            gate={"metric": "eval/lm/demo-heldout/CE loss", "min_effect": 0.01},
        ),
        {
            "sn_da": ArmTruth(offset=-0.08, seed_offset=0.004),
            "looped": ArmTruth(offset=0.02, seed_offset=0.004),  # trails the baseline a little
            "ref4": ArmTruth(offset=0.30, seed_offset=0.004),  # the 4-layer model is much worse
        },
    )
    plan = read_json(root / "plan.json")
    blocks = {
        "siamese": _gate(rule="quality", variant="sn_da", max_step_time_overhead=None),
        "looped": _gate(
            rule="quality_per_param",
            variant="looped",
            reference="ref4",
            tolerance=0.05,
            max_step_time_overhead=None,
        ),
    }
    plan["gates"] = [
        {"name": n, "gate": b, "gate_sha256": sha256_of(b), "gate_raw_sha256": None}
        for n, b in blocks.items()
    ]
    write_json_atomic(root / "plan.json", plan)
    return root


def _report(root: Path) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, "-m", "olmoablate", "report", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return res


def test_report_opens_with_one_verdict_per_gate(tmp_path: Path) -> None:
    root = _two_gate_results(tmp_path / "results" / "synth")
    res = _report(root)
    gate = json.loads((root / "gate.json").read_text())
    assert [g["name"] for g in gate["gates"]] == ["siamese", "looped"]
    assert [g["rule"] for g in gate["gates"]] == ["quality", "quality_per_param"]
    assert [g["variant"] for g in gate["gates"]] == ["sn_da", "looped"]
    assert gate["verdicts"] == {"siamese": "proceed", "looped": "proceed"}, gate["verdicts"]
    plan = read_json(root / "plan.json")
    assert [g["gate_sha256"] for g in gate["gates"]] == [g["gate_sha256"] for g in plan["gates"]]
    looped = gate["gates"][1]
    checks = {
        c["name"] for v in looped["variants"] if v["variant"] == "looped" for c in v["checks"]
    }
    assert any("reference" in c for c in checks), checks

    md = (root / "report.md").read_text().splitlines()
    assert md[2].startswith("**Gate verdicts: siamese PROCEED at 1B; looped PROCEED at 1B")
    # one verdict card per proposal, first, before any details
    cards = [i for i, ln in enumerate(md) if ln.startswith("### ")]
    assert [md[i] for i in cards] == ["### siamese: PROCEED", "### looped: PROCEED"]
    assert md[cards[0] + 2].startswith("sn_da vs baseline at 1B, rule quality, metric ")
    assert md[cards[1] + 2].startswith("looped vs reference ref4 at 1B, rule quality_per_param, ")
    assert md[cards[0] + 4].startswith("Effect **+") and "one-sided 95% interval" in md[cards[0] + 4]
    assert cards[1] < md.index("## Gate siamese") < md.index("## Gate looped")
    assert "![gate__siamese](plots/gate__siamese.png)" in md
    assert not any(ln.startswith("- [siamese] [") for ln in md)  # no repeated tags
    assert "gate verdicts: siamese: proceed; looped: proceed (" in res.stdout.splitlines()[-1]
    # each proceeding gate promotes only its own proposal
    for name, arm in (("siamese", "sn_da"), ("looped", "looped")):
        nxt = read_json(root / "gates" / name / "next_plan.json")
        promoted = ", ".join(sorted({arm} | ({"ref4"} if name == "looped" else set())))
        assert f"gate {name} ({promoted}: proceed)" in nxt["description"]
        assert {r["arm"] for r in nxt["runs"]} <= {"baseline", *promoted.split(", ")}
    rs = check_against_report(root)  # the notebook frames hold both gates
    assert set(rs.gate["gate"]) == {"siamese", "looped"}


def test_gates_are_preregistered_independently(tmp_path: Path) -> None:
    """Editing one gate's block after planning breaks that gate's verdict only."""
    root = _two_gate_results(tmp_path / "results" / "synth")
    plan = read_json(root / "plan.json")
    plan["gates"][1]["gate"]["min_effect"] = 0.0  # tuned after seeing the results
    write_json_atomic(root / "plan.json", plan)
    _report(root)
    gate = json.loads((root / "gate.json").read_text())
    assert gate["verdicts"]["siamese"] == "proceed"
    assert gate["verdicts"]["looped"] == "inconclusive"
    broken = gate["gates"][1]
    assert broken["preregistration_broken"] and not gate["gates"][0]["preregistration_broken"]


def test_pairs_are_measured_once_and_shared_by_every_gate(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from olmoablate.report import assemble as gates
    from olmoablate.report import compare as pair
    from olmoablate.report.collect import collect

    root = _two_gate_results(tmp_path / "results" / "synth")
    calls: list[str] = []
    real = pair.measure_pair

    def counting(results: Any, p: Any) -> Any:
        calls.append(p.pair_id)
        return real(results, p)

    monkeypatch.setattr(pair, "measure_pair", counting)
    report = gates.build_all(collect(root, use_cache=False))
    assert len(report.gates) == 2
    assert sorted(calls) == sorted({p.pair_id for p in report.pairs})  # once per pair, not per gate
    a, b = (r.pairs for r in report.gates)
    assert all(x.train is y.train and x.by_metric is y.by_metric for x, y in zip(a, b, strict=True))
