"""report: a results folder in, report.md/report.html/comparison.csv/gate.json out.

The last stage (docs/design.md). A straight stack, each layer importing only those below it
(``report-stack`` in pyproject.toml):

- ``commands``: the ``report`` and ``watch`` commands;
- render: ``document`` (the document built once; templates and writers), ``cards`` (one verdict
  card per gate, its plot, the statistics in words), ``plots``;
- orchestration: ``assemble`` (measure every pair once, decide each gate, plan the next sizes)
  and ``board`` (every spec of a store; the ``board`` command);
- the gate's decision, one concept per module: ``evidence`` (what the gate reads off a
  comparison, and the noise source of a results folder), ``verdict`` (fixed-sample verdict of one
  variant, the verdict words), ``sequential`` (pre-registered designs, Holm over the family, and
  ``evaluate_gate``: one gate block to its headline verdict), ``noise`` (where the noise comes
  from, the estimate), ``overhead`` (step-time ratio interval), ``track`` (the track record);
- compare: ``compare`` (per-pair comparisons at matched tokens), ``pairing`` (certificate,
  execution parity, cost rows, eval coverage);
- read: ``collect`` (one results folder, tolerating every gap, and its metrics store),
  ``prereg`` (the pre-registration check: the gate whose hash plan recorded; reused runs),
  ``fingerprints`` (the data-order rule), ``frames`` (the notebook frames of
  :mod:`olmoablate.results`).

The gate's pre-registration is written by the plan (:mod:`olmoablate.plan.gate`).
"""
