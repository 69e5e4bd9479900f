"""Depth-Attention: same-token attention over the (key, mixed value) of earlier layers.

Exact definition (0-based, unrolled layer index ``l``; for Looped ``l = t * K + j``)::

    S_l   = {j < l : j % stride == 0}  ∪  {j : max(0, l - recent_window) <= j < l}
    q̄_l   = mean of the query heads of each KV group (MHA: q̄ = q), after QK-norm and RoPE
    e_j   = <q̄_l, k_j> / sqrt(head_dim)          for j in S_l ∪ {l}  (k_j: post-norm post-RoPE key)
    α     = softmax_j(e)   in fp32, cast back to the value dtype
    ṽ_l   = Σ_{j in S_l} α_j ṽ_j + α_l v_l        (ṽ_j: layer j's already-mixed value)

``ṽ_l`` replaces ``v_l`` in the ordinary (SWA or full) attention and is what later layers and the
KV cache see; keys are never mixed. No parameters are added. Because layer 0 is always a source
for every ``l >= 1``, a large stride does *not* turn the mechanism off: only layer 0 (and a
1-layer model) is unchanged.

Training FLOPs added per token: :meth:`olmoablate.plan.arch.DepthAttention.layer_flops` (the one
formula the plan and ``AblationTransformer.num_flops_per_token`` use).

Why a state object and a slot: OLMo-core's ``Transformer`` passes one tensor from block to
block, but layer ``l`` needs tensors produced inside the attention of earlier layers. The model
keeps a fresh :class:`DepthState` per forward pass (a dict keyed by unrolled layer index, in the
model's eager Python loop) and hands each block only a :class:`DepthSlot` through the block
kwargs: the tuple of its sources' keys and mixed values in, its own ``(k, ṽ)`` out (only when
a later layer reads them: ``DepthSlot.keep``). Inside a compiled block the slot is a plain input
tuple plus one attribute write, which dynamo traces without a graph break; no dict and no layer
index enter the graph, so blocks with the same number of sources, the same attention kind and
the same ``keep`` share one compiled graph (see
:func:`olmoablate.models.transformer.block_signatures`). Under activation checkpointing the
re-run of a block reads the same slot's sources and overwrites its outputs with equal values,
which keeps recomputation deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from olmo_core.exceptions import OLMoConfigurationError
from olmo_core.nn.attention import Attention, AttentionConfig, AttentionType
from olmo_core.nn.attention.base import SequenceMixer
from olmo_core.nn.buffer_cache import BufferCache

from olmoablate.plan.arch import DepthAttention as DepthAttentionBlock

#: (id(settings), depth) -> (settings, S_l for every l < depth, layers read later). The entry
#: holds ``settings`` itself, so its id cannot be reused while cached; settings are not mutated
#: after a model is built.
_PLANS: dict[tuple[int, int], tuple[object, tuple[tuple[int, ...], ...], frozenset[int]]] = {}


def depth_plan(
    settings: DepthAttentionBlock, depth: int
) -> tuple[tuple[tuple[int, ...], ...], frozenset[int]]:
    """(S_l for l < depth, the layers some later layer reads), memoized per settings object:
    the model asks once per layer per forward, i.e. per decoded token."""
    key = (id(settings), depth)
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not settings:
        if len(_PLANS) > 256:
            _PLANS.clear()
        srcs = tuple(tuple(settings.sources(u)) for u in range(depth))
        hit = _PLANS[key] = (settings, srcs, frozenset(j for src in srcs for j in src))
    return hit[1], hit[2]


def read_later(settings: DepthAttentionBlock, depth: int) -> frozenset[int]:
    """Layers whose (k, ṽ) some later layer of a ``depth``-layer forward mixes in."""
    return depth_plan(settings, depth)[1]


def group_mean_query(q: torch.Tensor, n_kv_heads: int) -> torch.Tensor:
    """(B, T, H_q, D) -> (B, T, H_kv, D): the mean query of each GQA group (identity for MHA)."""
    b, t, h_q, d = q.shape
    if h_q == n_kv_heads:
        return q
    return q.view(b, t, n_kv_heads, h_q // n_kv_heads, d).mean(dim=3)


def mix_values(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    source_keys: Sequence[torch.Tensor],
    source_values: Sequence[torch.Tensor],
) -> torch.Tensor:
    """ṽ for one layer. ``q``: (B,T,H_q,D); ``k``, ``v`` and each source: (B,T,H_kv,D).

    With grad, per-source loops: autograd would save a stacked copy of every source once more
    per layer. Without grad (decoding, evaluation) the stacked form (:func:`mix_values_stacked`)
    runs a fixed handful of operators whatever the source count, bounding decode latency.
    """
    if not source_keys:
        return v
    if not torch.is_grad_enabled():
        return mix_values_stacked(q, k, v, source_keys, source_values)
    q_bar = group_mean_query(q, k.shape[2])
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = [(q_bar * kj).sum(dim=-1) for kj in source_keys]
    scores.append((q_bar * k).sum(dim=-1))
    # shape: (B, T, H_kv, n_sources + 1)
    weights = torch.softmax(torch.stack(scores, dim=-1) * scale, dim=-1, dtype=torch.float32)
    weights = weights.to(v.dtype)
    mixed = weights[..., -1:] * v
    for j, vj in enumerate(source_values):
        mixed = mixed + weights[..., j : j + 1] * vj
    return mixed


def mix_values_stacked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    source_keys: Sequence[torch.Tensor],
    source_values: Sequence[torch.Tensor],
) -> torch.Tensor:
    """:func:`mix_values` with the sources stacked on a new leading axis (own layer first): the
    same products, only the order of the sums can differ (float rounding); seven operators for
    any number of sources (the per-source form needs 4n + 9)."""
    values = torch.stack((v, *source_values))
    weights = depth_softmax(q, k, source_keys).to(v.dtype)
    return (weights.unsqueeze(-1) * values).sum(dim=0)


def depth_softmax(
    q: torch.Tensor, k: torch.Tensor, source_keys: Sequence[torch.Tensor]
) -> torch.Tensor:
    """α of one layer, own layer first: (n + 1, B, T, H_kv) in fp32 (the softmax of
    :func:`mix_values_stacked`, also read by the depth diagnostic through ``DepthSlot.record``)."""
    q_bar = group_mean_query(q, k.shape[2])
    keys = torch.stack((k, *source_keys))  # (n + 1, B, T, H_kv, D)
    scores = (q_bar * keys).sum(dim=-1) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.softmax(scores, dim=0, dtype=torch.float32)


class DepthSlot:
    """One layer's view of the depth store: its sources in, its own (key, mixed value) out.

    Deliberately a plain class, not a dataclass or container: FSDP2 (and other wrappers) rebuild
    dataclasses, lists and dicts found in a module's forward kwargs when they cast or move inputs,
    so the block would record its (key, ṽ) on a copy the model never sees.

    ``keep``: whether a later layer of this forward reads this layer's (k, ṽ). Only then does the
    block record them: in a compiled block every recorded tensor is one more graph output, and
    an output nobody reads gets a zero-filled gradient that the backward graph adds in (measured:
    14 such 1 MiB fills per step for 8 layers at stride 8, where only layer 0 is ever a source).
    """

    __slots__ = ("source_keys", "source_values", "keep", "key", "value", "record", "weights")

    def __init__(
        self,
        source_keys: tuple[torch.Tensor, ...],
        source_values: tuple[torch.Tensor, ...],
        keep: bool = True,
    ) -> None:
        self.source_keys = source_keys
        self.source_values = source_values
        self.keep = keep
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None
        #: diagnostic only (``olmoablate.models.depth``): also keep α averaged over the KV heads,
        #: (n + 1, B, T) own layer first, as ``weights``; the mixing itself is unchanged.
        self.record = False
        self.weights: torch.Tensor | None = None

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """ṽ from this slot's sources; records ``(k, ṽ)`` for the model to store if kept."""
        mixed = mix_values(q, k, v, self.source_keys, self.source_values)
        if self.keep:
            self.key, self.value = k, mixed
        if self.record:
            with torch.no_grad():
                self.weights = depth_softmax(q, k, self.source_keys).mean(dim=-1)
        return mixed


