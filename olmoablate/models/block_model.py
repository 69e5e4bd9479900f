"""The architecture-block interface (torch half); the bundled halves are in :mod:`.bundled`.

A block's torch-free half (:class:`olmoablate.plan.blocks.Block`) names this half by its
``model = "module:attr"``; only the model builder and the training job import it. Its duties
(``configure``, explicit init, ``extra_model_params``, compile and FSDP units) are in
docs/blocks.md, "The torch half"; a block that needs model-level behaviour (several streams, loops,
cross-layer state) returns :func:`~olmoablate.models.bundled.ablation_config` of its config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from olmoablate.plan.blocks import get_block, load_ref

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from olmo_core.nn.transformer import TransformerConfig

    from olmoablate.plan.sizes import SizeDims


class BlockModel:
    """The torch half of a block: override what the block changes; export one instance."""

    def configure(
        self, config: TransformerConfig, opts: Any, dims: SizeDims, arch: dict[str, Any]
    ) -> TransformerConfig:
        """The model config with this block applied (``arch``: the whole plan mapping)."""
        return config

    def extra_model_params(self, opts: Any, config: TransformerConfig) -> int:
        """Parameters of model-level modules this block adds outside blocks and the LM head."""
        return 0

    def apply_compile(self, model: torch.nn.Module, opts: Any) -> None:
        """Compile this block's model-level glue (the blocks themselves are OLMo-core's units)."""


def model_part(key: str) -> BlockModel:
    """The torch half of block ``key`` (its ``model`` reference, imported now)."""
    block = get_block(key)
    part = load_ref(block.model, f"block {key!r}.model")
    if isinstance(part, type) and issubclass(part, BlockModel):
        part = part()
    if not isinstance(part, BlockModel):
        raise TypeError(
            f"block {key!r}: {block.model!r} is not an olmoablate.models.block_model.BlockModel"
        )
    return part


#: Set while the job's cost proof (:mod:`olmoablate.run.proof`) runs a replica on fake tensors.
_COST_PROOF = False


def in_cost_proof() -> bool:
    """True while the job's FLOP proof runs the model on fake tensors (shapes, no values).

    Why: a forward that branches on a tensor's *values* (``if not torch.isfinite(x).all():``)
    cannot run there - fake tensors have no values - so the proof would refuse the block. A check
    that only guards (raises or logs, computes nothing the step's cost depends on) may skip itself
    with ``if not in_cost_proof() and not torch.isfinite(x).all(): ...``; anything that computes
    should be written without Python branching (``torch.where``, ``torch.nan_to_num``).
    """
    return _COST_PROOF
