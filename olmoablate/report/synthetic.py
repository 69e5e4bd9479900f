"""Synthetic results folders with known truth, for the report's tests and benchmark.

Why in the package (not only in tests): ``bench/report.py`` and the screenshot script need the same
generator, and it documents by example exactly what the report reads: ``plan.json`` as described
in docs/design.md and per-run ``metrics.jsonl`` / ``fingerprints.jsonl`` / ``status.json`` /
``summary.json`` in the training job's format (one JSON object per line, ``json.dumps`` style).
Nothing here is used when reporting real results.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmoablate.contract.certificate import certificate_of
from olmoablate.io import sha256_of, write_json_atomic, write_text_atomic


@dataclass
class ArmTruth:
    """What one synthetic run looks like."""

    offset: float = 0.0  # added to train and eval loss (negative = better than baseline)
    train_noise: float = 0.02
    eval_noise: float = 0.001
    spikes_at: Sequence[int] = ()  # steps with a +1.5 loss spike
    step_time_s: float = 0.5
    peak_memory_gb: float = 40.0
    decode_latency_s: float | None = None
    state: str = "completed"
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


def _entry(
    spec: SynthSpec, size: str, seed: int, arm: str, arch: Mapping[str, Any], pairs: list[str]
) -> dict[str, Any]:
    run_id = f"{size}-s{seed}-{arm}"
    looped = "looped" in arch
    params = 1_000_000_000 if not looped else 400_000_000
    training = {
        "sequence_length": 128,
        "tokens": spec.steps * spec.global_batch_size,
        "global_batch_size": spec.global_batch_size,
        "microbatch_size": 1024,
        "steps": spec.steps,
        "optimizer": {"name": "adamw", "lr": 0.003},
        "stability": {
            "spike_window": 50,
            "spike_factor": 3.0,
            "max_spikes": 20,
            "stop_on_nonfinite": True,
        },
        "init_seed": seed,
        "data": {"paths": ["data/demo/train.bin"], "seed": 34521},
    }
    entry: dict[str, Any] = {
        "run_id": run_id,
        "group_id": f"{size}-s{seed}",
        "pair_id": pairs[0] if pairs else run_id,
        "pairs": pairs,
        "size": size,
        "arm": arm,
        "seed": seed,
        "architecture": dict(arch),
        "size_dims": {"name": size, "d_model": 2048, "n_layers": 16},
        "params": params,
        "non_embedding_params": params - 200_000_000,
        "unique_params": params,
        "train_flops_per_token": 6 * params,
        "tokens": training["tokens"],
        "steps": spec.steps,
        "total_train_flops": 6 * params * training["tokens"],
        "gpu_hours": 1.0,
        "peak_memory_gb": 40.0,
        "optimizer_state_gb": params * 8 / 1e9,
        "training": training,
        "evaluation": {"interval": spec.eval_interval, "lm_sets": {spec.eval_set: ["x.bin"]}},
        "topology": {"nodes": 1, "gpus_per_node": 8},
    }
    # As `plan` does: a run's own certificate under its own budget rule (the baseline always
    # keeps the spec's token budget; variants follow the spec's budget.match).
    entry["budget_match"] = "tokens" if arm == "baseline" else spec.budget_match
    entry["certificate"] = certificate_of(entry)
    return entry


def write_plan(root: Path, spec: SynthSpec) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    for size in spec.sizes:
        for seed in spec.seeds:
            group = f"{size}-s{seed}"
            pids = [f"{group}-{v}" for v in spec.variants]
            runs.append(_entry(spec, size, seed, "baseline", {}, pids))
            for v, arch in spec.variants.items():
                runs.append(_entry(spec, size, seed, v, arch, [f"{group}-{v}"]))
                pairs.append(
                    {
                        "pair_id": f"{group}-{v}",
                        "group_id": group,
                        "size": size,
                        "seed": seed,
                        "variant": v,
                        "baseline_run": f"{group}-baseline",
                        "variant_run": f"{group}-{v}",
                        "budget_match": spec.budget_match,
                        "certificate": certificate_of(runs[-1], spec.budget_match),
                        "differs": ["architecture"]
                        + (["tokens"] if spec.budget_match == "flops" else []),
                    }
                )
    gate = {"stage": spec.sizes[0], **spec.gate}
    first = max(spec.seeds) + 1
    for seed in range(first, first + spec.aa_seeds):
        aa = _entry(spec, str(gate["stage"]), seed, "baseline", {}, [])
        aa["role"] = "aa"
        aa["certificate"] = certificate_of(aa)
        runs.append(aa)
    plan = {
        "schema": 1,
        "spec_name": spec.name,
        "spec_path": f"specs/{spec.name}.yaml",
        "spec_sha256": "0" * 64,
        "created": "2026-01-01T00:00:00Z",
        "olmoablate_version": "0.1.0",
        "budget": {"match": spec.budget_match},
        "gate": gate,
        "gate_sha256": sha256_of(gate),
        "gate_raw_sha256": sha256_of(gate),
        "accounting": {"gpu_peak_tflops": 989.0, "assumed_mfu": 0.4},
        "pairs": pairs,
        "runs": runs,
    }
    write_json_atomic(root / "plan.json", plan)
    return plan


def write_run(root: Path, spec: SynthSpec, entry: Mapping[str, Any], truth: ArmTruth) -> None:
    """metrics.jsonl, fingerprints.jsonl, status.json and summary.json for one run."""
    rid = str(entry["run_id"])
    rd = root / "runs" / rid
    rd.mkdir(parents=True, exist_ok=True)
    seed = int(entry["seed"])
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
                f'"throughput/total petaflops": {s * gbs * float(entry["train_flops_per_token"]) / 1e15!r}, '
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
    write_text_atomic(rd / "metrics.jsonl", text)
    fp = "".join(
        f'{{"step": {s}, "tokens": {s * gbs}, "sha256": "{hashlib.sha256(f"{seed}-{s}{truth.data_salt}".encode()).hexdigest()}"}}\n'
        for s in steps.tolist()
    )
    write_text_atomic(rd / "fingerprints.jsonl", fp)
    status = {
        "run_id": rid,
        "state": truth.state,
        "step": last,
        "total_steps": spec.steps,
        "tokens": last * gbs,
        "last_loss": float(loss[-1]),
        "tokens_per_s": gbs / truth.step_time_s,
        "attempt": 1,
        "diverged_at_step": last if truth.state == "diverged" else None,
        "reason": None,
        "updated": "2026-01-01T00:00:00Z",
    }
    write_json_atomic(rd / "status.json", status)
    if truth.state == "completed":
        summary: dict[str, Any] = {
            "params": entry["params"],
            "unique_params": entry["unique_params"],
            "peak_memory_gb": truth.peak_memory_gb,
            "mean_step_time_s": truth.step_time_s,
            "tokens_per_s": gbs / truth.step_time_s,
            "steps": last,
            "tokens": last * gbs,
            "wall_time_s": truth.step_time_s * last,
            "optimizer_state_bytes": int(entry["params"]) * 8,
            "loss_spikes": len(truth.spikes_at),
        }
        if truth.host is not None:
            summary["hostname"] = truth.host
        if truth.decode_latency_s is not None:
            summary["decode_latency_s"] = truth.decode_latency_s
        write_json_atomic(rd / "summary.json", summary)


def make_results(
    root: Path, spec: SynthSpec, truths: Mapping[str, ArmTruth] | None = None
) -> dict[str, Any]:
    """Write a full results folder; ``truths`` maps arm name (or run_id) to its ArmTruth."""
    truths = truths or {}
    plan = write_plan(root, spec)
    for entry in plan["runs"]:
        truth = truths.get(entry["run_id"]) or truths.get(entry["arm"]) or ArmTruth()
        write_run(root, spec, entry, truth)
    return plan
