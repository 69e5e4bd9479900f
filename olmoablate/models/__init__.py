"""The bundled model implementations: OLMo 3 baseline, SiameseNorm, Depth-Attention, Looped.

Used by the training job only (:mod:`olmoablate.run`). ``build`` builds a model for a size and
an architecture (:func:`olmoablate.models.build.build_model`,
:func:`~olmoablate.models.build.build_model_config`); ``block_model`` is the torch half of the block
interface (docs/blocks.md); ``bundled`` the bundled blocks' torch halves; ``siamese``,
``depth_attention`` and ``transformer`` hold each variant's math in one forward, with the
equations in its docstring; ``generate`` decodes with a per-layer KV cache.
"""
