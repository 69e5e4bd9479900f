"""report.compare: per-pair comparisons at matched tokens.

Owns: matched-token/FLOP alignment (``align``), the pair comparison and its result (``pair``:
``PairResult``, ``compare_pair``, ``ArmHealth``), cost rows (``cost``), execution parity
(``execution``), looped-variant extras (``looped``), eval coverage (``evalcover``) and the
pairing-certificate checks (``pairing``).

May import: :mod:`olmoablate.report.read` and the contract. Never ``gate`` or ``render``: a
comparison is a measurement, the same for every gate that reads it.
"""
