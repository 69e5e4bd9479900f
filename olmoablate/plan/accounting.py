"""Analytic compute accounting: parameters, training FLOPs, memory and GPU-hours — no torch.

Why analytic: `plan` prices every run on a login node in milliseconds. The counts are exact: tests
build the models (1B/3B/7B on the meta device) and compare with OLMo-core's own counts.

FLOPs convention (OLMo-core 3.0, `Attention.num_flops_per_token` etc.): training FLOPs per token =
6 x (parameters inside attention, feed-forward and LM head, block norms excluded) + per attention
layer ``12 * n_heads * head_dim * causal_pairs(seq, window) // seq``. A variant's terms are its
blocks' cost hooks (:mod:`olmoablate.plan.arch`), composed over the layer applications by
:func:`unrolled_flops`, which the model's own ``num_flops_per_token`` uses too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from olmoablate.plan.arch import Architecture, parse_architecture
from olmoablate.plan.blocks import Block, LayerApp, Unrolled, get_block
from olmoablate.plan.planfile import Plan, RunEntry
from olmoablate.plan.sizes import SizeDims

#: An architecture as the plan records it (a mapping of blocks) or as a model.
ArchLike = Architecture | Mapping[str, Any] | None


def causal_pairs(seq_len: int, window: int | None) -> int:
    """Attended (query, key) pairs in a causal sequence, optionally with a sliding window."""
    if window is None or window >= seq_len:
        return seq_len * (seq_len + 1) // 2
    return window * (window + 1) // 2 + (seq_len - window) * window


def attention_params(d: SizeDims) -> int:
    """q, k, v, o projections plus the full-width QK-norm weights (OLMo 3)."""
    hd = d.head_dim
    qkvo = d.d_model * (d.n_heads + 2 * d.n_kv_heads) * hd + d.n_heads * hd * d.d_model
    return qkvo + (d.n_heads * hd + d.n_kv_heads * hd)


def mlp_params(d: SizeDims) -> int:
    return 3 * d.d_model * d.mlp_hidden_size


def head_params(d: SizeDims) -> int:
    """LM head: final RMSNorm weight + the untied output projection."""
    return d.d_model + d.d_model * d.vocab_size


def embedding_params(d: SizeDims) -> int:
    return d.vocab_size * d.d_model


def _blocks(a: Architecture) -> list[tuple[Block, Any]]:
    return [(get_block(key), opts) for key, opts in a.blocks.items()]


def param_count(d: SizeDims, arch: ArchLike = None) -> int:
    """Total parameters of the model `olmoablate.models.build_model(d, arch)` builds: OLMo 3's
    at the blocks' physical depth plus each block's ``extra_params``."""
    a = parse_architecture(arch)
    L = a.n_physical_layers(d.n_layers)
    per_layer = attention_params(d) + mlp_params(d) + 2 * d.d_model  # + the two output norms
    total = embedding_params(d) + L * per_layer + head_params(d)
    return total + sum(b.extra_params(o, d, L) for b, o in _blocks(a))


def unique_param_count(d: SizeDims, arch: ArchLike = None) -> int:
    """Distinct trained weights (``RunEntry.unique_params``): a looped model applies its body's
    layers several times but stores them once, and :func:`param_count` already counts physical
    layers, so the two agree; named apart because a multiplier "per unique parameter" means this."""
    return param_count(d, arch)


def non_embedding_param_count(d: SizeDims, arch: ArchLike = None) -> int:
    """OLMo-core's `num_non_embedding_params`: everything but the input embedding."""
    return param_count(d, arch) - embedding_params(d)


def _attention_scores(d: SizeDims, layer: int, n_layers: int, seq_len: int) -> int:
    """Training FLOPs per token of one layer's attention scores and weighted sum (OLMo-core)."""
    window = d.window_of(layer, n_layers)
    return 12 * d.n_heads * d.head_dim * causal_pairs(seq_len, window) // seq_len