class DepthState:
    """Per-forward store of every layer's (post-RoPE key, mixed value), keyed by unrolled index.

    Lives in the model's (eager) layer loop: ``slot(l)`` before block ``l`` runs, ``store(l,
    slot)`` after it. ``depth``: the number of unrolled layers this forward runs (None: keep
    every layer's (k, ṽ)); layers that no later layer reads are not kept.
    """

    def __init__(self, settings: DepthAttentionBlock, depth: int | None = None) -> None:
        self.settings = settings
        self.plan, self.read = depth_plan(settings, depth) if depth is not None else ((), None)
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def sources(self, layer: int) -> tuple[int, ...]:
        if layer < len(self.plan):
            return self.plan[layer]
        return tuple(self.settings.sources(layer))

    def slot(self, layer: int) -> DepthSlot:
        src = self.sources(layer)
        missing = [j for j in src if j not in self.keys]
        if missing:
            raise RuntimeError(f"depth-attention layer {layer}: sources {missing} were not stored")
        return DepthSlot(
            tuple(self.keys[j] for j in src),
            tuple(self.values[j] for j in src),
            keep=self.read is None or layer in self.read,
        )

    def store(self, layer: int, slot: DepthSlot) -> None:
        if not slot.keep:
            return
        if slot.key is None or slot.value is None:
            raise RuntimeError(f"depth-attention layer {layer}: the attention did not mix")
        self.keys[layer] = slot.key
        self.values[layer] = slot.value


