"""The training job's per-step timing columns, as the report reads them from metrics files.

Why in ``read``: the loader keeps these columns of every run; the overhead statistic
(:mod:`olmoablate.report.gate.overhead`) and the cost rows read them back by these names.
"""

from __future__ import annotations

from olmoablate.contract import metrics as names

#: The training job's per-step timing columns (named once, in the contract): wall time, process
#: CPU time, and the step's index within its attempt (1 after a resume).
WALL, CPU = names.STEP_TIME, names.STEP_CPU_TIME
ATTEMPT = names.STEP_IN_ATTEMPT
#: Steps of every attempt (start or resume) that are warm-up (defined once, in the contract).
ATTEMPT_WARMUP_STEPS = names.ATTEMPT_WARMUP_STEPS
