"""The bundled model implementations: OLMo 3 baseline, SiameseNorm, Depth-Attention, Looped.

Public API (imported lazily so that ``import olmoablate.models`` does not pull in torch)::

    build_model(size, arch, *, vocab_size=None, init_seed=0) -> torch.nn.Module
    build_model_config(size, arch, *, vocab_size=None, init_seed=0, attn_backend=None)
    unique_param_count(model), param_counts(model)

``arch`` is an :class:`olmoablate.contract.arch.Architecture` or its plan mapping (the blocks and
their rules, e.g. ``DepthAttention.sources`` and ``Looped.loops_at_step``, live in the contract).
See :mod:`.siamese`, :mod:`.depth_attention` and :mod:`.transformer` for the exact equations,
parameter counts and FLOP formulas.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "build_model",
    "build_model_config",
    "param_counts",
    "unique_param_count",
]

_LAZY = {
    "build_model": "olmoablate.models.build",
    "unique_param_count": "olmoablate.models.build",
    "param_counts": "olmoablate.models.build",
    "build_model_config": "olmoablate.models.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'olmoablate.models' has no attribute {name!r}")
