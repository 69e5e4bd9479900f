"""Effective-depth diagnostics: logit-lens CE per layer, Depth-Attention weights, CE per loop.

A *diagnostic*, never a gate input: it describes where in the stack the next-token prediction
is formed; the verdict stays with the eval CE. See ``docs/depth.md``.

**Logit lens.** The residual stream after each block is passed through the model's *own* output
path (final norm + LM head; nothing is fitted) and scored against the next tokens. ``layer_0`` is
the embedding output, ``layer_i`` the stream after block ``i`` (1-based), so ``layer_L`` is the
model's own output and its CE equals the model's CE on the same tokens (tested).

* Baseline / Depth-Attention: ``LMHead(h_i)`` (the LM head applies OLMo 3's final RMSNorm).
* SiameseNorm: the model's output is ``LMHead(RMSNorm_fx(X) + RMSNorm_fy(Y))``, so the lens reads
  **both streams merged by the model's own final merge** (``AblationTransformer._merge_streams``)
  at every layer; neither stream alone is what the model outputs.
* Looped OLMo: one value per loop (``loop_t``: ``LMHead`` of the state after loop ``t``, from
  ``t = 1``, state norm included, exactly :meth:`AblationTransformer.forward_all_loops`), at the spec's loop count.

**Depth-Attention weights.** The depth softmax α of every layer is recorded during the same
forward (``DepthSlot.record``; the mixing maths is untouched), averaged over KV heads and scored
positions. ``da_weight[j]``: the mean weight that layers reading layer ``j``'s value give it
(``j`` a source, own layer excluded); ``da_self[l]``: layer ``l``'s weight on its own value.

Every variant's maths stays in its one forward: the lens reads block outputs through forward
hooks on a normal forward call (run eagerly: compiled modules are swapped for their eager calls
for the duration, so no new graph is compiled and the training graphs are untouched).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F

from olmoablate.plan import metrics as metric_names

#: "Within margin of the final": a layer's lens CE is at most this many nats above the final
#: layer's (``first_within``). 0.05 nats ≈ 5% perplexity.
MARGIN_NATS = metric_names.DEPTH_MARGIN_NATS


def first_within(ce: list[float], margin: float = MARGIN_NATS) -> int | None:
    """Index of the first entry whose CE is within ``margin`` nats of the last entry's (the
    number of blocks, or loops, the lens needs); None for an empty profile."""
    if not ce:
        return None
    final = ce[-1]
    return next(i for i, v in enumerate(ce) if v - final <= margin)


@dataclass
class DepthProfile:
    """Sums over scored tokens; :meth:`result` turns them into means."""

    unit: str = "layer"  # "layer" (logit lens per block) or "loop" (Looped OLMo)
    ce_sum: list[float] = field(default_factory=list)
    tokens: float = 0.0
    da_sum: dict[int, float] = field(default_factory=dict)  # source layer -> Σ weight
    da_n: dict[int, float] = field(default_factory=dict)
    self_sum: dict[int, float] = field(default_factory=dict)  # layer -> Σ own weight
    self_n: dict[int, float] = field(default_factory=dict)

    def add(self, other: DepthProfile) -> None:
        self.unit = other.unit
        if not self.ce_sum:
            self.ce_sum = [0.0] * len(other.ce_sum)
        self.ce_sum = [a + b for a, b in zip(self.ce_sum, other.ce_sum, strict=True)]
        self.tokens += other.tokens
        for mine, theirs in (
            (self.da_sum, other.da_sum),
            (self.da_n, other.da_n),
            (self.self_sum, other.self_sum),
            (self.self_n, other.self_n),
        ):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v

    @property
    def first_index(self) -> int:
        return metric_names.depth_first_index(self.unit)

    @property
    def ce(self) -> list[float]:
        return [s / self.tokens for s in self.ce_sum] if self.tokens else []

    def metrics(self, set_name: str) -> dict[str, float]:
        """The metrics.jsonl names and values (``plan.metrics.depth_metric``): CE per layer or
        loop, Depth-Attention's weights, and the first layer within the margin of the final."""
        name = metric_names.depth_metric
        out: dict[str, float] = {}
        ce = self.ce
        for i, v in enumerate(ce, start=self.first_index):
            out[name(set_name, self.unit, i)] = v
        first = first_within(ce)
        if first is not None:
            out[name(set_name, metric_names.DEPTH_FIRST)] = float(first + self.first_index)
        for j in sorted(self.da_sum):
            out[name(set_name, "da_weight", j)] = self.da_sum[j] / max(self.da_n[j], 1e-12)
        for j in sorted(self.self_sum):
            out[name(set_name, "da_self", j)] = self.self_sum[j] / max(self.self_n[j], 1e-12)
        return out


