"""report.read: load one results folder and check it.

Owns: ``plan.json`` and each run's files (``collect``), the metrics store (``metrics_store``:
each run's ``metrics.arrow``, the one cache of its metrics.jsonl) and the notebook frames built on
it (``metric_frames``, for :mod:`olmoablate.results`), data-order fingerprints
(``fingerprints``), W&B links (``links``), run-identity and reuse checks (``reuse``),
pre-registration (``prereg``), and the plain data types those produce (``curve``: one arm's
y(x) and the cumulative-FLOPs axis; ``timing``: the per-step timing column names).

May import: the contract, ``olmoablate.io``/``errors``/``console`` and the standard/numeric
libraries. Never ``compare``, ``gate`` or ``render``: reading knows nothing of decisions.
"""
