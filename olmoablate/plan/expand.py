"""Expand a validated spec into runs and matched pairs: the plan.

One baseline run per (size, seed), shared by every variant's pair (same seed, data order,
budget: training it per variant would only burn compute); certificates are checked here, by the
job and by the report.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path
from typing import Any

from olmoablate import __version__
from olmoablate.errors import UserError
from olmoablate.io import sha256_of
from olmoablate.plan import accounting as acc
from olmoablate.plan.blocks import code_of
from olmoablate.plan.gate import design_record
from olmoablate.plan.identity import certificate_of, differences, shared_settings
from olmoablate.plan.layout import ResultsDir
from olmoablate.plan.load import LoadedSpec
from olmoablate.plan.names import group_id, run_id
from olmoablate.plan.planfile import PLAN_SCHEMA, Plan
from olmoablate.plan.schema import computes_in_bf16
from olmoablate.plan.tokens import narrowest_dtype, resolve_ids

#: (size, arm, steps) -> the run's cost and its blocks' code identity: the same for every seed
#: of one build, so `build_plan` computes them once per arm instead of once per seed.
CostMemo = dict[tuple[str, str, int], tuple[acc.RunCost, dict[str, Any]]]


class PairingError(UserError):
    """A pair whose arms differ in more than architecture (and the declared budget)."""


def resolve_loop_counts(raw: list[int | str], loops: int) -> list[int]:
    """Spec loop counts (ints or multiples of b like '2b') -> sorted ints, always including b."""
    out = {loops}
    for item in raw:
        if isinstance(item, int):
            out.add(item)
            continue
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)?\s*b\s*", item)
        factor = float(m.group(1)) if m and m.group(1) else 1.0
        out.add(max(1, round(factor * loops)))
    return sorted(out)


def _run_entry(
    ls: LoadedSpec,
    size: str,
    seed: int,
    arm: str,
    arch: dict[str, Any],
    budget_match: str,
    base_steps: int,
    steps: int,
    memo: CostMemo,
) -> dict[str, Any]:
    """One run entry. ``memo``: the cost and code identity of (size, arm, steps), which every
    seed of a build shares (computed once per build, not once per seed)."""
    st = ls.per_size[size]
    t = st.training
    dims = ls.dims[size]
    data = t.data.model_dump()
    data["seed"] = data["seed"] + (seed if data.pop("vary_with_seed") else 0)
    data["vocab_size"] = dims.vocab_size
    # EOS/PAD from the tokenizer file (validated by load_spec); the dtype OLMo-core will read.
    info, data["eos_token_id"], data["pad_token_id"] = resolve_ids(st, dims)
    data["tokenizer_sha256"] = info.sha256 or None
    data["dtype"] = narrowest_dtype(dims.vocab_size)
    schedule = t.schedule.model_dump(exclude={"warmup_fraction"})
    schedule["warmup_steps"] = t.schedule.warmup_for(base_steps)
    optimizer = t.optimizer.model_dump()
    optimizer["betas"] = list(optimizer["betas"])
    tokens = steps * t.global_batch_size
    # The spec's section as validated, with what `plan` resolves for this arm (the field list is
    # the model's: plan/resolved.py's RunTraining, derived from the spec's Training).
    training = {
        **t.model_dump(),
        "tokens": tokens,
        "microbatch_size": ls.microbatch[size],
        "steps": steps,
        "optimizer": optimizer,
        "schedule": schedule,
        "init_seed": t.init_seed + seed,
        "data": data,
    }
    topo = st.topology
    hit = memo.get((size, arm, steps))
    if hit is None:
        cost = acc.run_cost(
            dims,
            arch,
            seq_len=t.sequence_length,
            tokens_per_step=t.global_batch_size,
            steps=steps,
            microbatch_tokens=ls.microbatch[size],
            world_size=topo.world_size,
            sharded=topo.data_parallel != "ddp",
            bf16=computes_in_bf16(t.precision, topo),
            gpu_peak_tflops=topo.gpu_peak_tflops,
            assumed_mfu=topo.assumed_mfu,
            activation_checkpointing=topo.activation_checkpointing == "full",
        )
        hit = memo[(size, arm, steps)] = (cost, code_of(arch) if arch else {})
    cost, code = hit
    evaluation = st.evaluation.model_dump()
    slurm = st.slurm.model_dump()
    slurm["time_min"] = slurm.pop("time")
    run: dict[str, Any] = {
        "run_id": run_id(size, seed, arm),
        "group_id": group_id(size, seed),
        "pair_id": run_id(size, seed, arm) if arm != "baseline" else group_id(size, seed),
        "pairs": [],
        "size": size,
        "arm": arm,
        "seed": seed,
        "architecture": arch,
        "budget_match": budget_match,
        "size_dims": dims.as_dict(),
        "params": cost.params,
        "non_embedding_params": cost.non_embedding_params,
        "unique_params": cost.unique_params,
        "train_flops_per_token": cost.train_flops_per_token,
        "final_train_flops_per_token": cost.final_train_flops_per_token,
        "tokens": tokens,
        "steps": steps,
        "total_train_flops": cost.total_train_flops,
        "gpu_hours": round(cost.gpu_hours, 4),
        "peak_memory_gb": cost.peak_memory_gb,
        "optimizer_state_gb": cost.optimizer_state_gb,
        "training": training,
        "evaluation": evaluation,
        "topology": topo.model_dump(),
        "slurm": slurm,
    }
    if arch:
        run["code"] = {k: dict(v) for k, v in code.items()}
    if "looped" in arch:
        run["loop_counts"] = resolve_loop_counts(evaluation["loop_counts"], arch["looped"]["loops"])
    return run


def build_plan(ls: LoadedSpec, *, spec_path: str | None = None) -> Plan:
    """Every run and pair of the spec, with costs and certificates. Raises PairingError.
    Validated as a :class:`Plan` here: `plan` never writes one a later stage would reject."""
    spec = ls.spec
    runs: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    memo: CostMemo = {}
    for size in spec.sizes:
        t = ls.per_size[size].training
        base_steps = t.tokens // t.global_batch_size
        for seed in spec.seeds:
            base = _run_entry(
                ls, size, seed, "baseline", {}, "tokens", base_steps, base_steps, memo
            )
            runs.append(base)
            for name, arch_model in spec.variants.items():
                if arch_model.sizes is not None and size not in arch_model.sizes:
                    continue
                arch = arch_model.as_mapping()
                match = spec.budget.variants.get(name, spec.budget.match)
                steps = acc.variant_steps(
                    ls.dims[size], arch, match, t.sequence_length, t.global_batch_size, base_steps
                )
                var = _run_entry(ls, size, seed, name, arch, match, base_steps, steps, memo)
                runs.append(var)
                pairs.append(_pair(base, var, match))
    aa = aa_runs(ls, memo)
    runs.extend(aa)
    for run in runs:
        run["certificate"] = certificate_of(run)
    by_id = {r["run_id"]: r for r in runs}
    for pair in pairs:
        by_id[pair["baseline_run"]]["pairs"].append(pair["pair_id"])
        by_id[pair["variant_run"]]["pairs"].append(pair["pair_id"])

    raw_gate = ls.raw.get("gate")
    raw_gates = ls.raw.get("gates") if isinstance(ls.raw.get("gates"), dict) else {}
    gates = []
    for name, g, where in spec.all_gates():  # each pre-registered with its own hash
        block = g.model_dump()
        raw = raw_gates.get(name) if where[0] == "gates" else raw_gate
        gates.append(
            {
                "name": name,
                "gate": block,
                "gate_sha256": sha256_of(block),
                "gate_raw_sha256": sha256_of(raw) if raw is not None else None,
                **design_record(block, list(spec.seeds)),
                **({"ladder": ls.ladders[name].model_dump()} if name in ls.ladders else {}),
            }
        )
    doc = {
        "schema": PLAN_SCHEMA,
        "spec_name": spec.name,
        "description": spec.description,
        "spec_path": spec_path if spec_path is not None else str(ls.path),
        "workdir": os.getcwd(),
        "spec_sha256": ls.sha256,
        **({"overrides": list(ls.overrides)} if ls.overrides else {}),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "olmoablate_version": __version__,
        "sizes": list(spec.sizes),
        "seeds": list(spec.seeds),
        "variants": {k: v.as_mapping() for k, v in spec.variants.items()},
        "budget": spec.budget.model_dump(),
        # Per size: what each LM eval set holds (measured from its files at plan time), so the
        # report can check that every eval point scored the whole set.
        "eval_sets": ls.eval_sets,
        "gates": gates,
        "aa_runs": [r["run_id"] for r in aa],
        "accounting": {
            "flops_convention": "olmo-core 3.0 num_flops_per_token (6 x params + causal/SWA attention), training",
            "gpu_hours": "total_train_flops / (gpu_peak_tflops * assumed_mfu) per topology",
            "peak_memory_gb": "estimate: fp32 states + AdamW (sharded under FSDP) + activations + logits",
        },
        "pairs": pairs,
        "runs": runs,
    }
    return Plan.from_json(doc, where=f"{ls.path} (the plan it expands to)")


def aa_seeds(seeds: list[int], k: int) -> list[int]:
    """The k seeds of the A/A baselines: the next integers above the spec's seeds."""
    start = max(seeds) + 1
    return list(range(start, start + k))


