"""Run identity (`olmoablate.plan.identity`, `olmoablate.plan.store`): what it hashes.

The rule under test: everything of the run entry is in the identity unless the deny-list names
it, the data is named by content, and nothing of one machine (paths, spec name, time) leaks in.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from olmoablate.plan import identity as ident
from olmoablate.plan.planfile import Plan
from olmoablate.plan.store import fingerprint, identify
from olmoablate.testing.plans import run_entry, write_tokens

VERSIONS = {"olmoablate": "0.1.0", "ai2-olmo-core": "3.0.0", "torch": "2.13.0"}


def _entry() -> dict[str, Any]:
    return run_entry("tiny-s0-baseline", "baseline", {})


def _id(run: dict[str, Any], fps: dict[str, str] | None = None, **versions: Any) -> str:
    return ident.identity_of(ident.payload(run, fps or {}, {**VERSIONS, **versions}))


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    *head, last = dotted.split(".")
    for k in head:
        node = node[k]
    node[last] = value
    return out


@pytest.mark.parametrize("dotted", sorted(ident.EXCLUDED))
def test_every_excluded_field_leaves_the_identity(dotted: str) -> None:
    run = _entry()
    node: Any = run
    for k in dotted.split(".")[:-1]:
        node = node[k]
    if dotted.split(".")[-1] not in node:
        node[dotted.split(".")[-1]] = None  # optional keys (role): present vs absent
    assert _id(_set(run, dotted, "something else")) == _id(run), dotted


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("training.data.seed", 7),
        ("training.init_seed", 99),
        ("training.optimizer.lr", 0.5),
        ("training.global_batch_size", 12_288),
        ("training.schedule.warmup_steps", 3),
        ("tokens", 1),
        ("topology.gpus_per_node", 8),
        ("evaluation.interval", 3),
        ("architecture", {"depth_attention": {"stride": 2}}),
    ],
)
def test_what_determines_the_numbers_changes_it(dotted: str, value: Any) -> None:
    run = _entry()
    assert _id(_set(run, dotted, value)) != _id(run)


def test_a_field_added_later_is_included_by_default() -> None:
    """The design rule: a new run-entry field (e.g. a block's code identity) counts unless it is
    deliberately excluded — a forgotten exclusion costs a reuse, never a wrong verdict."""
    run = _entry()
    assert _id({**run, "block_code": "sha256:abc"}) != _id(run)
    assert _id(_set(run, "training.new_knob", 1)) != _id(run)


def test_versions_are_part_of_it() -> None:
    run = _entry()
    assert _id(run, torch="2.14.0") != _id(run)
    assert _id(run, **{"ai2-olmo-core": "3.1.0"}) != _id(run)


def test_the_eval_library_version_counts_when_downstream_tasks_are_scored() -> None:
    """Downstream scores come from ai2-olmo-eval's task definitions: a run scored with another
    release is another run; a run with no downstream task does not depend on it."""
    eval_v = "ai2-olmo-eval"
    assert eval_v in ident.VERSIONED
    run = _entry()
    assert _id(run, **{eval_v: "0.9.0"}) == _id(run, **{eval_v: None})
    scored = _set(run, "evaluation.downstream", ["piqa_rc_0shot"])
    assert _id(scored, **{eval_v: "0.9.0"}) != _id(scored, **{eval_v: "0.10.0"})


def test_token_files_are_named_by_content_not_by_path(tmp_path: Path) -> None:
    a = write_tokens(tmp_path / "a" / "train.bin", 5_000, seed=1)
    b = tmp_path / "mnt" / "other-name.bin"
    b.parent.mkdir()
    shutil.copy(a, b)
    link = tmp_path / "link.bin"
    os.symlink(a, link)
    c = write_tokens(tmp_path / "c.bin", 5_000, seed=2)
    fa, fb, fl, fc = (fingerprint(str(p)) for p in (a, b, link, c))
    assert fa is not None and fa == fb == fl and fa != fc
    # relative paths resolve against the plan's workdir
    assert fingerprint("a/train.bin", tmp_path) == fa
    assert fingerprint("https://bucket/x.npy") is None
    run = _entry()
    pa = _set(run, "training.data.paths", [str(a)])
    pb = _set(run, "training.data.paths", [str(b)])
    pc = _set(run, "training.data.paths", [str(c)])
    assert _id(pa, {str(a): fa}) == _id(pb, {str(b): fb})
    assert _id(pa, {str(a): fa}) != _id(pc, {str(c): fc})
    # a path without a fingerprint stays a path: it never matches other data by accident
    assert _id(pa) != _id(pb)


def test_sampled_fingerprint_of_a_large_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from olmoablate.plan import store as fp_mod

    monkeypatch.setattr(fp_mod, "FULL_HASH_BYTES", 1 << 10)
    monkeypatch.setattr(fp_mod, "BLOCK", 256)
    monkeypatch.setattr(fp_mod, "SAMPLES", 4)
    p = write_tokens(tmp_path / "big.bin", 20_000, seed=1)
    got = fp_mod.fingerprint(str(p))
    assert got is not None and got.startswith(f"sampled-sha256:{p.stat().st_size}:")
    data = bytearray(p.read_bytes())
    data[0] ^= 1
    q = tmp_path / "big2.bin"
    q.write_bytes(bytes(data))
    assert fp_mod.fingerprint(str(q)) != got


def _plan(tmp_path: Path, **head: Any) -> Plan:
    from olmoablate.testing import plans as sp

    write_tokens(tmp_path / "data" / "train.bin", 20_000, seed=1)
    write_tokens(tmp_path / "data" / "heldout.bin", 2_000, seed=2)
    runs = [
        run_entry("tiny-s0-baseline", "baseline", {}, pair_id="tiny-s0"),
        run_entry("tiny-s0-v", "v", {"depth_attention": {"stride": 2}}, pair_id="tiny-s0-v"),
    ]
    return sp.build_plan(runs, workdir=str(tmp_path), **head)


def test_plan_identities_ignore_spec_name_workdir_and_time(tmp_path: Path) -> None:
    p1 = _plan(tmp_path)
    i1 = identify(p1, p1.workdir, VERSIONS)
    other = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "data", other / "data")
    p2 = _plan(other, spec_name="another")
    assert p2.workdir != p1.workdir
    i2 = identify(p2, p2.workdir, VERSIONS)
    assert i1.runs == i2.runs
    assert i1.runs["tiny-s0-baseline"] != i1.runs["tiny-s0-v"]
    assert set(i1.data) == {"data/train.bin", "data/heldout.bin"}


def test_pair_keys_are_equal_and_mismatched_arms_are_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    got = identify(plan, plan.workdir, VERSIONS)
    pays = {r.run_id: got.payload_of(r.as_json()) for r in plan.runs}
    assert ident.pair_key(pays["tiny-s0-baseline"]) == ident.pair_key(pays["tiny-s0-v"])
    assert ident.identity_of(pays["tiny-s0-v"]) == got.runs["tiny-s0-v"]
    doc = plan.as_json()
    doc["runs"][1]["training"]["data"]["seed"] += 1  # an arm trained on another order
    bad = Plan.from_json(doc)
    with pytest.raises(Exception, match=r"training\.data\.seed"):
        identify(bad, bad.workdir, VERSIONS)


def test_identity_section_round_trips_and_old_plans_have_none(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.identity is None and "identity" not in plan.as_json()
    with_id = plan.model_copy(update={"identity": identify(plan, plan.workdir, VERSIONS)})
    again = Plan.from_json(with_id.as_json())
    assert again.identity == with_id.identity


def _leaves(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(doc, dict):
        return [
            leaf
            for k, v in doc.items()
            for leaf in _leaves(v, f"{prefix}.{k}" if prefix else k)
        ]
    return [(prefix, doc)]


def _other(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, list):
        return [*value, 1]
    return 1  # None


#: Leaves the payload names otherwise (data by content) or drops with a documented reason.
_NAMED_OTHERWISE = {"training.data.paths", "training.data.root", "evaluation.lm_sets"}


def test_every_leaf_not_excluded_changes_it() -> None:
    """The other half of the deny-list rule: no field is normalised away silently. Every leaf of
    a run entry that EXCLUDED does not name changes the identity when changed alone."""
    run = _entry()
    kept = [
        (dotted, v)
        for dotted, v in _leaves(run)
        if not any(dotted == e or dotted.startswith(e + ".") for e in ident.EXCLUDED)
        and not any(dotted == e or dotted.startswith(e + ".") for e in _NAMED_OTHERWISE)
    ]
    assert len(kept) > 50
    same = [d for d, v in kept if _id(_set(run, d, _other(v))) == _id(run)]
    assert same == []


def _planned(tmp_path: Path) -> dict[str, Any]:
    from olmoablate.testing import plans as sp

    write_tokens(tmp_path / "data" / "train.bin", 5_000, seed=1)
    write_tokens(tmp_path / "data" / "heldout.bin", 2_000, seed=2)
    runs = [
        run_entry("tiny-s0-baseline", "baseline", {}, pair_id="tiny-s0"),
        run_entry("tiny-s0-v", "v", {"depth_attention": {"stride": 2}}, pair_id="tiny-s0-v"),
    ]
    plan = sp.build_plan(runs, spec_name="p", workdir=str(tmp_path))
    plan = plan.model_copy(update={"identity": identify(plan, tmp_path, VERSIONS)})
    return plan.as_json()


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda i: i["runs"].pop("tiny-s0-v"), "identity"),
        (lambda i: i["runs"].update({"ghost": "ab"}), "identity"),
        (lambda i: i["reused"].update({"ghost": "a/runs/ghost"}), "identity"),
        (lambda i: i["reused"].update({"tiny-s0-baseline": "../../etc/runs/x"}), "reused"),
        (lambda i: i["reused"].update({"tiny-s0-baseline": "/abs/runs/x"}), "reused"),
        (lambda i: i["reused"].update({"tiny-s0-baseline": "a/b"}), "reused"),
    ],
)
def test_an_identity_section_that_does_not_fit_its_plan_is_refused(
    tmp_path: Path, edit: Any, says: str
) -> None:
    """plan.json's identity must name exactly its runs, and a reuse must be a run folder of the
    store (``<spec>/runs/<id>``): never a path out of it."""
    from olmoablate.errors import UserError

    doc = _planned(tmp_path)
    Plan.from_json(copy.deepcopy(doc))  # as written: fine
    edit(doc["identity"])
    with pytest.raises(UserError, match=says):
        Plan.from_json(doc)


@pytest.mark.parametrize("where", ["../../elsewhere/runs/x", "/abs/runs/x", "a/runs/../../x"])
def test_a_reused_marker_out_of_the_store_is_not_followed(tmp_path: Path, where: str) -> None:
    import json

    from olmoablate.plan.layout import ResultsDir

    doc = _planned(tmp_path)
    rd = ResultsDir(tmp_path / "results" / "p")
    rd.root.mkdir(parents=True)
    rd.plan_path.write_text(json.dumps(doc))
    own = rd.own_run("tiny-s0-baseline")
    own.path.mkdir(parents=True)
    own.reused.write_text(json.dumps({"from": where}))
    assert rd.run("tiny-s0-baseline").path == own.path
    assert rd.run("tiny-s0-baseline").reused_from is None


def test_the_fingerprint_cache_holds_a_data_set_of_many_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1B recipe's token files are hundreds of shards: planning again must not re-hash all of
    them because the cache kept only the last few dozen."""
    from olmoablate.plan import store as fp

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = []
    for i in range(100):  # more than the 64 it used to keep
        f = tmp_path / f"shard{i:03d}.bin"
        f.write_bytes(i.to_bytes(4, "little") * 16)
        files.append(f)
    for f in files:
        assert fp.fingerprint(str(f)) is not None
    hashed: list[Path] = []
    real = fp.sha256_file
    monkeypatch.setattr(fp, "sha256_file", lambda p: hashed.append(p) or real(p))
    for f in files:
        fp.fingerprint(str(f))
    assert hashed == []


def test_a_path_with_a_variable_unset_at_plan_time_keeps_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``${X}/a.bin`` with X unset where `plan` runs: relative (the job reads it from its plan's
    workdir), so two workdirs name two files."""
    from olmoablate.plan.store import name_of

    monkeypatch.delenv("OLMOABLATE_UNSET_X", raising=False)
    one, two = (name_of("${OLMOABLATE_UNSET_X}/a.bin", tmp_path / d) for d in ("w1", "w2"))
    assert one != two and one.startswith("path:") and str(tmp_path / "w1") in one
    assert name_of("s3://bucket/a.npy", tmp_path) == "path:s3://bucket/a.npy"
