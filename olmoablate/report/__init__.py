"""report: a results folder in, report.md/report.html/comparison.csv/gate.json out.

The last stage (docs/design.md). A straight stack, each layer importing only those below it
(``report-stack`` in pyproject.toml):

- render: ``document`` (the document built once; templates and writers), ``cards`` (one verdict
  card per gate, its plot, the statistics in words), ``plots``;
- orchestration: ``assemble`` (measure every pair once, decide each pre-registered gate, plan the
  next sizes) and ``board`` (every spec of a store; the ``board`` command);
- the gate's decision: ``verdict`` (fixed-sample verdict of one variant), ``sequential``
  (pre-registered designs, Holm), ``evidence`` (what the gate reads off a comparison),
  ``noise``, ``overhead`` (step-time ratio), ``track`` (the track record across sizes);
- compare: ``compare`` (per-pair comparisons at matched tokens), ``pairing`` (certificate,
  execution parity, cost rows, eval coverage);
- read: ``collect`` (one results folder, tolerating every gap, and its metrics store),
  ``prereg`` (the registered gate, reused runs), ``fingerprints`` (the data-order rule),
  ``frames`` (the notebook frames of :mod:`olmoablate.results`).

``commands`` holds the ``report`` and ``watch`` commands. The gate's pre-registration is the
plan's (:mod:`olmoablate.plan.gate`); its decision is here.
"""
