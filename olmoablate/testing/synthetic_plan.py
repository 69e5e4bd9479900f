"""Synthetic plans as real contract objects: ``RunEntry`` and ``Plan`` from a few knobs.

Why one builder: the training tests, the report's tests and ``bench/report.py`` each used to hand
-type their own plan.json entries (three generators, each with its own subset of the fields and
its own idea of a certificate). Here every entry and plan goes through the contract's models
(:mod:`olmoablate.contract.plan`), so whatever a test or benchmark feeds a stage is a plan that
``Plan.load`` accepts, with every field `plan` writes, certificates computed by ``certificate_of``
on the entry exactly as plan.json holds it, and pairs derived the way `plan` derives them (a
variant's baseline is the baseline of its group; the pair records the variant's certificate under
the pair's budget rule). The sections the spec owns (optimizer, evaluation, topology, stability,
W&B) take the spec's own defaults from :mod:`olmoablate.contract.schema`; only the plan-only
fields, which have no defaults, are spelled out here. Nothing here is used for real results.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from olmoablate.contract.certificate import certificate_of
from olmoablate.contract.gatespec import LEGACY_FLOOR, design_record
from olmoablate.contract.plan import PLAN_SCHEMA, GateEntry, Pair, Plan, RunEntry
from olmoablate.contract.schema import COMPILE_DEFAULT, Gate
from olmoablate.io import sha256_of

#: The tiny CPU model of the training tests: vocabulary, EOS and PAD of their synthetic tokens.
VOCAB = 1024
EOS = 1022
PAD = 1023

TINY_DIMS: dict[str, Any] = {
    "name": "tiny",
    "d_model": 64,
    "n_layers": 4,
    "n_heads": 4,
    "n_kv_heads": 2,
    "mlp_hidden_size": 128,
    "sliding_window": 32,
    "vocab_size": VOCAB,
    "preset": False,
}

CREATED = "2026-01-01T00:00:00Z"  # fixed, so synthetic plans are reproducible byte for byte


def deep_update(dst: dict[str, Any], src: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``src`` into ``dst`` (nested mappings merged key by key, everything else replaced)."""
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            deep_update(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def entry_dict(
    run_id: str,
    arm: str,
    architecture: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    group_id: str | None = None,
    pair_id: str | None = None,
    pairs: Sequence[str] | None = None,
    dims: Mapping[str, Any] | None = None,
    steps: int = 12,
    seq: int = 64,
    batch_seqs: int = 8,
    micro_seqs: int = 4,
    budget_match: str = "tokens",
    role: str | None = None,
    costs: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
    evaluation: Mapping[str, Any] | None = None,
    topology: Mapping[str, Any] | None = None,
    slurm: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One run entry as a plain dict (before validation; ``certificate`` not yet computed).

    ``training``/``evaluation``/``topology``/``slurm`` are deep-merged overrides; ``costs``
    replaces the accounting fields (params, FLOPs, GPU-hours, memory; all 0 by default).
    """
    size_dims = {**TINY_DIMS, **(dims or {})}
    size = str(size_dims["name"])
    group = group_id or f"{size}-s{seed}"
    pid = pair_id or (f"{group}-variant" if role is None else run_id)
    gbs = seq * batch_seqs
    vocab = int(size_dims["vocab_size"])
    tr: dict[str, Any] = {
        "sequence_length": seq,
        "tokens": gbs * steps,
        "global_batch_size": gbs,
        "microbatch_size": seq * micro_seqs,
        "steps": steps,
        "optimizer": {"name": "adamw", "lr": 0.01},
        "schedule": {"name": "cosine", "warmup_steps": 2, "alpha_f": 0.1, "decay_fraction": 0.2},
        "grad_clip": 1.0,
        "z_loss": 1e-5,
        "precision": "auto",
        "compile": COMPILE_DEFAULT,
        "init_seed": 0,
        "threads": 1,
        "data": {
            "paths": ["data/train.bin"],
            "mix": None,
            "root": None,
            "tokenizer": "synthetic",
            "eos_token_id": min(EOS, vocab - 2),
            "pad_token_id": min(PAD, vocab - 1),
            "seed": 34521,
            "vocab_size": vocab,
            "tokenizer_sha256": None,
            "dtype": "uint16" if vocab <= 65536 else "uint32",
        },
        "checkpoint_interval": 5,
        "stability": {"max_spikes": 20},
        "wandb": {"mode": "disabled"},
    }
    deep_update(tr, training or {})
    ev: dict[str, Any] = {
        "interval": 6,
        "lm_sets": {"synthetic-heldout": ["data/heldout.bin"]},
        "max_eval_tokens": 4 * gbs,
    }
    deep_update(ev, evaluation or {})
    topo: dict[str, Any] = {"nodes": 1, "gpus_per_node": 0, "cpu_processes": 1}
    deep_update(topo, topology or {})
    sl: dict[str, Any] = {
        "partition": None,
        "account": None,
        "qos": None,
        "constraint": None,
        "exclusive": False,
        "cpus_per_task": 2,
        "mem_gb": None,
        "max_num_timeout": 3,
        "signal_delay_s": 120,
        "extra": {},
        "setup": [],
        "time_min": 60,
    }
    deep_update(sl, slurm or {})
    acc: dict[str, Any] = {
        "params": 0,
        "non_embedding_params": 0,
        "unique_params": 0,
        "train_flops_per_token": 0,
        "final_train_flops_per_token": 0,
        "total_train_flops": 0,
        "gpu_hours": 0.0,
        "peak_memory_gb": 0.0,
        "optimizer_state_gb": 0.0,
    }
    acc.update(costs or {})
    entry: dict[str, Any] = {
        "run_id": run_id,
        "group_id": group,
        "pair_id": pid,
        "pairs": list(pairs) if pairs is not None else ([] if role else [pid]),
        "size": size,
        "arm": arm,
        "seed": seed,
        "architecture": dict(architecture or {}),
        "budget_match": budget_match,
        "size_dims": size_dims,
        "params": acc["params"],
        "non_embedding_params": acc["non_embedding_params"],
        "unique_params": acc["unique_params"],
        "train_flops_per_token": acc["train_flops_per_token"],
        "final_train_flops_per_token": acc["final_train_flops_per_token"],
        "tokens": tr["tokens"],
        "steps": tr["steps"],
        "total_train_flops": acc["total_train_flops"],
        "gpu_hours": acc["gpu_hours"],
        "peak_memory_gb": acc["peak_memory_gb"],
        "optimizer_state_gb": acc["optimizer_state_gb"],
        "training": tr,
        "evaluation": ev,
        "topology": topo,
        "slurm": sl,
        "certificate": "",
    }
    if role is not None:
        entry["role"] = role
    return entry


def certified(entry: Mapping[str, Any] | RunEntry) -> RunEntry:
    """Validate ``entry`` with the contract and record its certificate (as `plan` does: the run's
    own budget rule, over the entry exactly as plan.json holds it)."""
    run = entry if isinstance(entry, RunEntry) else RunEntry.model_validate(dict(entry))
    return run.model_copy(update={"certificate": certificate_of(run.as_json())})


def make_run_entry(
    run_id: str, arm: str, architecture: Mapping[str, Any] | None = None, **kw: Any
) -> RunEntry:
    """One validated, certified :class:`RunEntry` (knobs: :func:`entry_dict`)."""
    return certified(entry_dict(run_id, arm, architecture, **kw))


def derive_pairs(runs: Sequence[RunEntry]) -> list[Pair]:
    """Every variant run paired with the baseline of its group (A/A runs have no pair)."""
    baselines = {r.group_id: r for r in runs if r.is_baseline and not r.is_aa}
    out = []
    for r in runs:
        base = baselines.get(r.group_id)
        if r.is_baseline or r.is_aa or base is None:
            continue
        differs = ["architecture"] + (["tokens"] if r.tokens != base.tokens else [])
        out.append(
            Pair(
                pair_id=r.pair_id,
                group_id=r.group_id,
                size=r.size,
                seed=r.seed,
                variant=r.arm,
                baseline_run=base.run_id,
                variant_run=r.run_id,
                budget_match=r.budget_match,
                certificate=certificate_of(r.as_json(), r.budget_match),
                differs=differs,
            )
        )
    return out


def gate_entry(
    name: str,
    block: Mapping[str, Any],
    seeds: Sequence[int] | None = None,
    history: Sequence[Mapping[str, Any]] = (),
) -> GateEntry:
    """A pre-registered gate as `plan` records it: the validated block, both hashes and (with
    ``seeds``) the design record; ``history``: earlier registrations (``plan --replan``)."""
    gate = Gate.model_validate(dict(block))
    dumped = gate.model_dump()
    return GateEntry.model_validate(
        {
            "name": name,
            "gate": dumped,
            "gate_sha256": sha256_of(dumped),
            "gate_raw_sha256": sha256_of(dict(block)),
            **(design_record(dumped, list(seeds)) if seeds is not None else {}),
            "history": [dict(h) for h in history],
        },
        context={LEGACY_FLOOR: True},
    )


def _entry_doc(entry: GateEntry, legacy: bool) -> dict[str, Any]:
    """A gate entry as plan.json holds it; ``legacy``: as plans before the design record."""
    doc = entry.model_dump()
    if legacy:
        for k in ("seeds", "design_sha256", "history"):
            doc.pop(k, None)
    return doc


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def build_plan(
    runs: Sequence[RunEntry | Mapping[str, Any]],
    *,
    spec_name: str = "synth",
    description: str = "",
    spec_path: str | None = None,
    workdir: str = ".",
    gate: Mapping[str, Any] | None = None,
    gates: Mapping[str, Mapping[str, Any]] | None = None,
    pairs: Sequence[Pair] | None = None,
    eval_sets: Mapping[str, Any] | None = None,
    budget_match: str = "tokens",
    history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    legacy_gates: bool = False,
) -> Plan:
    """A :class:`Plan` around ``runs`` (dicts are validated as they are, not re-certified).

    ``gates`` (name -> spec block) gives a ``gates:`` plan, ``gate`` a ``gate:`` plan (named
    after its variant, as `plan` names it); ``pairs`` defaults to :func:`derive_pairs`.
    """
    entries = [r if isinstance(r, RunEntry) else RunEntry.model_validate(dict(r)) for r in runs]
    blocks = dict(gates or {})
    if not blocks and gate is not None:
        blocks = {Gate.model_validate(dict(gate)).variant or "gate": gate}
    seeds = _unique(r.seed for r in entries if not r.is_aa)
    recorded = [
        gate_entry(n, b, None if legacy_gates else seeds, (history or {}).get(n, ()))
        for n, b in blocks.items()
    ]
    variants = {r.arm: r.architecture for r in entries if not r.is_baseline}
    doc = {
        "schema": PLAN_SCHEMA,
        "spec_name": spec_name,
        "description": description,
        "spec_path": spec_path or f"specs/{spec_name}.yaml",
        "workdir": workdir,
        "spec_sha256": "0" * 64,
        "created": CREATED,
        "olmoablate_version": "0.1.0",
        "sizes": _unique(r.size for r in entries),
        "seeds": seeds,
        "variants": {k: v.as_mapping() for k, v in variants.items()},
        "budget": {
            "match": budget_match,
            "variants": {
                r.arm: r.budget_match
                for r in entries
                if not r.is_baseline and r.budget_match != budget_match
            },
        },
        "eval_sets": dict(eval_sets or {}),
        "gates": [_entry_doc(g, legacy_gates) for g in recorded],
        "aa_runs": [r.run_id for r in entries if r.is_aa],
        "accounting": {"flops_convention": "synthetic (olmoablate.testing.synthetic_plan)"},
        "pairs": [p.model_dump() for p in (derive_pairs(entries) if pairs is None else pairs)],
        "runs": [r.as_json() for r in entries],
    }
    return Plan.from_json(doc, where=f"synthetic plan {spec_name}")
