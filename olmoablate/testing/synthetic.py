"""Synthetic results folders with known truth, for the report's tests and benchmark.

Why in the package (not only in tests): ``bench/report.py`` and the screenshot script need the same
generator, and it documents by example exactly what the report reads: a contract ``Plan`` (built
by :mod:`olmoablate.testing.plans`, the one synthetic-plan builder the training tests use
too) and per-run ``metrics.jsonl`` / ``fingerprints.jsonl`` / ``status.json`` / ``summary.json``
in the training job's format (one JSON object per line, ``json.dumps`` style), at the paths of
``ResultsDir``. Nothing here is used when reporting real results.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from olmoablate.io import write_text_atomic
from olmoablate.plan import sizes
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.names import PLAN_FILE, RunState
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.run.files import RunStatus, RunSummary
from olmoablate.testing import plans as sp

#: The ``updated`` time of every synthetic status.json (fixed: synthetic folders are reproducible).
SYNTHETIC_TIME = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass
class ArmTruth:
    """What one synthetic run looks like."""

    offset: float = 0.0  # added to train and eval loss (negative = better than baseline)
    train_noise: float = 0.02
    eval_noise: float = 0.001
    spikes_at: Sequence[int] = ()  # steps with a +1.5 loss spike
    step_time_s: float = 0.5
    peak_memory_gb: float = 40.0
    state: str = RunState.COMPLETED
    stop_at: int | None = None  # last step written (partial run)
    nonfinite_at: int | None = None
    data_salt: str = ""  # changes the data fingerprints (a broken pair)
    loop_eval: Mapping[int, float] | None = None  # looped arms: loops -> extra loss at eval
    h_norms: Sequence[float] = ()
    duplicate_steps: Sequence[int] = ()  # rows written twice (requeue); the second one wins
    truncate_last: bool = False
    seed_offset: float = 0.0  # seed-to-seed variation of the effect
    step_time_jitter: float = 0.0  # relative sd of each step's time (iid around step_time_s)
    host: str | None = None  # summary.json "hostname" (the node the run was timed on)
    execution: Mapping[str, Any] | None = None  # summary.json "execution" (what ran)


@dataclass
class SynthSpec:
    name: str = "synth"
    sizes: Sequence[str] = ("1B",)
    seeds: Sequence[int] = (0,)
    variants: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {"sn_da": {"siamese_norm": {"output_norms": False}}}
    )
    steps: int = 200
    eval_interval: int = 20
    global_batch_size: int = 2048
    gate: Mapping[str, Any] = field(default_factory=dict)
    budget_match: str = "tokens"
    eval_set: str = "demo-heldout"
    rich_rows: bool = True  # all the keys OLMo-core logs, not only the ones the report reads
    aa_seeds: int = 0  # A/A baselines at the stage size (role aa), as gate.noise.measure adds
    #: parameters per size (a scaling ladder's rungs); default 1e9 (4e8 for a looped arm)
    size_params: Mapping[str, int] = field(default_factory=dict)
    #: a variant's training FLOPs per token as a multiple of the baseline's (its extra compute)
    flops_factor: Mapping[str, float] = field(default_factory=dict)
    #: a multiplier gate's ladder record (plan.json's ``GateEntry.ladder``): ``rungs`` (sizes)
    #: and ``targets``, each a size of ``sizes`` (priced from its runs) or a full target record
    ladder: Mapping[str, Any] | None = None


def _dims(size: str) -> dict[str, Any]:
    """The OLMo 3 preset of ``size`` when there is one (1B, 3B, 7B, ...), else a tiny custom size."""
    if size in sizes.PRESET_NAMES:
        return sizes.preset(size).as_dict()
    return {**sp.TINY_DIMS, "name": size}


def _entry(
    spec: SynthSpec,
    size: str,
    seed: int,
    arm: str,
    arch: Mapping[str, Any],
    pairs: list[str],
    role: str | None = None,
) -> RunEntry:
    run_id = f"{size}-s{seed}-{arm}"
    params = spec.size_params.get(size, 1_000_000_000 if "looped" not in arch else 400_000_000)
    tokens = spec.steps * spec.global_batch_size
    per_token = round(6 * params * spec.flops_factor.get(arm, 1.0))
    # As `plan` does: the baseline always keeps the spec's token budget; variants follow the
    # spec's budget.match (here with the same steps, so only the certificate rule differs).
    return sp.make_run_entry(
        run_id,
        arm,
        arch,
        seed=seed,
        group_id=f"{size}-s{seed}",
        pair_id=pairs[0] if pairs else run_id,
        pairs=pairs,
        dims=_dims(size),
        steps=spec.steps,
        seq=128,
        budget_match="tokens" if arm == "baseline" else spec.budget_match,
        role=role,
        costs={
            "params": params,
            "non_embedding_params": params - 200_000_000,
            "unique_params": params,
            "train_flops_per_token": per_token,
            "final_train_flops_per_token": per_token,
            "total_train_flops": per_token * tokens,
            "gpu_hours": 1.0,
            "peak_memory_gb": 40.0,
            "optimizer_state_gb": params * 8 / 1e9,
        },
        training={
            "tokens": tokens,
            "global_batch_size": spec.global_batch_size,
            "microbatch_size": 1024,
            "optimizer": {"lr": 0.003},
            "init_seed": seed,
            "data": {"paths": ["data/demo/train.bin"], "tokenizer": "dolma2"},
        },
        evaluation={
            "interval": spec.eval_interval,
            "lm_sets": {spec.eval_set: ["x.bin"]},
            "max_eval_tokens": None,
        },
        topology={"gpus_per_node": 8},
    )


def synthetic_plan(spec: SynthSpec) -> Plan:
    """The contract :class:`Plan` of ``spec``: per size and seed one baseline and every variant,
    then ``aa_seeds`` A/A baselines at the gate's stage size (as ``gate.noise.measure`` adds)."""
    runs: list[RunEntry] = []
    for size in spec.sizes:
        for seed in spec.seeds:
            group = f"{size}-s{seed}"
            runs.append(
                _entry(spec, size, seed, "baseline", {}, [f"{group}-{v}" for v in spec.variants])
            )
            for v, arch in spec.variants.items():
                runs.append(_entry(spec, size, seed, v, arch, [f"{group}-{v}"]))
    gate = {"stage": spec.sizes[0], **spec.gate}
    first = max(spec.seeds) + 1
    for seed in range(first, first + spec.aa_seeds):
        runs.append(_entry(spec, str(gate["stage"]), seed, "baseline", {}, [], role="aa"))
    ladders = None
    if spec.ladder is not None:
        name = str(gate.get("variant") or "gate")
        targets = [_target(runs, t) for t in spec.ladder["targets"]]
        ladders = {name: {"rungs": list(spec.ladder["rungs"]), "targets": targets}}
    return sp.build_plan(
        runs, spec_name=spec.name, gate=gate, budget_match=spec.budget_match, ladders=ladders
    )