def _layer_flops(d: SizeDims, layer: int, n_layers: int, seq_len: int) -> int:
    attn = 6 * attention_params(d) + _attention_scores(d, layer, n_layers, seq_len)
    return attn + 6 * mlp_params(d)


@functools.lru_cache(maxsize=64)
def _layer_table(d: SizeDims, L: int, seq_len: int) -> tuple[list[int], list[int]]:
    """Per physical layer: OLMo 3's training FLOPs per token, and the part of it a FLOP counter
    sees as matrix products (without attention scores and QK-norm weights)."""
    base = [_layer_flops(d, j, L, seq_len) for j in range(L)]
    norms = 6 * (d.n_heads * d.head_dim + d.n_kv_heads * d.head_dim)  # QK-norm weights
    return base, [base[j] - _attention_scores(d, j, L, seq_len) - norms for j in range(L)]


def phase_at(arch: ArchLike, step: int) -> int | None:
    """The step-dependent setting at OLMo-core's 1-based ``step`` (Looped: b), or None."""
    for b, o in _blocks(parse_architecture(arch)):
        p = b.phase_at(o, step)
        if p is not None:
            return p
    return None


def unrolled(a: Architecture, L: int, phase: int | None) -> Unrolled:
    """How one training forward applies the ``L`` physical layers (the block that unrolls)."""
    for b, o in _blocks(a):
        u = b.unroll(o, L, phase, True)
        if u is not None:
            return u
    return Unrolled(tuple(LayerApp(j, j) for j in range(L)), readouts=1)


def unrolled_flops(
    u: Unrolled, layer: Sequence[int], head: int, extra: Callable[[LayerApp], int] | None = None
) -> int:
    """Training FLOPs per token of a forward applying the layers as ``u``: each application costs
    ``layer[j]`` plus ``extra(app)``, a forward-only one a third (summed in thirds, so exact), each
    read-out ``head``. The one composition the plan and the model use (Looped, K blocks of F_body,
    b loops, T supervised: ``F_body·(b + 2T)/3 + T·head``)."""
    thirds = sum(
        (3 if app.grad else 1) * (layer[app.layer] + (extra(app) if extra else 0))
        for app in u.apps
    )
    return thirds // 3 + u.readouts * head


def _adding(a: Architecture) -> list[tuple[Block, Any]]:
    """The blocks that add layer FLOPs (only they are asked, per application)."""
    return [(b, o) for b, o in _blocks(a) if type(b).layer_flops is not Block.layer_flops]


def train_flops_per_token(
    d: SizeDims, arch: ArchLike, seq_len: int, loops: int | None = None
) -> int:
    """Training FLOPs per token (module doc): each layer application the OLMo 3 layer plus blocks'
    ``layer_flops``, each read-out the LM head plus ``head_flops``; ``loops``: default final."""
    a = parse_architecture(arch)
    L = a.n_physical_layers(d.n_layers)
    adding = _adding(a)
    head = 6 * head_params(d) + sum(b.head_flops(o, d) for b, o in _blocks(a))
    return unrolled_flops(
        unrolled(a, L, loops),
        _layer_table(d, L, seq_len)[0],
        head,
        lambda app: sum(b.layer_flops(o, d, app, L, seq_len) for b, o in adding),
    )


@dataclass(frozen=True)
class FlopsBreakdown:
    """Training FLOPs per token (``total``) and the part a FLOP counter does not see as matrix
    products (``unseen``: attention scores, norm weights, a block's elementwise terms); the job
    proves ``total - unseen`` against torch's FLOP counter (:mod:`olmoablate.run.proof`)."""

    total: int
    unseen: int


