"""Issue 22 (items 2 and 3): one source of truth per fact in plan.json.

* The gate is stored once, in ``gates`` (a ``gate:`` spec is the one-entry case); a format-1
  plan (the first gate also at the top level) still reads, upgraded, and one whose two copies
  disagree is refused in one line naming the file and the field.
* The run entry's ``training``/``slurm`` sections are the spec's models resolved, not re-typed.
* ``on_gpu`` (and the world size, the precision rule) are decided by one property each.
* A job start validates the plan once.
"""

from __future__ import annotations

import json
import re
import signal
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from olmoablate.errors import UserError
from olmoablate.plan import planfile as plan_mod
from olmoablate.plan.expand import build_plan
from olmoablate.plan.load import load_spec
from olmoablate.plan.planfile import PLAN_SCHEMA, Plan
from olmoablate.plan.resolved import RESOLUTIONS, field_type
from olmoablate.plan.schema import Topology
from olmoablate.testing import REPO, as_format_1

SPECS = REPO / "specs"


@pytest.fixture(scope="module")
def one_gate_doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """plan.json of a `gate:` spec (the shipped siamese one with its quality gate alone, as
    a `gate:` block), as `plan` writes it now."""
    import yaml

    doc = yaml.safe_load((SPECS / "siamese_depth_attention.yaml").read_text())
    doc["gate"] = doc.pop("gates")["siamese_depth"]
    path = tmp_path_factory.mktemp("one_gate") / "siamese_depth_attention.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return build_plan(load_spec(path)).as_json()


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(doc, indent=2))
    return out


# ---------------------------------------------------------------------------- the gate, once
def test_a_one_gate_plan_stores_its_gate_once(one_gate_doc: dict[str, Any]) -> None:
    doc = one_gate_doc
    assert doc["schema"] == PLAN_SCHEMA == 2
    assert not {"gate", "gate_sha256", "gate_raw_sha256"} & set(doc)
    assert [g["name"] for g in doc["gates"]] == ["siamese_depth"]
    plan = Plan.from_json(doc)
    entry = plan.gates[0]
    assert plan.gate == entry.gate and plan.gate_sha256 == entry.gate_sha256
    assert plan.gate_raw_sha256 == entry.gate_raw_sha256 and plan.gate_entry() is entry


def test_a_top_level_gate_in_a_current_plan_is_refused(
    one_gate_doc: dict[str, Any], tmp_path: Path
) -> None:
    """The second copy is no longer silently ignored: in format 2 it is an unknown key."""
    doc = {**one_gate_doc, "gate": one_gate_doc["gates"][0]["gate"]}
    with pytest.raises(UserError, match=r"plan\.json: gate: unknown key"):
        Plan.load(_write(tmp_path, doc))


def test_format_1_plan_upgrades(one_gate_doc: dict[str, Any], tmp_path: Path) -> None:
    old = as_format_1(one_gate_doc)
    plan = Plan.load(_write(tmp_path, old))
    assert plan.schema_version == PLAN_SCHEMA
    assert plan.as_json() == one_gate_doc  # the upgraded format, exactly what `plan` writes now
    assert plan.gate_sha256 == old["gate_sha256"] and plan.gate == plan.gates[0].gate


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("gate", lambda d: d["gate"].update(min_effect=0.5)),
        ("gate_sha256", lambda d: d.update(gate_sha256="0" * 64)),
        ("gate_raw_sha256", lambda d: d.update(gate_raw_sha256=None)),
        ("gate", lambda d: d.update(gates=[])),  # a gate with no entry in `gates`
    ],
)
def test_format_1_copies_that_disagree_are_refused(
    one_gate_doc: dict[str, Any], tmp_path: Path, field: str, edit: Any
) -> None:
    old = as_format_1(one_gate_doc)
    edit(old)
    path = _write(tmp_path, old)
    with pytest.raises(UserError) as err:
        Plan.load(path)
    said = str(err.value)
    assert "\n" not in said and said.startswith(f"{path}: {field}: differs from gates[0].{field}")


def test_format_1_plan_without_a_gate(one_gate_doc: dict[str, Any]) -> None:
    old = as_format_1({**one_gate_doc, "gates": []})
    assert old["gate"] is None
    plan = Plan.from_json(old)
    assert plan.gates == [] and plan.gate is None and plan.gate_sha256 is None