def _target(runs: Sequence[RunEntry], target: str | Mapping[str, Any]) -> dict[str, Any]:
    """A ladder target priced from the planned runs of its size (as `plan` prices one)."""
    if not isinstance(target, str):
        return dict(target)
    b = next(r for r in runs if r.size == target and r.is_baseline and not r.is_aa)
    v = next(r for r in runs if r.size == target and not r.is_baseline)
    return {
        "size": target, "tokens_b": b.tokens, "tokens_v": v.tokens,
        "flops_b": b.total_train_flops, "flops_v": v.total_train_flops,
        "params_b": b.params, "params_v": v.unique_params,
    }  # fmt: skip


def ladder_truths(
    spec: SynthSpec, plan: Plan, truth: Any, rng: np.random.Generator, last_n: int = 3
) -> dict[str, ArmTruth]:
    """Per run: the ``ArmTruth`` whose gate value (the held-out loss over the last ``last_n``
    eval points) is drawn from ``truth`` (``olmoablate.scaling.Truth``) at the run's planned
    FLOPs: each seed pair's average and difference as ``scaling.simulate`` draws them. The
    synthetic eval noise is off, so the report reads exactly these losses."""
    from olmoablate import scaling

    level = eval_level(spec, last_n)
    out: dict[str, ArmTruth] = {}
    for p in plan.pairs:
        b, v = plan.run(p.baseline_run), plan.run(p.variant_run)
        design = scaling.Rung(
            p.size, float(b.total_train_flops), float(v.total_train_flops), float(b.tokens),
            float(v.tokens), float(b.params), float(v.unique_params), {}, {},
        )  # fmt: skip
        drawn = scaling.simulate(truth, [design], 1, rng)[0]
        for run, loss in ((b, drawn.loss_b[0]), (v, drawn.loss_v[0])):
            out.setdefault(run.run_id, ArmTruth(offset=loss - level, eval_noise=0.0))
    return out


