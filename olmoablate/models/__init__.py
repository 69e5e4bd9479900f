"""The bundled model implementations, used by the training job only (:mod:`olmoablate.run`).

``build`` builds the OLMo-core model for a size and an architecture; ``block_model`` is the torch
half of the block interface (docs/blocks.md) and ``bundled`` the bundled blocks' halves;
``siamese``, ``depth_attention`` and ``transformer`` hold each variant's equations and forward;
``generate`` decodes with a per-layer KV cache.
"""
