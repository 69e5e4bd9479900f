"""The architecture-block interface (torch half); the bundled halves are in :mod:`.bundled`.

A block's torch-free half (:class:`olmoablate.plan.blocks.Block`) names this half by its
``model = "module:attr"``; only the model builder and the training job import it. Its duties:

* ``configure``: edit the OLMo-core ``TransformerConfig`` OLMo 3 was built with (the depth is
  already the blocks' ``physical_layers``): replace ``config.block`` with a block-config subclass,
  ``config.block.sequence_mixer`` with an attention-config subclass, set a field... Return the
  new config. A block that needs model-level behaviour (several streams, loops, cross-layer
  state) returns :func:`ablation_config` of it, whose model is
  :class:`olmoablate.models.transformer.AblationTransformer`.
* explicit init: every new parameter is initialised in its module's ``reset_parameters`` (or
  the model's ``init_weights``), deterministically from ``init_seed``, so both arms of a pair see
  the same weights where they share modules.
* ``extra_model_params``: parameters of model-level modules outside ``blocks`` / the LM head
  (OLMo-core's ``num_params`` counts the rest).
* compile and FSDP units: OLMo-core's TrainModule compiles and shards each ``TransformerBlock``
  (plus embeddings and LM head); modules a block puts *inside* a ``TransformerBlock`` are compiled
  and sharded with it. ``apply_compile`` compiles the block's model-level glue; model-level
  modules stay in OLMo-core's root FSDP unit (there is no per-block FSDP hook yet).
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