def write_plan(root: Path, spec: SynthSpec) -> dict[str, Any]:
    """Write ``root/plan.json``; return it as plan.json holds it (tests edit and rewrite it)."""
    plan = synthetic_plan(spec)
    plan.write(root / PLAN_FILE)
    return plan.as_json()


def eval_level(spec: SynthSpec, last_n: int = 3) -> float:
    """The noise-free mean of the held-out loss over the last ``last_n`` eval points of a run
    with offset 0: a run's gate value is this plus its ``ArmTruth.offset`` (and the seed noise),
    so a test sets a run's loss (e.g. a scaling law's) with ``offset = loss - eval_level``."""
    steps = np.arange(1, spec.steps + 1)
    evals = steps[(steps % spec.eval_interval == 0) | (steps == spec.steps)][-last_n:]
    return float(np.mean(2.5 + 8.0 * np.exp(-evals / max(spec.steps / 5.0, 1.0)) - 0.3))


def write_run(
    root: Path, spec: SynthSpec, entry: RunEntry | Mapping[str, Any], truth: ArmTruth
) -> None:
    """metrics.jsonl, fingerprints.jsonl, status.json and summary.json for one run."""
    run = entry if isinstance(entry, RunEntry) else RunEntry.model_validate(dict(entry))
    rid = run.run_id
    rd = ResultsDir(root).run(rid)
    rd.path.mkdir(parents=True, exist_ok=True)
    seed = run.seed
    rng = np.random.default_rng(int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16))
    last = truth.stop_at or spec.steps
    steps = np.arange(1, last + 1)
    gbs = spec.global_batch_size
    offset = truth.offset + truth.seed_offset * (seed - 0.5 * (len(spec.seeds) - 1))
    base_curve = 2.5 + 8.0 * np.exp(-steps / max(spec.steps / 5.0, 1.0))
    loss = base_curve + offset + rng.normal(0.0, truth.train_noise, steps.size)
    for s in truth.spikes_at:
        if 1 <= s <= last:
            loss[s - 1] += 1.5
    gnorm = np.abs(rng.normal(0.8, 0.1, steps.size))
    if truth.nonfinite_at and truth.nonfinite_at <= last:
        loss[truth.nonfinite_at - 1] = math.nan
    eval_rng = np.random.default_rng(seed * 7919 + 17)  # shared by both arms: paired eval noise
    shared_eval_noise = eval_rng.normal(0.0, truth.eval_noise, steps.size)
    own_eval_noise = rng.normal(0.0, truth.eval_noise, steps.size)
    times = truth.step_time_s * (1.0 + rng.normal(0.0, truth.step_time_jitter, steps.size))
    lines: list[str] = []
    es = spec.eval_set
    for i, s in enumerate(steps.tolist()):
        lv = float(loss[i])
        lv_txt = "NaN" if math.isnan(lv) else repr(lv)
        row = f'{{"step": {s}, "tokens": {s * gbs}, "train/CE loss": {lv_txt}, '
        if spec.rich_rows:
            ppl = math.exp(min(lv, 50.0)) if math.isfinite(lv) else math.nan
            row += (
                f'"train/PPL": {ppl!r}, "train/Z loss": {0.0001 * lv!r}, '
                f'"train/masked labels (%)": 0.0, "optim/LR (group 0)": {0.003 * min(1.0, s / 10)!r}, '
                f'"optim/step skipped": 0.0, "throughput/total tokens": {float(s * gbs)!r}, '
                f'"throughput/device/TPS": {gbs / truth.step_time_s!r}, '
                f'"throughput/device/MFU": 0.4123, '
                f'"throughput/total petaflops": {s * gbs * float(run.train_flops_per_token) / 1e15!r}, '
            )
        row += f'"optim/total grad norm": {float(gnorm[i])!r}, '
        for t, h in enumerate(truth.h_norms):
            row += f'"train/H norm (loop {t + 1})": {h + 0.001 * i!r}, '
        if s % spec.eval_interval == 0 or s == spec.steps:
            ev = float(
                base_curve[i] + offset - 0.3 + shared_eval_noise[i] + own_eval_noise[i] * 0.3
            )
            row += f'"eval/lm/{es}/CE loss": {ev!r}, "eval/lm/{es}/PPL": {math.exp(ev)!r}, '
            row += f'"eval/downstream/hellaswag/accuracy": {0.3 - 0.1 * offset!r}, '
            for n, extra in (truth.loop_eval or {}).items():
                row += f'"eval/lm/{es}/CE loss (loops={n})": {ev + extra!r}, '
        row += (
            f'"step_time_s": {float(times[i])!r}, "step_cpu_time_s": {float(times[i])!r}, '
            f'"peak_memory_gb": {truth.peak_memory_gb!r}}}\n'
        )
        if s in truth.duplicate_steps:
            # the attempt before a requeue logged this step too; the resumed job's row comes last
            lines.append(row.replace(f'"train/CE loss": {lv_txt}', '"train/CE loss": 99.0', 1))
        lines.append(row)
    text = "".join(lines)
    if truth.truncate_last:
        text += '{"step": ' + str(last + 1) + ', "tokens": 12'
    write_text_atomic(rd.metrics, text)
    fp = "".join(
        f'{{"step": {s}, "tokens": {s * gbs}, "sha256": "{hashlib.sha256(f"{seed}-{s}{truth.data_salt}".encode()).hexdigest()}"}}\n'
        for s in steps.tolist()
    )
    write_text_atomic(rd.fingerprints, fp)
    status = {
        "run_id": rid,
        "state": truth.state,
        "step": last,
        "total_steps": spec.steps,
        "tokens": last * gbs,
        "last_loss": float(loss[-1]),
        "tokens_per_s": gbs / truth.step_time_s,
        "attempt": 1,
        "diverged_at_step": last if truth.state == RunState.DIVERGED else None,
        "reason": None,
    }
    RunStatus.model_validate(status).write(rd.status, updated=SYNTHETIC_TIME)
    if truth.state == RunState.COMPLETED:
        summary: dict[str, Any] = {
            "params": run.params,
            "unique_params": run.unique_params,
            "peak_memory_gb": truth.peak_memory_gb,
            "mean_step_time_s": truth.step_time_s,
            "tokens_per_s": gbs / truth.step_time_s,
            "steps": last,
            "tokens": last * gbs,
            "wall_time_s": truth.step_time_s * last,
            "optimizer_state_bytes": run.params * 8,
            "loss_spikes": len(truth.spikes_at),
        }
        if truth.host is not None:
            summary["hostname"] = truth.host
        if truth.execution is not None:
            summary["execution"] = dict(truth.execution)
        RunSummary.model_validate(summary).write(rd.summary)


