"""Greedy decoding with our own per-layer KV cache, for every variant.

Why not OLMo-core's ``KVCacheManager``: it lives inside each ``Attention`` module, so a looped
model (one module used b times per token) would share one cache slot across loop iterations, and
it stores the raw value, while Depth-Attention must cache the *mixed* value. Instead, while an
:class:`IncrementalDecoder` is active it replaces each attention module's ``forward`` (instance
attribute, removed afterwards) with a cached version, and runs the model's own ``forward`` on the
new tokens only. So SiameseNorm's streams, Looped's loop/injection logic and Depth-Attention's
per-forward source state are exactly the code used in training.

Cache layout: one ``(k, v)`` pair of tensors ``(B, max_len, n_kv_heads, head_dim)`` per *virtual*
layer = per attention call in one forward, i.e. ``n_layers`` for ordinary models and ``b · K``
(loop t, block j) for looped ones. Depth-Attention writes the mixed value ṽ and, at decode time,
mixes only the new tokens using the same-token (k, ṽ) its sources produced earlier in the same
forward - exactly what a full forward computes for those positions - so its cache has the
baseline's shape and no extra persistent state.

Per-token overhead (batch-1 decoding on CPU is bound by operator dispatch, not arithmetic), paid
alike by every variant: every plain RMSNorm runs through ``F.rms_norm`` (bit-for-bit OLMo-core's
``RMSNorm`` in fp32, without its autocast context and dtype round trips; see
:func:`_rms_norm_forward`), and the causal / sliding-window masks are built once per step and
window size instead of once per layer. Depth-Attention's mix runs its no-grad (stacked) form.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from olmo_core.nn.layer_norm import RMSNorm

from olmoablate.models.depth_attention import DepthSlot


class IncrementalDecoder:
    """Run a model over a growing sequence, one chunk at a time, with a KV cache per virtual layer.

    Use as a context manager; ``step(ids)`` returns the logits of the new positions.
    """

    def __init__(
        self, model: nn.Module, batch_size: int, max_len: int, n_loops: int | None = None
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        self.max_len = max_len
        looped = getattr(getattr(model, "arch", None), "looped", None)
        if n_loops is not None and looped is None:
            raise ValueError("n_loops is only meaningful for looped models")
        self.n_loops = (n_loops or int(model.current_loops)) if looped else None  # type: ignore[union-attr]
        self.attentions = [blk.attention for blk in model.blocks.values()]  # type: ignore[union-attr]
        n_virtual = len(self.attentions) * (self.n_loops or 1)
        att0 = self.attentions[0]
        p = att0.w_k.weight
        shape = (batch_size, max_len, att0.n_kv_heads, att0.head_dim)
        self.keys = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(n_virtual)]
        self.values = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(n_virtual)]
        self.norms = [m for m in model.modules() if _exact_rms_norm(m)]
        self.pos = 0
        self._counter = 0
        self._masks: dict[int | None, torch.Tensor] = {}
        self._installed = False

    def __enter__(self) -> IncrementalDecoder:
        for att in self.attentions:
            att.forward = self._make_forward(att)  # type: ignore[method-assign]
        for norm in self.norms:
            norm.forward = _rms_norm_forward(norm)  # type: ignore[method-assign]
        self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        for module in (*self.attentions, *self.norms):
            if "forward" in module.__dict__:
                del module.forward
        self._installed = False

    def cache_bytes(self) -> int:
        """Bytes held by the KV cache (all virtual layers, keys and values)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    @torch.no_grad()
    def step(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` (B, t) at positions pos..pos+t-1; returns their logits (B, t, V)."""
        if not self._installed:
            raise RuntimeError("use IncrementalDecoder as a context manager")
        if self.pos + ids.shape[1] > self.max_len:
            raise ValueError(f"cache holds {self.max_len} positions; got {self.pos + ids.shape[1]}")
        self._counter = 0
        self._masks = {}
        kwargs: dict[str, Any] = {}
        if self.n_loops is not None:
            kwargs["n_loops"] = self.n_loops
        logits = self.model(ids, **kwargs)
        if self._counter != len(self.keys):
            raise RuntimeError(f"expected {len(self.keys)} attention calls, saw {self._counter}")
        self.pos += ids.shape[1]
        return logits

    def _make_forward(self, att: nn.Module) -> Any:
        def forward(
            x: torch.Tensor, *args: object, depth: DepthSlot | None = None, **kwargs: object
        ) -> torch.Tensor:
            del args, kwargs
            return self._cached_attention(att, x, depth)

        return forward

    def _cached_attention(self, att: Any, x: torch.Tensor, depth: DepthSlot | None) -> torch.Tensor:
        u = self._counter
        self._counter += 1
        b, t, _ = x.shape
        q, k, v = att._prepare_qkv(
            x, pos_sin=None, pos_cos=None, freqs_cis=None, start_pos=self.pos, cu_doc_lens=None
        )
        if depth is not None:
            v = depth.mix(q, k, v)
        end = self.pos + t
        self.keys[u][:b, self.pos : end] = k
        self.values[u][:b, self.pos : end] = v
        keys = self.keys[u][:b, :end]
        values = self.values[u][:b, :end]
        group = q.shape[2] // keys.shape[2]
        if group > 1:
            keys = keys.repeat_interleave(group, dim=2)
            values = values.repeat_interleave(group, dim=2)
        scores = torch.einsum("bihd,bjhd->bhij", q, keys) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(self._blocked(att.window_size, t, x.device), float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(values.dtype)
        out = torch.einsum("bhij,bjhd->bihd", probs, values)
        return att.w_out(out.reshape(b, t, -1))

    def _blocked(self, window: int | None, t: int, device: torch.device) -> torch.Tensor:
        """(t, pos + t) mask of the key positions the new queries may NOT see, built once per
        step and window size (every layer of one attention kind shares it)."""
        mask = self._masks.get(window)
        if mask is None:
            end = self.pos + t
            q_pos = torch.arange(self.pos, end, device=device)[:, None]
            k_pos = torch.arange(end, device=device)[None, :]
            allowed = k_pos <= q_pos
            if window is not None:
                allowed = allowed & (k_pos > q_pos - window)
            mask = self._masks[window] = ~allowed
        return mask


def _exact_rms_norm(module: nn.Module) -> bool:
    """OLMo-core ``RMSNorm`` modules that ``F.rms_norm`` reproduces bit for bit (no bias, one
    weight per normalized element); subclasses (other rounding orders) are left alone."""
    return (
        type(module) is RMSNorm
        and module.bias is None
        and module.weight_shape == module.normalized_shape
    )


def _rms_norm_forward(norm: Any) -> Any:
    """``norm.forward`` through ``F.rms_norm``: x·rsqrt(mean(x²) + eps)·w, in fp32 when
    ``full_precision``, cast back - OLMo-core's RMSNorm term for term, with fewer dispatches.
    Under an active autocast it defers to OLMo-core's own forward (which disables autocast)."""
    original = type(norm).forward
    shape, eps, full = norm.normalized_shape, norm.eps, norm.full_precision

    def forward(x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):
            return original(norm, x)
        og = x.dtype
        y = x.float() if full and og != torch.float32 else x
        w = norm.weight
        if w is not None and w.dtype != y.dtype:
            w = w.type_as(y)
        out = F.rms_norm(y, shape, w, eps)
        return out if out.dtype == og else out.to(og)

    return forward


@torch.no_grad()
def greedy_decode(
    model: nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int, n_loops: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuation of ``prompt_ids`` (B, P).

    Returns ``(tokens, logits)``: tokens (B, P + max_new_tokens) and the logits that chose each
    new token, (B, max_new_tokens, V) - logits[:, i] are the next-token logits at position
    P - 1 + i, equal (to float tolerance) to a full forward pass over the same tokens.
    """
    was_training = model.training
    model.eval()
    try:
        b, p = prompt_ids.shape
        tokens = prompt_ids
        step_logits = []
        with IncrementalDecoder(model, b, p + max_new_tokens, n_loops=n_loops) as dec:
            logits = dec.step(prompt_ids)[:, -1]
            for i in range(max_new_tokens):
                step_logits.append(logits)
                nxt = logits.argmax(dim=-1, keepdim=True)
                tokens = torch.cat([tokens, nxt], dim=1)
                if i + 1 < max_new_tokens:
                    logits = dec.step(nxt)[:, -1]
        return tokens, torch.stack(step_logits, dim=1)
    finally:
        model.train(was_training)