def flops_breakdown(
    d: SizeDims, arch: ArchLike, seq_len: int, phase: int | None = None
) -> FlopsBreakdown:
    a = parse_architecture(arch)
    L = a.n_physical_layers(d.n_layers)
    base, seen = _layer_table(d, L, seq_len)
    adding = _adding(a)

    def unseen(app: LayerApp) -> int:
        return sum(
            b.layer_flops(o, d, app, L, seq_len)
            if not b.layer_flops_counted
            else b.uncounted_layer_flops(o, d, app, L, seq_len)
            for b, o in adding
        )

    hidden = [t - s for t, s in zip(base, seen, strict=True)]
    return FlopsBreakdown(
        total=train_flops_per_token(d, a, seq_len, phase),
        unseen=unrolled_flops(unrolled(a, L, phase), hidden, 6 * d.d_model, unseen),
    )


def _phases(a: Architecture, steps: int) -> list[tuple[int | None, int]]:
    for b, o in _blocks(a):
        p = b.phases(o, steps)
        if p is not None:
            return list(p)
    return [(None, steps)]


def _has_phases(a: Architecture) -> bool:
    return any(b.phase_at(o, 1) is not None for b, o in _blocks(a))


@dataclass(frozen=True)
class RunCost:
    params: int
    non_embedding_params: int
    unique_params: int
    train_flops_per_token: int  # average over the run (curriculum-aware)
    final_train_flops_per_token: int
    total_train_flops: int
    gpu_hours: float
    peak_memory_gb: float
    optimizer_state_gb: float


def total_train_flops(
    d: SizeDims, arch: ArchLike, seq_len: int, tokens_per_step: int, steps: int
) -> int:
    """Training FLOPs of the whole run, summed over the phases (a loop curriculum's b per step)."""
    a = parse_architecture(arch)
    return sum(
        train_flops_per_token(d, a, seq_len, phase) * tokens_per_step * n
        for phase, n in _phases(a, steps)
    )


def steps_for_flops(
    d: SizeDims, arch: ArchLike, seq_len: int, tokens_per_step: int, target_flops: int
) -> int:
    """The step count whose training FLOPs come closest to ``target_flops`` (>= 1)."""
    a = parse_architecture(arch)
    final = train_flops_per_token(d, a, seq_len) * tokens_per_step
    first = max(1, round(target_flops / final))
    if not _has_phases(a):
        return first
    # Walk the phases' segments, then finish with the final phase.
    total, steps = 0, 0
    for phase, n in _phases(a, first * 4):  # enough steps to exceed the target
        per = train_flops_per_token(d, a, seq_len, phase) * tokens_per_step
        if total + per * n >= target_flops:
            extra = max(0, round((target_flops - total) / per))
            return max(1, steps + extra)
        total += per * n
        steps += n
    return max(1, steps)


def variant_steps(
    d: SizeDims, arch: ArchLike, match: str, seq_len: int, tokens_per_step: int, base_steps: int
) -> int:
    """A variant's step count under the spec's budget match: the baseline's steps (``tokens``),
    or the steps whose training FLOPs come closest to the baseline run's (``flops``)."""
    if match != "flops":
        return base_steps
    target = total_train_flops(d, None, seq_len, tokens_per_step, base_steps)
    return steps_for_flops(d, arch, seq_len, tokens_per_step, target)


@dataclass(frozen=True)
class ArmsPrice:
    """Both arms of one size at a planned budget, priced as `plan` prices their runs."""

    tokens_b: int
    tokens_v: int
    flops_b: int
    flops_v: int
    params_b: int
    params_v: int  # the variant's unique parameters


def price_arms(
    d: SizeDims, arch: ArchLike, match: str, seq_len: int, tokens_per_step: int, tokens: int
) -> ArmsPrice:
    """The pair a spec would plan at ``d`` with ``tokens`` (whole steps, as expansion rounds):
    what a multiplier gate's target costs, without planning its runs."""
    base = tokens // tokens_per_step
    steps = variant_steps(d, arch, match, seq_len, tokens_per_step, base)
    return ArmsPrice(
        tokens_b=base * tokens_per_step,
        tokens_v=steps * tokens_per_step,
        flops_b=total_train_flops(d, None, seq_len, tokens_per_step, base),
        flops_v=total_train_flops(d, arch, seq_len, tokens_per_step, steps),
        params_b=param_count(d),
        params_v=unique_param_count(d, arch),
    )


