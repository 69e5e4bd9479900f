"""olmoablate.report: a results folder in, report.md/report.html/comparison.csv/gate.json out.

A straight stack of four sub-packages, each importing only those below it (checked by the
``report-stack`` contract in pyproject.toml):

- :mod:`~olmoablate.report.render`  -- plots, the document and its writers (md, HTML, terminal);
- :mod:`~olmoablate.report.gate.verdict`    -- pure decisions: evidence in, verdicts out;
- :mod:`~olmoablate.report.compare.pair` -- per-pair comparisons at matched tokens;
- :mod:`~olmoablate.report.read`    -- load one results folder and check it.

The top-level modules orchestrate: ``command`` (the CLI), ``gates`` and ``build`` (compare every
pair once, decide each pre-registered gate) and ``board`` (the store-wide table). Synthetic
results folders for tests and benchmarks are test support, in :mod:`olmoablate.testing`.
"""
