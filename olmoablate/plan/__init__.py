"""plan: a spec file in, ``results/<spec>/plan.json`` out — everything decided before compute.

The first stage of the pipeline (docs/design.md). It owns the spec language (``schema``,
``gate``: the gate's pre-registration), loading a spec (``load``: YAML with line numbers, ``--set``
overrides; ``checks``: cross-field checks and paths; ``tokens``: tokenizers and token files),
the architecture blocks' torch-free halves (``blocks``: the interface and registry; ``arch``: the
bundled blocks), sizes and cost (``sizes``, ``accounting``), expansion into matched pairs
(``expand``, ``resolved``), run identity and the pairing certificate (``identity``), the store
shared by specs (``store``, ``explain``), what ``plan`` says before spending (``feasibility``),
the typed plan.json (``planfile``), the results folder's layout and the names every stage shares
(``layout``, ``names``, ``metrics``) and the ``validate``/``plan`` commands (``validate``).
Imports only the base modules (errors, io, stats); never torch, pandas or matplotlib.
"""
