"""Analytic compute accounting: parameters, training FLOPs, memory and GPU-hours — no torch.

Why analytic: `plan` must state what every run costs before anything is submitted, on a login node,
in milliseconds. The counts are exact, not estimates: tests build the models (tiny ones for real,
1B/3B/7B on the meta device) and compare with ``Transformer.num_params`` and
``num_flops_per_token``.

FLOPs convention (OLMo-core 3.0, `Attention.num_flops_per_token` etc.): training FLOPs per token =
6 x (parameters inside attention, feed-forward and LM head, block norms excluded) + per attention
layer ``12 * n_heads * head_dim * causal_pairs(seq, window) // seq`` where causal_pairs counts
(query, key) pairs under the causal mask and sliding window. Variant terms:

* SiameseNorm: no extra matmuls; its norms and γ live outside attention/MLP, which OLMo-core does
  not count for the baseline's block norms either, so FLOPs equal the baseline's.
* Depth-Attention: per layer with n_l > 0 sources, ``3 * 4 * n_kv * head_dim * (n_l + 1)`` (scores
  and weighted sum over n_l sources + self, forward + backward), plus ``3 * n_heads * head_dim``
  for the group-mean query under GQA.
* Looped (K body blocks, b loops, T supervised): ``F_body * (b + 2T) + T * head`` where ``F_body``
  is the training FLOPs of the K blocks (so ``F_body/3`` per forward loop) and ``head`` the LM head's
  training FLOPs: b−T loops run forward only, T loops forward+backward, T read-outs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from olmoablate.contract.arch import Architecture, parse_architecture
from olmoablate.contract.sizes import SizeDims

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
    return (
        d.d_model * (d.n_heads + 2 * d.n_kv_heads) * hd
        + d.n_heads * hd * d.d_model
        + (d.n_heads * hd + d.n_kv_heads * hd)
    )


def mlp_params(d: SizeDims) -> int:
    return 3 * d.d_model * d.mlp_hidden_size


def head_params(d: SizeDims) -> int:
    """LM head: final RMSNorm weight + the untied output projection."""
    return d.d_model + d.d_model * d.vocab_size


def embedding_params(d: SizeDims) -> int:
    return d.vocab_size * d.d_model


def _arch(arch: ArchLike) -> Architecture:
    return parse_architecture(arch)


def n_physical_layers(d: SizeDims, arch: ArchLike) -> int:
    return _arch(arch).n_physical_layers(d.n_layers)


def param_count(d: SizeDims, arch: ArchLike = None) -> int:
    """Total parameters of the model `olmoablate.models.build_model(d, arch)` builds."""
    a = _arch(arch)
    L = a.n_physical_layers(d.n_layers)
    per_layer = attention_params(d) + mlp_params(d) + 2 * d.d_model  # + the two output norms
    total = embedding_params(d) + L * per_layer + head_params(d)
    if a.siamese_norm is not None:
        if not a.siamese_norm.output_norms:
            total -= 2 * d.d_model * L  # OLMo 3's output norms are replaced, not kept
        # per layer: γ, RMSNorm(Y) at attention, X post-norm, RMSNorm(Y) at MLP, MLP input norm
        total += 5 * d.d_model * L
        total += 2 * d.d_model  # final RMSNorm(X) and RMSNorm(Y); the outer norm is the head's
    if a.looped is not None and a.looped.state_norm:
        total += d.d_model
    return total


def non_embedding_param_count(d: SizeDims, arch: ArchLike = None) -> int:
    """OLMo-core's `num_non_embedding_params`: everything but the input embedding."""
    return param_count(d, arch) - embedding_params(d)


def _layer_flops(d: SizeDims, layer: int, n_layers: int, seq_len: int) -> int:
    window = d.window_of(layer, n_layers)
    attn = (
        6 * attention_params(d)
        + 12 * d.n_heads * d.head_dim * causal_pairs(seq_len, window) // seq_len
    )
    return attn + 6 * mlp_params(d)


def _depth_flops(d: SizeDims, layer: int, da: Any) -> int:
    n = len(da.sources(layer))
    if n == 0:
        return 0
    extra = 3 * 4 * d.n_kv_heads * d.head_dim * (n + 1)
    if d.n_kv_heads < d.n_heads:
        extra += 3 * d.n_heads * d.head_dim
    return extra