def memory_estimate_gb(
    d: SizeDims,
    arch: ArchLike,
    *,
    seq_len: int,
    microbatch_tokens: int,
    world_size: int,
    sharded: bool,
    bf16: bool,
    activation_checkpointing: bool = False,
) -> tuple[float, float]:
    """(peak memory per device, optimizer-state memory per device) in GB — a labelled estimate.

    States: fp32 params + grads (4 + 4 bytes) and AdamW moments (8 bytes) per parameter, divided
    by the data-parallel size under FSDP. Activations per layer and token: 34·d bytes at 16-bit
    (Korthikanti et al., flash attention so no S² term) doubled for fp32, plus each block's
    ``activation_bytes`` (SiameseNorm ~10·d: second stream and its norms; Depth-Attention the
    mixed value), for the differentiated layer applications only (Looped: its T last loops; no_grad
    loops free theirs) and one set of logits per read-out. Logits: fp32 logits + their gradient.
    Full activation checkpointing keeps each differentiated layer application's input (d values
    per token) and one layer's activations at a time (recomputed in backward)."""
    a = parse_architecture(arch)
    blocks = _blocks(a)
    P = param_count(d, a)
    shard = world_size if sharded else 1
    optim_bytes = 8 * P / shard
    state_bytes = (4 + 4) * P / shard + optim_bytes
    act_unit = 2 if bf16 else 4
    per_layer_token = 17 * d.d_model * act_unit  # 34·d bytes at 16-bit
    per_layer_token += sum(b.activation_bytes(o, d, act_unit) for b, o in blocks)
    u = unrolled(a, a.n_physical_layers(d.n_layers), None)
    layers_with_acts = sum(1 for app in u.apps if app.grad)
    if activation_checkpointing:
        acts = microbatch_tokens * (d.d_model * act_unit * layers_with_acts + per_layer_token)
    else:
        acts = microbatch_tokens * per_layer_token * layers_with_acts
    logits = microbatch_tokens * d.vocab_size * 4 * 2 * u.readouts
    peak = state_bytes + acts + logits
    return peak / 1e9, optim_bytes / 1e9


def run_cost(
    d: SizeDims,
    arch: ArchLike,
    *,
    seq_len: int,
    tokens_per_step: int,
    steps: int,
    microbatch_tokens: int,
    world_size: int,
    sharded: bool,
    bf16: bool,
    gpu_peak_tflops: float,
    assumed_mfu: float,
    activation_checkpointing: bool = False,
) -> RunCost:
    arch = parse_architecture(arch)  # validated once, not once per figure
    total = total_train_flops(d, arch, seq_len, tokens_per_step, steps)
    tokens = tokens_per_step * steps
    peak, optim = memory_estimate_gb(
        d,
        arch,
        seq_len=seq_len,
        microbatch_tokens=microbatch_tokens,
        world_size=world_size,
        sharded=sharded,
        bf16=bf16,
        activation_checkpointing=activation_checkpointing,
    )
    params = param_count(d, arch)
    return RunCost(
        params=params,
        non_embedding_params=non_embedding_param_count(d, arch),
        unique_params=unique_param_count(d, arch),
        train_flops_per_token=round(total / tokens),
        final_train_flops_per_token=train_flops_per_token(d, arch, seq_len),
        total_train_flops=total,
        gpu_hours=total / (gpu_peak_tflops * 1e12 * assumed_mfu) / 3600.0,
        peak_memory_gb=round(peak, 3),
        optimizer_state_gb=round(optim, 3),
    )


# What a plan costs in total (per size, stage, spec) and the GPU-hour budget: one rule for `plan`,
# `validate` and `submit`. A gate's stage size runs now, the sizes it promotes to only after proceed.

