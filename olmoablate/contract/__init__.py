"""The contract between the stages: what spec, plan, launch, train and report all agree on.

Why one layer: every stage reads only what the previous one wrote under ``results/<spec>/``, so
the shape of those files (the plan and its run entries, the results layout, the metric names),
the spec's section models whose values the plan records, the architecture blocks, the sizes and
the cost accounting are defined here once. This package imports no stage and never torch,
pandas or matplotlib (``validate``/``plan``/``status`` start fast on a login node); the layering
is checked by import-linter (``[tool.importlinter]`` in pyproject.toml).
"""