def test_gate_views_read_their_own_entry() -> None:
    plan = build_plan(load_spec(SPECS / "demo.yaml"))
    (n1, v1), (n2, v2) = plan.gate_views()
    assert (plan.gate, plan.gate_sha256) == (v1.gate, v1.gate_sha256)  # the plan reads the first
    assert v2.gate == plan.gates[1].gate and v2.gate_raw_sha256 == plan.gates[1].gate_raw_sha256
    assert v2.as_json() == plan.as_json()  # a view is no other plan


# ---------------------------------------------------------------------------- the run entry
#: The declared differences between a spec section and its run-entry section.
RESOLVED = {
    "training": {
        "required": {"microbatch_size"},
        "added": {"steps"},
        "replaced": {"schedule", "data"},
    },
    "training.schedule": {"required": {"warmup_steps"}, "dropped": {"warmup_fraction"}},
    "training.data": {
        "required": {"eos_token_id", "pad_token_id"},
        "dropped": {"vary_with_seed"},
        "added": {"vocab_size", "tokenizer_sha256", "dtype"},
    },
    "slurm": {"renamed": {"time": "time_min"}},
}


def _no_none(ann: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(ann) not in (typing.Union, types.UnionType):
        return ann
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    return args[0] if len(args) == 1 else ann


def _norm(ann: Any) -> tuple[Any, list[Any]]:
    """A type and its constraints as pydantic reads them (``PosInt`` = ``int`` + ``Gt(0)``)."""
    info = FieldInfo.from_annotation(ann)
    return info.annotation, list(info.metadata)


@pytest.mark.parametrize("section", list(RESOLUTIONS))
def test_run_entry_sections_are_the_spec_models_resolved(section: str) -> None:
    """Every field of the spec's section is in the run entry, with the same type and bounds,
    except the declared resolutions; and the run entry adds only the declared facts."""
    spec_model, run_model = RESOLUTIONS[section]
    how = RESOLVED[section]
    renamed = how.get("renamed", {})
    for name, info in spec_model.model_fields.items():
        if name in how.get("dropped", set()):
            assert name not in run_model.model_fields
            continue
        run_info = run_model.model_fields[renamed.get(name, name)]
        assert run_info.is_required(), f"{section}.{name}: the plan records every value"
        if name in how.get("replaced", set()):
            continue  # a nested section, checked as its own section
        want = _norm(field_type(info))
        if name in how.get("required", set()):
            want = _norm(_no_none(info.annotation))
            assert want != _norm(field_type(info)), f"{section}.{name} is not optional in the spec"
        assert _norm(field_type(run_info)) == want, f"{section}.{name}"
    spec_names = {renamed.get(n, n) for n in spec_model.model_fields} - how.get("dropped", set())
    assert set(run_model.model_fields) - spec_names == how.get("added", set())
    assert run_model.model_config["frozen"] and run_model.model_config["extra"] == "forbid"


def test_plan_entries_name_their_sections_with_the_resolved_models() -> None:
    training, slurm = (plan_mod.RunEntry.model_fields[k].annotation for k in ("training", "slurm"))
    assert training is RESOLUTIONS["training"][1] and slurm is RESOLUTIONS["slurm"][1]


def test_the_spec_slurm_time_is_one_int(tmp_path: Path) -> None:
    from olmoablate.plan.schema import Slurm

    assert Slurm(time="1-00:00:00").time == 1440 and Slurm().time == 60
    assert (
        plan_mod.RunSlurm.model_fields["time_min"].metadata == Slurm.model_fields["time"].metadata
    )


# ---------------------------------------------------------------------------- derived facts
def test_topology_derived_facts() -> None:
    cpu = Topology(gpus_per_node=0, cpu_processes=3, nodes=2)
    gpu = Topology(gpus_per_node=4, cpu_processes=3, nodes=2)
    assert (cpu.on_gpu, cpu.ranks_per_node, cpu.world_size) == (False, 3, 6)
    assert (gpu.on_gpu, gpu.ranks_per_node, gpu.world_size) == (True, 4, 8)
    assert cpu.data_workers == 0 and gpu.data_workers == 8


#: ``gpus_per_node`` compared with a number, or chosen between it and the CPU processes.
_DECIDES_GPU = re.compile(
    r"gpus_per_node\s*(>|>=|==|!=|<|<=)\s*\d|\d\s*(<|<=|==|!=|>|>=)\s*\S*gpus_per_node"
    r"|gpus_per_node\s+if\b|if\s+\S*gpus_per_node\s+else|\bif\s+(not\s+)?\S*gpus_per_node\s*:"
)


def test_on_gpu_is_decided_in_one_place() -> None:
    """Whether a run is on GPU is `Topology.on_gpu` everywhere (issue 22: it was decided in
    about ten places, which is how CPU and GPU paths drift apart)."""
    found = []
    for path in sorted((REPO / "olmoablate").rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if _DECIDES_GPU.search(line.split("#")[0]):
                found.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    execution = "olmoablate/plan/schema.py"
    assert [f for f in found if not f.startswith(execution)] == []
    assert len(found) == 2, found  # on_gpu itself, and ranks_per_node choosing by it


def test_precision_rule_is_one_property(one_gate_doc: dict[str, Any]) -> None:
    from olmoablate.plan.schema import computes_in_bf16
    from olmoablate.run.trainer import computes_in_bf16 as job_rule

    cpu, gpu = Topology(gpus_per_node=0), Topology(gpus_per_node=8)
    rule = {
        (p, t.on_gpu): computes_in_bf16(p, t) for p in ("auto", "bf16", "fp32") for t in (cpu, gpu)
    }
    assert [k for k, half in rule.items() if half] == [
        ("auto", True),
        ("bf16", False),
        ("bf16", True),
    ]
    run = Plan.from_json(one_gate_doc).runs[0]
    assert run.bf16 is computes_in_bf16(run.training.precision, run.topology) is job_rule(run)


# ---------------------------------------------------------------------------- loaded once
def _count_validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = Plan.from_json.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Plan], doc: Any, where: str = "plan.json") -> Plan:
        calls.append(where)
        return real(cls, doc, where)

    monkeypatch.setattr(Plan, "from_json", classmethod(counted))
    return calls


