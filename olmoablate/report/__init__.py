"""report: a results folder in, report.md/report.html/comparison.csv/gate.json out.

The last stage (docs/design.md). A straight stack, each layer importing only those below it
(``report-stack`` in pyproject.toml): ``commands`` -> render (``document``, ``cards``, ``plots``)
-> orchestration (``assemble``, ``board``) -> the gate's decision, one concept per module
(``evidence``, ``verdict``, ``sequential``, ``noise``, ``overhead``, ``track``) -> compare
(``compare``, ``pairing``) -> read (``collect``, ``frames``, ``prereg``, ``fingerprints``). Each
module's docstring says what it holds.

The gate's pre-registration is written by the plan (:mod:`olmoablate.plan.gate`).
"""
