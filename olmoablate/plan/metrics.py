"""Metric names, defined once: what the training job records and the report and gate read.

Why here: a metric is written by one stage (OLMo-core's trainer and our callbacks, into
``metrics.jsonl``) and read by others (report, gate, validate checking a gate's ``metric``). A name
spelled twice drifts; a renamed metric must fail at one place. The names that OLMo-core itself
records (``train/CE loss``, ``optim/total grad norm``, ``throughput/...``) are OLMo-core 3.0's.

Looped models are also scored at other loop counts; those passes carry the suffix
``" (loops=<n>)"`` (:func:`with_loops` / :func:`split_loops`).
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: OLMo-core's training loss (cross-entropy, nats/token) and perplexity.
CE_LOSS = "train/CE loss"
PPL = "train/PPL"
#: OLMo-core's optimizer metrics.
GRAD_NORM = "optim/total grad norm"
STEP_SKIPPED = "optim/step skipped"
#: OLMo-core's throughput metrics (the FLOPs axis and tokens/s/device).
TOTAL_PFLOPS = "throughput/total petaflops"
DEVICE_TPS = "throughput/device/TPS"
#: Ours (olmoablate.run.callbacks): the loop count in force and each loop's state norm.
LOOPS = "train/loops"
#: Peak memory of the step, max over ranks (the training job records it with OLMo-core's max
#: reduction; metrics.jsonl and summary.json carry it as ``peak_memory_gb``).
PEAK_MEMORY = "system/peak memory (GB, max over ranks)"
H_NORM_PREFIX = "train/H norm"
#: Ours (olmoablate.run.records, one key of each metrics.jsonl row): the step's wall time
#: (training work only, synchronised on the device), its process CPU time, the step's index in
#: its attempt (1 = first step after a start or resume) and the step's peak memory in GB.
STEP_TIME = "step_time_s"
#: ... and the tokens trained through the step (step x global batch size: the report's x axis).
TOKENS = "tokens"
STEP_CPU_TIME = "step_cpu_time_s"
STEP_IN_ATTEMPT = "step_in_attempt"
PEAK_MEMORY_GB = "peak_memory_gb"
#: Steps of every attempt that are warm-up (compilation, cold caches, the first checkpoint
#: load), never steady state: left out of summary.json's mean step time by the training job and
#: out of the step-time overhead by the report (``step_in_attempt <= ATTEMPT_WARMUP_STEPS``).
ATTEMPT_WARMUP_STEPS = 5
#: Every evaluation metric starts with this (OLMo-core's evaluator callbacks' prefix).
EVAL_PREFIX = "eval/"
LM_EVAL_PREFIX = "eval/lm/"
DOWNSTREAM_PREFIX = "eval/downstream/"

_LOOPS_SUFFIX = re.compile(r"^(?P<name>.+) \(loops=(?P<n>\d+)\)$")
_H_NORM = re.compile(r"^train/H norm \(loop (?P<t>\d+)\)$")


def h_norm(loop: int) -> str:
    """``train/H norm (loop <t>)`` for loop ``t`` (1-based)."""
    return f"{H_NORM_PREFIX} (loop {loop})"


def h_norm_loop(name: str) -> int | None:
    """The loop of an :func:`h_norm` name, None for any other name."""
    m = _H_NORM.match(name)
    return int(m.group("t")) if m else None


def lm_eval(set_name: str, metric: str = "CE loss") -> str:
    """``eval/lm/<set>/<metric>``: OLMo-core's LM evaluator names (CE loss, PPL, tokens)."""
    return f"{LM_EVAL_PREFIX}{set_name}/{metric}"


def downstream(task: str, metric: str) -> str:
    """``eval/downstream/<task> (<metric>)``: OLMo-core's downstream evaluator names."""
    return f"{DOWNSTREAM_PREFIX}{task} ({metric})"


#: OLMo-core 3.0 ``DownstreamEvaluator.metric_type_to_label``: ai2-olmo-eval metric key -> the
#: suffix OLMo-core writes (``eval/downstream/<task> (<suffix>)``).
DOWNSTREAM_LABELS: dict[str, str] = {
    "f1_v1": "F1 score",
    "acc_v1": "accuracy",
    "len_norm_v1": "length-normalized accuracy",
    "pmi_dc_v1": "PMI-DC accuracy",
    "ce_loss_v1": "CE loss",
    "bpb_v1": "BPB",
    "soft_v1": "soft loss",
    "soft_log_v1": "log soft loss",
    "f1_v2": "F1 score v2",
    "acc_v2": "accuracy v2",
    "len_norm_v2": "length-normalized accuracy v2",
    "pmi_dc_v2": "PMI-DC accuracy v2",
    "ce_loss_v2": "CE loss v2",
    "bpb_v2": "BPB v2",
    "soft_v2": "soft loss v2",
    "soft_log_v2": "log soft loss v2",
}


def downstream_suffixes(metric_type: str | None) -> list[str]:
    """The suffixes a task of ai2-olmo-eval ``metric_type`` records (``ICLMetric.compute``:
    f1, ce_loss and bpb tasks report only that metric; every other task reports its own
    accuracy plus CE loss, BPB, soft and log-soft loss). None (unknown type): every suffix."""
    if metric_type is None:
        return list(DOWNSTREAM_LABELS.values())
    keys = [metric_type] if metric_type in {"f1", "ce_loss", "bpb"} else [
        metric_type, "ce_loss", "bpb", "soft", "soft_log"
    ]
    return [DOWNSTREAM_LABELS[f"{k}_{v}"] for k in keys for v in ("v1", "v2")
            if f"{k}_{v}" in DOWNSTREAM_LABELS]