@contextlib.contextmanager
def _eager(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` without the per-module ``torch.compile`` of OLMo-core (``Module.compile``)."""
    saved = []
    for m in model.modules():
        impl = getattr(m, "_compiled_call_impl", None)
        if impl is not None:
            saved.append((m, impl))
            m._compiled_call_impl = None
    try:
        yield
    finally:
        for m, impl in saved:
            m._compiled_call_impl = impl


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, T) next-token CE in fp32."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
    return ce.view(labels.shape)


def depth_profile(
    model: torch.nn.Module, input_ids: torch.Tensor, label_mask: torch.Tensor | None = None
) -> DepthProfile:
    """The depth profile of one batch (sums; combine batches with :meth:`DepthProfile.add`)."""
    return depth_profiles(model, input_ids, label_mask, ["all"] * input_ids.shape[0])["all"]


@torch.no_grad()
def depth_profiles(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    label_mask: torch.Tensor | None,
    groups: list[str],
) -> dict[str, DepthProfile]:
    """Per group of rows (``groups[row]``, e.g. the eval set of each instance) the depth profile
    of one batch, from one forward pass.

    ``label_mask``: input-side mask as in OLMo-core batches (True: a real token); position ``t``
    is scored iff token ``t+1`` is real. ``model``: a built model (OLMo-core's ``Transformer``
    for the baseline, :class:`~olmoablate.models.transformer.AblationTransformer` otherwise).
    """
    mask = torch.ones_like(input_ids, dtype=torch.bool) if label_mask is None else label_mask
    target = F.pad(mask[:, 1:].bool(), (0, 1), value=False).to(input_ids.device)
    labels = F.pad(input_ids[:, 1:], (0, 1), value=0)
    arch = getattr(model, "arch", None)
    looped = getattr(arch, "looped", None)
    unit = "loop" if looped is not None else "layer"
    ces: list[torch.Tensor] = []
    m = cast(Any, model)
    was_training = model.training
    model.eval()
    record = arch is not None and arch.depth_attention is not None
    if record:
        m.depth_weights = {}
    hooks = []
    try:
        with _eager(model):
            if looped is not None:
                for logits in m.forward_all_loops(input_ids, looped.loops):
                    ces.append(_ce(logits, labels))
            else:

                def lens(h: Any) -> None:
                    if isinstance(h, tuple):  # SiameseNorm (X, Y): the model's own merge
                        h = m._merge_streams(h[0], h[1])
                    ces.append(_ce(m.lm_head(h), labels))

                def emb_hook(_mod: Any, _inp: Any, out: Any) -> None:
                    h = out * m.embed_scale if m.embed_scale is not None else out
                    if m.embedding_norm is not None:
                        h = m.embedding_norm(h)
                    lens((h, h) if arch is not None and arch.siamese_norm is not None else h)

                hooks.append(m.embeddings.register_forward_hook(emb_hook))
                for block in m.blocks.values():
                    hooks.append(block.register_forward_hook(lambda _m, _i, out: lens(out)))
                model(input_ids)
        out: dict[str, DepthProfile] = {}
        for name in dict.fromkeys(groups):
            rows = torch.tensor([g == name for g in groups], device=target.device)
            tgt = target & rows[:, None]
            prof = out[name] = DepthProfile(unit=unit, tokens=float(tgt.sum()))
            prof.ce_sum = [float(ce.masked_select(tgt).sum()) for ce in ces]
            if record:
                _add_weights(prof, m.depth_weights, tgt)
    finally:
        for hk in hooks:
            hk.remove()
        if record:
            m.depth_weights = None
        model.train(was_training)
    return out


def _add_weights(
    prof: DepthProfile,
    weights: dict[int, tuple[tuple[int, ...], torch.Tensor]],
    target: torch.Tensor,
) -> None:
    w_mask = target.to(torch.float32)
    n = float(w_mask.sum())
    for u, (sources, alpha) in weights.items():
        per = (alpha.float() * w_mask).sum(dim=(1, 2))  # (|S| + 1,) own layer first
        prof.self_sum[u] = prof.self_sum.get(u, 0.0) + float(per[0])
        prof.self_n[u] = prof.self_n.get(u, 0.0) + n
        for j, s in zip(sources, per[1:].tolist(), strict=True):
            prof.da_sum[j] = prof.da_sum.get(j, 0.0) + s
            prof.da_n[j] = prof.da_n.get(j, 0.0) + n
