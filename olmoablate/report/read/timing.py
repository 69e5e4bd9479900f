"""The training job's per-step timing columns, as the report reads them from metrics files.

Why in ``read``: the loader keeps these columns of every run; the overhead statistic
(:mod:`olmoablate.report.gate.overhead`) and the cost rows read them back by these names.
"""

from __future__ import annotations

#: The training job's per-step timing columns (train/records.py writes them into metrics.jsonl):
#: wall time, process CPU time, and the step's index within its attempt (1 after a resume).
WALL, CPU = "step_time_s", "step_cpu_time_s"
ATTEMPT = "step_in_attempt"
#: Steps of every attempt (start or resume) that are warm-up; the training job's
#: ``MetricsJSONLCallback.WARMUP_STEPS`` (a test keeps the two equal; the report has no torch).
ATTEMPT_WARMUP_STEPS = 5