def train_flops_per_token(d: SizeDims, arch: ArchLike, seq_len: int, loops: int | None = None) -> int:
    """Training FLOPs per token (forward + backward), OLMo-core's convention; see module doc.

    For looped models ``loops`` is the loop count b in force (default: the final b).
    """
    a = _arch(arch)
    head = 6 * head_params(d)
    L = a.n_physical_layers(d.n_layers)
    da = a.depth_attention
    if a.looped is not None:
        b = loops if loops is not None else a.looped.loops
        T = min(a.looped.tail, b)
        body = sum(_layer_flops(d, j, L, seq_len) for j in range(L))
        if da is not None:
            body_da = [_depth_flops(d, t * L + j, da) for t in range(b) for j in range(L)]
            # depth-mixing cost differs per unrolled layer; forward-only loops cost a third
            fwd_only = sum(body_da[: (b - T) * L]) // 3
            with_grad = sum(body_da[(b - T) * L :])
        else:
            fwd_only = with_grad = 0
        return (body * (b + 2 * T)) // 3 + fwd_only + with_grad + T * head
    total = sum(_layer_flops(d, layer, L, seq_len) for layer in range(L)) + head
    if da is not None:
        total += sum(_depth_flops(d, layer, da) for layer in range(L))
    return total


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
    """Training FLOPs of the whole run; with a loop curriculum, summed over each step's b."""
    a = _arch(arch)
    if a.looped is not None:
        return sum(
            train_flops_per_token(d, a, seq_len, b) * tokens_per_step * n
            for b, n in a.looped.loop_schedule(steps)
        )
    return train_flops_per_token(d, a, seq_len) * tokens_per_step * steps


def steps_for_flops(
    d: SizeDims,
    arch: ArchLike,
    seq_len: int,
    tokens_per_step: int,
    target_flops: int,
) -> int:
    """The step count whose training FLOPs come closest to ``target_flops`` (>= 1)."""
    a = _arch(arch)
    lp = a.looped
    final = train_flops_per_token(d, a, seq_len) * tokens_per_step
    if lp is None or lp.curriculum is None:
        return max(1, round(target_flops / final))
    # Walk the curriculum's segments, then finish with the final b.
    total, steps = 0, 0
    probe = max(1, round(target_flops / final)) * 4  # enough steps to exceed the target
    for b, n in lp.loop_schedule(probe):
        per = train_flops_per_token(d, a, seq_len, b) * tokens_per_step
        if total + per * n >= target_flops:
            extra = max(0, round((target_flops - total) / per))
            return max(1, steps + extra)
        total += per * n
        steps += n
    return max(1, steps)


def memory_estimate_gb(
    d: SizeDims,
    arch: ArchLike,
    *,
    seq_len: int,
    microbatch_tokens: int,
    world_size: int,
    sharded: bool,
    bf16: bool,
) -> tuple[float, float]:
    """(peak memory per device, optimizer-state memory per device) in GB — a labelled estimate.

    States: fp32 params + grads (4 + 4 bytes) and AdamW moments (8 bytes) per parameter, divided
    by the data-parallel size under FSDP. Activations per layer and token: 34·d bytes at 16-bit
    (Korthikanti et al., flash attention so no S² term) doubled for fp32; SiameseNorm adds ~10·d
    (second stream and its norms), Depth-Attention the mixed value; Looped keeps activations for
    its T differentiable loops only (no_grad loops free theirs) and T sets of logits. Logits:
    fp32 logits + their gradient per token.
    """
    a = _arch(arch)
    P = param_count(d, a)
    shard = world_size if sharded else 1
    optim_bytes = 8 * P / shard
    state_bytes = (4 + 4) * P / shard + optim_bytes
    act_unit = 2 if bf16 else 4
    per_layer_token = 17 * d.d_model * act_unit  # 34·d bytes at 16-bit
    if a.siamese_norm is not None:
        per_layer_token += 5 * d.d_model * act_unit
    if a.depth_attention is not None:
        per_layer_token += d.n_kv_heads * d.head_dim * act_unit
    L = a.n_physical_layers(d.n_layers)
    layers_with_acts = L
    readouts = 1
    if a.looped is not None:
        T = a.looped.tail
        layers_with_acts = L * T
        readouts = T
    acts = microbatch_tokens * per_layer_token * layers_with_acts
    logits = microbatch_tokens * d.vocab_size * 4 * 2 * readouts
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
) -> RunCost:
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
    )
    params = param_count(d, arch)
    return RunCost(
        params=params,
        non_embedding_params=non_embedding_param_count(d, arch),
        unique_params=params,
        train_flops_per_token=round(total / tokens),
        final_train_flops_per_token=train_flops_per_token(d, arch, seq_len),
        total_train_flops=total,
        gpu_hours=total / (gpu_peak_tflops * 1e12 * assumed_mfu) / 3600.0,
        peak_memory_gb=round(peak, 3),
        optimizer_state_gb=round(optim, 3),
    )