def aa_runs(ls: LoadedSpec, memo: CostMemo) -> list[dict[str, Any]]:
    """``gate.noise.measure.aa_seeds: k``: k extra baselines at the stage size with other seeds.
    Why plain baselines: an A/A run is the baseline that seed would have (adding the seed later
    reuses it); ``role: aa`` marks it as in no pair."""
    gate = ls.spec.gate
    if gate is None or gate.noise.measure is None or gate.stage not in ls.per_size:
        return []
    if len(ls.spec.seeds) >= 2:  # the gate uses the paired seeds' spread, never these (issue 23)
        return []
    size = gate.stage
    t = ls.per_size[size].training
    steps = t.tokens // t.global_batch_size
    out = []
    for seed in aa_seeds(list(ls.spec.seeds), gate.noise.measure.aa_seeds):
        run = _run_entry(ls, size, seed, "baseline", {}, "tokens", steps, steps, memo)
        run["role"] = "aa"
        out.append(run)
    return out


def _pair(base: dict[str, Any], var: dict[str, Any], match: str) -> dict[str, Any]:
    check_pair(base, var, match)
    differs = ["architecture"]
    if base["tokens"] != var["tokens"]:
        differs.append("tokens")
    return {
        "pair_id": var["pair_id"],
        "group_id": var["group_id"],
        "size": var["size"],
        "seed": var["seed"],
        "variant": var["arm"],
        "baseline_run": base["run_id"],
        "variant_run": var["run_id"],
        "budget_match": match,
        "certificate": certificate_of(var, match),
        "differs": differs,
    }


def check_pair(base: dict[str, Any], var: dict[str, Any], match: str) -> None:
    """Fail unless the two arms agree on every shared setting (architecture/budget excepted)."""
    diff = differences(shared_settings(base, match), shared_settings(var, match))
    if diff:
        raise PairingError(
            f"pair {var['pair_id']}: arms differ in more than architecture"
            f"{' and token budget' if match == 'flops' else ''}: {', '.join(diff)}"
        )


def results_dir(spec_name: str, results_root: str | Path = "results") -> ResultsDir:
    return ResultsDir.for_spec(spec_name, results_root)
