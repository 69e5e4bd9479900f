"""report.gate: pure decisions, from compared pairs to verdicts.

Owns: the evidence the gate reads off a comparison (``evidence``, ``inputs``), the noise source
(``noise``), the step-time overhead statistic (``overhead``), the fixed-sample verdict
(``verdict``), sequential designs (``sequential``, ``design_gate``), the family-wise correction
(``family``) and the track record across sizes (``track``). Functions take plain data and return
new values; nothing here writes a file or edits an argument.

May import: :mod:`olmoablate.report.compare`, :mod:`olmoablate.report.read` and the contract.
Never ``render``.
"""
