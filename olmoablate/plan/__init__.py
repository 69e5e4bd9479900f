"""plan: a spec file in, ``results/<spec>/plan.json`` out — everything decided before compute.

The first stage of the pipeline (docs/design.md): the spec language, loading and checks, the
blocks' torch-free halves, sizes and cost, expansion into matched pairs, run identity and the
store, feasibility, the typed plan.json, the results layout and the names every stage shares.
Imports only the base modules (errors, io, stats); never torch, pandas or matplotlib.
"""