def test_a_job_start_validates_the_plan_once(
    one_gate_doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's wrapper (`TrainRun`) and the training job (`load_run`) both read the plan
    at every start; it is parsed and validated once, and both get the same typed object."""
    from olmoablate.run.runplan import load_run
    from olmoablate.run.task import TrainRun

    for key, value in (("EXECUTOR", "local"), ("LOCAL_JOB_ID", "1"), ("LOCAL_GLOBALID", "0")):
        monkeypatch.setenv(f"SUBMITIT_{key}", value)  # a one-task local submitit job
    monkeypatch.setenv("SUBMITIT_LOCAL_NTASKS", "1")
    path = _write(tmp_path, one_gate_doc).resolve()
    calls = _count_validations(monkeypatch)
    got: dict[str, Any] = {}

    def target(plan_path: str, run_id: str) -> dict[str, Any]:
        got["ctx"] = load_run(plan_path, run_id)
        return {"state": "completed", "run_id": run_id}

    rid = one_gate_doc["runs"][0]["run_id"]
    job = TrainRun(str(path), rid, str(tmp_path), target=target)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        assert job()["state"] == "completed"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert calls == [str(path)]
    assert got["ctx"].plan is Plan.load(path) and got["ctx"].run.run_id == rid
    assert len(calls) == 1


def test_a_changed_plan_is_validated_again(
    one_gate_doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, one_gate_doc)
    calls = _count_validations(monkeypatch)
    first = Plan.load(path)
    assert Plan.load(tmp_path) is first  # the same file named as its folder
    doc = json.loads(path.read_text())
    doc["runs"][0]["slurm"]["max_num_timeout"] = 0
    path.write_text(json.dumps(doc))  # same size or not: the bytes differ
    again = Plan.load(path)
    assert again is not first and again.runs[0].slurm.max_num_timeout == 0
    assert len(calls) == 2
    doc["runs"][0]["training"].pop("steps")
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"runs\[0\]\.training\.steps: field required"):
        Plan.load(path)


def test_prereg_of_a_gates_plan_reads_its_first_gate() -> None:
    """Not only a view: the plan of a `gates:` spec is checked against its first gate's block."""
    from olmoablate.report.prereg import check_gate_unchanged, resolve_gate

    plan = build_plan(load_spec(SPECS / "demo.yaml"))
    assert check_gate_unchanged(plan) == []
    assert resolve_gate(plan).source == "plan.json" and resolve_gate(plan).gate == plan.gate
    for _, view in plan.gate_views():
        assert check_gate_unchanged(view) == [] and resolve_gate(view).gate == view.gate