def split_downstream(name: str) -> tuple[str, str] | None:
    """``eval/downstream/<task> (<suffix>)`` -> (task, suffix); None for any other name."""
    if not name.startswith(DOWNSTREAM_PREFIX):
        return None
    base, _ = split_loops(name)
    m = re.fullmatch(r"(?P<task>\S+) \((?P<suffix>[^()]+)\)", base[len(DOWNSTREAM_PREFIX):])
    return (m.group("task"), m.group("suffix")) if m else None


def with_loops(name: str, loops: int) -> str:
    """``<name> (loops=<n>)``: a metric of a looped model scored at loop count ``loops``."""
    return f"{name} (loops={int(loops)})"


def split_loops(name: str) -> tuple[str, int | None]:
    """The inverse of :func:`with_loops`: (base name, loop count), or (name, None)."""
    m = _LOOPS_SUFFIX.match(name)
    if m is None:
        return name, None
    return m.group("name"), int(m.group("n"))


def is_eval(name: str) -> bool:
    return name.startswith(EVAL_PREFIX)


def is_lm_ce(name: str) -> bool:
    """An LM eval set's CE loss (``eval/lm/<set>/CE loss``), at the trained loop count."""
    return name.startswith(LM_EVAL_PREFIX) and name.endswith("/CE loss")


def gate_metrics(lm_sets: list[str]) -> set[str]:
    """Metrics a gate may decide on besides downstream ones: train and LM-eval loss and PPL."""
    names = {CE_LOSS, PPL}
    for s in lm_sets:
        names |= {lm_eval(s, "CE loss"), lm_eval(s, "PPL")}
    return names


# The loss-spike rule, shared by the job (which stops on it) and the report (which counts): a loss
# ``factor`` std above the mean of the previous ``window`` *and* ``min_relative_jump`` above it
# (mean + 3·std alone fires on Gaussian noise every ~750 steps). Non-finite losses are divergence,
# never in the window. Streaming and vectorised forms; a test checks they agree point for point.

#: The rule's defaults, defined only here: the spec's ``training.stability`` (plan/schema.py),
#: the training job's StabilityCallback and the report's loss_spikes all import them.
DEFAULT_WINDOW = 50
DEFAULT_FACTOR = 3.0
DEFAULT_MIN_RELATIVE_JUMP = 0.05


def _is_spike(history: Sequence[float], loss: float, factor: float, min_rel: float) -> bool:
    n = len(history)
    mean = sum(history) / n
    var = sum((x - mean) ** 2 for x in history) / n
    std = math.sqrt(var)
    return loss > mean + factor * std and loss > mean * (1.0 + min_rel) and loss - mean > 0


@dataclass
class SpikeDetector:
    """Streaming form: feed losses in step order; ``update`` returns True on a spike."""

    window: int = DEFAULT_WINDOW
    factor: float = DEFAULT_FACTOR
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP
    history: deque[float] = field(default_factory=deque)

    def update(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return False
        spike = len(self.history) >= self.window and _is_spike(
            self.history, loss, self.factor, self.min_relative_jump
        )
        self.history.append(loss)
        while len(self.history) > self.window:
            self.history.popleft()
        return spike

    def state(self) -> list[float]:
        return list(self.history)

    def load(self, history: Iterable[float]) -> None:
        self.history = deque(list(history)[-self.window :])


def spike_indices(
    losses: Sequence[float],
    window: int = DEFAULT_WINDOW,
    factor: float = DEFAULT_FACTOR,
    min_relative_jump: float = DEFAULT_MIN_RELATIVE_JUMP,
) -> list[int]:
    """Vectorised form for the report: indices (into ``losses``) of spikes, same rule.

    Rolling sums of the previous ``window`` values come from cumulative sums of centred values
    (for precision). The cheap necessary conditions (above the mean, and by the relative jump)
    are tested first on every step; the standard deviation is formed only where they hold, with
    exactly the expressions a full evaluation would use, so the answer is the same bit for bit
    at a fraction of the passes over the (100k-step) array."""
    import numpy as np

    x = np.asarray(losses, dtype=np.float64)
    finite = np.isfinite(x)
    idx_f: np.ndarray | None = None
    xf = x
    if not finite.all():
        idx_f = np.flatnonzero(finite)
        xf = x[finite]
    n = int(xf.size)
    if n <= window:
        return []
    centre = float(xf.mean())
    v0 = xf - centre
    c1 = np.empty(n + 1)
    c1[0] = 0.0
    np.cumsum(v0, out=c1[1:])
    mean0 = c1[window:n] - c1[: n - window]
    mean0 /= window
    mean = mean0 + centre
    cur = xf[window:]
    cand = np.flatnonzero((cur > mean * (1.0 + min_relative_jump)) & (cur > mean))
    if cand.size == 0:
        return []
    c2 = np.empty(n + 1)
    c2[0] = 0.0
    np.square(v0, out=v0)
    np.cumsum(v0, out=c2[1:])
    s2 = c2[window + cand] - c2[cand]
    m0 = mean0[cand]
    std = np.sqrt(np.maximum(s2 / window - m0 * m0, 0.0))
    hit = cand[cur[cand] > mean[cand] + factor * std]
    pos = hit + window
    return [int(k) for k in (pos if idx_f is None else idx_f[pos])]
