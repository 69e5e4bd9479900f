"""``build_model``: an initialized OLMo-core model for a size and an ``arch`` mapping, on CPU.

The training job does not call this (it builds ``build_model_config(...)`` on the meta device and
lets OLMo-core's TrainModule parallelize and initialize it); this is for tests, benchmarks,
decoding and the accounting checks, where a ready-to-run model is wanted.
"""

from __future__ import annotations

from typing import Any

import torch

from olmoablate.contract.arch import Architecture
from olmoablate.contract.sizes import SizeDims
from olmoablate.models.config import build_model_config


def build_model(
    size: str | dict[str, Any] | SizeDims,
    arch: dict[str, Any] | Architecture | None,
    *,
    vocab_size: int | None = None,
    init_seed: int = 0,
    attn_backend: str | None = None,
    device: str | torch.device = "cpu",
) -> torch.nn.Module:
    """Build on ``meta`` and initialize exactly as the TrainModule does (``init_weights``)."""
    config = build_model_config(
        size, arch, vocab_size=vocab_size, init_seed=init_seed, attn_backend=attn_backend
    )
    model = config.build(init_device="meta")
    model.init_weights(device=torch.device(device))
    return model


def unique_param_count(model: torch.nn.Module) -> int:
    """Parameters counted once each, however often they are used (tied or looped weights)."""
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = p.numel()
    return sum(seen.values())


def param_counts(model: torch.nn.Module) -> dict[str, int]:
    """``total`` / ``non_embedding`` / ``unique`` (= stored) parameters and ``effective``.

    ``effective`` counts the looped body once per loop (b = the model's current loop count), i.e.
    the size of the equivalent unrolled model; for non-looped models it equals ``unique``.
    """
    unique = unique_param_count(model)
    embeddings = model.embeddings.weight.numel()  # type: ignore[union-attr]
    effective = unique
    looped = getattr(getattr(model, "arch", None), "looped", None)
    if looped is not None:
        body = sum(p.numel() for p in model.blocks.parameters())  # type: ignore[union-attr]
        effective = unique + (int(model.current_loops) - 1) * body  # type: ignore[union-attr]
    return {
        "total": unique,
        "non_embedding": unique - embeddings,
        "unique": unique,
        "effective": effective,
    }