class DepthAttention(Attention):
    """OLMo-core ``Attention`` whose value is depth-mixed between RoPE and token attention.

    ``forward`` is a trimmed copy of ``Attention.forward`` (projection -> mixing -> SDPA ->
    output projection) instead of a hook on ``_prepare_qkv``: the mixing needs per-call inputs
    (the state and the layer index) and passing them as arguments keeps the module stateless,
    which is what activation checkpointing and ``torch.compile`` need. Options that the trimmed
    path does not implement (gates, QKV recompute, MXFP8 saves) are rejected by the config.
    """

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        cu_doc_lens: torch.Tensor | None = None,
        cu_doc_lens_q: torch.Tensor | None = None,
        cu_doc_lens_k: torch.Tensor | None = None,
        max_doc_len: int | None = None,
        max_doc_len_q: int | None = None,
        max_doc_len_k: int | None = None,
        local_k_slice: slice | None = None,
        pos_sin: torch.Tensor | None = None,
        pos_cos: torch.Tensor | None = None,
        freqs_cis: torch.Tensor | None = None,
        cache_leftpad: torch.Tensor | None = None,
        *,
        depth: DepthSlot | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        start_pos = self.kv_cache_manager.current_position() if self.kv_cache_manager else None
        q, k, v = self._prepare_qkv(
            x,
            pos_sin=pos_sin,
            pos_cos=pos_cos,
            freqs_cis=freqs_cis,
            start_pos=start_pos,
            cu_doc_lens=cu_doc_lens,
        )
        if depth is not None:
            v = depth.mix(q, k, v)
        att = self.sdpa(
            q,
            k,
            v,
            cu_doc_lens=cu_doc_lens,
            cu_doc_lens_q=cu_doc_lens_q,
            cu_doc_lens_k=cu_doc_lens_k,
            max_doc_len=max_doc_len,
            max_doc_len_q=max_doc_len_q,
            max_doc_len_k=max_doc_len_k,
            local_k_slice=local_k_slice,
            cache_leftpad=cache_leftpad,
        )
        return self.w_out(att.view(b, t, -1))


@dataclass
class DepthAttentionConfig(AttentionConfig):
    """``AttentionConfig`` that builds :class:`DepthAttention`: ``AttentionConfig.build`` builds
    the module (its sliding-window, RoPE and backend handling) and the class is swapped, as
    ``DepthAttention`` adds no parameters, buffers or ``__init__`` state."""

    def build(
        self,
        d_model: int,
        *,
        layer_idx: int,
        n_layers: int,
        init_device: str = "cpu",
        cache: BufferCache | None = None,
    ) -> SequenceMixer:
        unsupported = {
            "gate": self.gate is not None,
            "use_recompute_qkv_prep": bool(self.use_recompute_qkv_prep),
            "mxfp8_save_qkv_for_backward": bool(self.mxfp8_save_qkv_for_backward),
            "scalable_softmax": self.scalable_softmax,
            "attention_sinks": self.attention_sinks,
            "clip_qkv": self.clip_qkv is not None,
        }
        bad = sorted(k for k, on in unsupported.items() if on)
        if bad or self.name != AttentionType.default:
            raise OLMoConfigurationError(
                f"depth attention supports only default attention without {bad or [self.name]}"
            )
        module = super().build(
            d_model, layer_idx=layer_idx, n_layers=n_layers, init_device=init_device, cache=cache
        )
        if type(module) is not Attention:
            raise OLMoConfigurationError(f"depth attention cannot wrap {type(module).__name__}")
        module.__class__ = DepthAttention
        return module