GATE_STAGE = "gate stage"
BEHIND_GATE = "behind the gate"
UNGATED = "ungated"


@dataclass
class Total:
    runs: int = 0
    gpu_hours: float = 0.0
    tokens: int = 0
    #: Runs another spec of the store trains (same identity): counted, priced at 0 GPU-hours.
    reused: int = 0

    def add(self, run: RunEntry, reused: bool = False) -> None:
        self.runs += 1
        self.reused += int(reused)
        self.gpu_hours += 0.0 if reused else run.gpu_hours
        self.tokens += run.tokens

    def as_json(self) -> dict[str, float | int]:
        return {
            "runs": self.runs,
            "reused": self.reused,
            "gpu_hours": round(self.gpu_hours, 3),
            "tokens": self.tokens,
        }


@dataclass
class Totals:
    by_size: dict[str, Total] = field(default_factory=dict)
    by_stage: dict[str, Total] = field(default_factory=dict)
    stage_of: dict[str, str] = field(default_factory=dict)
    total: Total = field(default_factory=Total)

    def as_json(self) -> dict[str, object]:
        return {
            "by_size": {k: {"stage": self.stage_of[k], **v.as_json()} for k, v in self.by_size.items()},
            "by_stage": {k: v.as_json() for k, v in self.by_stage.items()},
            "total": self.total.as_json(),
        }


def stage_of(plan: Plan) -> dict[str, str]:
    """Each planned size's stage (see module docstring); a gate stage wins over behind-a-gate.
    Every rung of a multiplier gate's ladder runs now, as its stage does."""
    stages = {e.gate.stage for e in plan.gates}
    stages |= {s for e in plan.gates if e.ladder is not None for s in e.ladder.rungs}
    behind = {s for e in plan.gates for s in e.gate.promote_to}
    return {
        s: GATE_STAGE if s in stages else BEHIND_GATE if s in behind else UNGATED
        for s in plan.sizes
    }


def totals(plan: Plan, runs: Iterable[RunEntry] | None = None) -> Totals:
    """Runs, GPU-hours and tokens per size, stage and spec; a run the plan reuses from another
    spec of the store (``plan.identity.reused``) costs this spec nothing."""
    out = Totals(stage_of=stage_of(plan))
    reused = plan.identity.reused if plan.identity is not None else {}
    for s in plan.sizes:
        out.by_size[s] = Total()
    for run in plan.runs if runs is None else runs:
        shared = run.run_id in reused
        out.by_size.setdefault(run.size, Total()).add(run, shared)
        out.by_stage.setdefault(out.stage_of.get(run.size, UNGATED), Total()).add(run, shared)
        out.total.add(run, shared)
    return out


def budget_limits(plan: Plan) -> dict[str, float]:
    """{"total" or a size: max GPU-hours} from ``budget.max_gpu_hours``."""
    cap = plan.budget.max_gpu_hours
    if cap is None:
        return {}
    return {"total": float(cap)} if not isinstance(cap, dict) else {k: float(v) for k, v in cap.items()}


def over_budget(plan: Plan, sizes: set[str] | None = None) -> list[str]:
    """One line per exceeded limit (empty when within). ``sizes``: only those sizes' limits (what
    `submit --size` launches); the whole-spec limit always counts every planned run."""
    t = totals(plan)
    out = []
    for key, limit in budget_limits(plan).items():
        if sizes is not None and key != "total" and key not in sizes:
            continue
        got = t.total if key == "total" else t.by_size.get(key, Total())
        if got.gpu_hours > limit:
            what = "the whole spec" if key == "total" else f"size {key} ({t.stage_of.get(key, '?')})"
            out.append(
                f"budget exceeded: {what} needs {got.gpu_hours:,.1f} GPU-hours "
                f"({got.runs} runs) > budget.max_gpu_hours{'' if key == 'total' else '.' + key} "
                f"= {limit:,.1f}"
            )
    return out