def make_results(
    root: Path, spec: SynthSpec, truths: Mapping[str, ArmTruth] | None = None
) -> dict[str, Any]:
    """Write a full results folder; ``truths`` maps arm name (or run_id) to its ArmTruth."""
    truths = truths or {}
    doc = write_plan(root, spec)
    for run in doc["runs"]:
        truth = truths.get(run["run_id"]) or truths.get(run["arm"]) or ArmTruth()
        write_run(root, spec, run, truth)
    return doc


# Checks `olmoablate.results` frames against the files `report` wrote (shared by the synthetic
# test in test_results.py and the real end-to-end folder in e2e/test_pipeline.py).


def _same(a: Any, b: Any) -> bool:
    na = a is None or (isinstance(a, float) and math.isnan(a))
    nb = b is None or (isinstance(b, float) and math.isnan(b))
    if na or nb:
        return na and nb
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a) == str(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return str(a) == str(b)


def check_against_report(root: Path) -> Any:
    """Every DataFrame of results.load(root) against the files `report` wrote into root."""
    from olmoablate import results

    rs = results.load(root)
    csv = pd.read_csv(root / "comparison.csv")
    comp = rs.comparisons
    assert list(comp.columns) == list(csv.columns)
    assert len(comp) == len(csv) > 0
    for (_, a), (_, b) in zip(comp.iterrows(), csv.iterrows(), strict=True):
        for col in csv.columns:
            assert _same(a[col], b[col]), (col, a[col], b[col])

    gate = json.loads((root / "gate.json").read_text())
    assert rs.gate_json["verdict"] == gate["verdict"]
    records = gate.get("gates") or [gate]
    want = [
        (g["name"], v["variant"], v["verdict"], c.get("name"), c.get("outcome"))
        + ((c.get("estimate") or {}).get("mean"), g["verdict"])
        for g in records
        for v in g["variants"]
        for c in (v.get("checks") or [{}])
    ]
    cols = ["gate", "variant", "verdict", "check", "outcome", "estimate.mean", "gate_verdict"]
    got = [tuple(r) for r in rs.gate[cols].itertuples(index=False)]
    assert len(got) == len(want) and all(
        all(_same(a, b) for a, b in zip(g, w, strict=True)) for g, w in zip(got, want, strict=True)
    ), (got, want)
    # a multiplier gate's ladder frame: gate.json's rung multipliers and projections, every unit
    lad = rs.ladder
    for g in records:
        for variant, rec in (g.get("ladder") or {}).items():
            for unit, fit in rec["fits"].items():
                mine = lad[(lad.gate == g["name"]) & (lad.variant == variant) & (lad.unit == unit)]
                rows = {(r.size, r.projected): r for r in mine.itertuples()}
                points = [(x, False) for x in fit["rungs"]]
                for x, projected in points + [(x, True) for x in fit["projections"]]:
                    r, m = rows[(x["size"], projected)], x["multiplier"] or {}
                    assert _same(r.multiplier, m.get("estimate")), (unit, x["size"])
                    assert _same(r.lower, m.get("lower")) and _same(r.upper, m.get("upper"))
    valid = {p["pair_id"]: p["valid"] for g in records for p in g["pairs"]}
    pairs = rs.pairs.set_index("pair")
    for pid, ok in valid.items():
        assert bool(pairs.loc[pid, "valid"]) == ok

    # independent path: the long-form metrics hold the very values the comparison rows report
    m = rs.metrics
    assert {"run", "pair", "size", "seed", "arm", "step", "tokens", "train_flops"} <= set(m)
    finals = comp[comp["kind"] == "eval"]
    assert len(finals) > 0
    for _, row in finals.iterrows():
        p = pairs.loc[row["pair_id"]]
        for arm, run in (("baseline", p["baseline_run"]), ("variant", p["variant_run"])):
            hit = m[
                (m["pair"] == row["pair_id"])
                & (m["run"] == run)
                & (m["metric"] == row["metric"])
                & (m["tokens"] == row["tokens"])
            ]
            assert len(hit) == 1, (row["pair_id"], run, row["metric"])
            assert hit["value"].iloc[0] == row[arm]
        cur = rs.matched[
            (rs.matched["pair"] == row["pair_id"]) & (rs.matched["metric"] == row["metric"])
        ]
        assert cur["tokens"].iloc[-1] == row["tokens"] and cur["delta"].iloc[-1] == row["delta"]
    # a baseline shared by several pairs appears under each of them, once per step
    for pid, p in pairs.iterrows():
        both = m[m["pair"] == pid]
        assert set(both["run"].unique()) <= {p["baseline_run"], p["variant_run"]}
    once = m.drop_duplicates(["run", "step", "metric"])
    assert len(once) == len(m[["run", "step", "metric"]].drop_duplicates())
    return rs
