"""Metric names, defined once: what the training job records and the report and gate read (a
name spelled twice drifts). OLMo-core's own names are OLMo-core 3.0's. Looped models scored at
other loop counts carry the suffix ``" (loops=<n>)"`` (:func:`with_loops` / :func:`split_loops`).
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
#: Peak memory of the step, max over ranks (as ``peak_memory_gb`` in metrics.jsonl/summary.json).
PEAK_MEMORY = "system/peak memory (GB, max over ranks)"
H_NORM_PREFIX = "train/H norm"
#: Ours (olmoablate.run.records, keys of each metrics.jsonl row): the step's wall time (synchronised
#: on the device), tokens trained through it (the report's x axis), its process CPU time, its index
#: in its attempt (1 = first after a start or resume) and its peak memory in GB.
STEP_TIME = "step_time_s"
TOKENS = "tokens"
STEP_CPU_TIME = "step_cpu_time_s"
STEP_IN_ATTEMPT = "step_in_attempt"
PEAK_MEMORY_GB = "peak_memory_gb"
#: Warm-up steps of every attempt (compilation, cold caches, checkpoint load): left out of the
#: mean step time and the report's step-time overhead.
ATTEMPT_WARMUP_STEPS = 5
#: Every evaluation metric starts with this (OLMo-core's evaluator callbacks' prefix).
EVAL_PREFIX = "eval/"
LM_EVAL_PREFIX = "eval/lm/"
DOWNSTREAM_PREFIX = "eval/downstream/"

#: The effective-depth diagnostic (olmoablate.models.depth, docs/depth.md), scored by the LM
#: evaluator: ``eval/depth/<set>/<kind>_<i>[ CE]`` (:func:`depth_metric` / :func:`split_depth`).
DEPTH_PREFIX = "eval/depth/"
#: kinds: logit-lens CE after block i (0 = embeddings), CE after loop t (Looped OLMo),
#: Depth-Attention's mean weight on source layer j and layer l's weight on itself, and the first
#: layer (or loop) within ``DEPTH_MARGIN_NATS`` of the final CE.
DEPTH_KINDS = ("layer", "loop", "da_weight", "da_self")
DEPTH_MARGIN_NATS = 0.05
DEPTH_FIRST = f"first_within_{DEPTH_MARGIN_NATS:g}"
_DEPTH = re.compile(
    r"^eval/depth/(?P<set>[^/]+)/(?:(?P<kind>layer|loop|da_weight|da_self)_(?P<i>\d+)(?: CE)?"
    r"|(?P<first>first_within_[0-9.]+))$"
)

_LOOPS_SUFFIX = re.compile(r"^(?P<name>.+) \(loops=(?P<n>\d+)\)$")
_H_NORM = re.compile(r"^train/H norm \(loop (?P<t>\d+)\)$")


def h_norm(loop: int) -> str:
    return f"{H_NORM_PREFIX} (loop {loop})"


def h_norm_loop(name: str) -> int | None:
    """The loop of an :func:`h_norm` name, else None."""
    m = _H_NORM.match(name)
    return int(m.group("t")) if m else None


def depth_first_index(unit: str) -> int:
    """The index of a depth profile's first entry: layer 0 is the embeddings' stream (unit
    ``layer``); loops count from 1 (unit ``loop``)."""
    return 1 if unit == "loop" else 0


def depth_metric(set_name: str, kind: str, i: int | None = None) -> str:
    """A depth-diagnostic name: ``kind`` in DEPTH_KINDS with its index (CE kinds end in " CE"),
    or DEPTH_FIRST without one."""
    if kind == DEPTH_FIRST:
        return f"{DEPTH_PREFIX}{set_name}/{kind}"
    if kind not in DEPTH_KINDS or i is None:
        raise ValueError(f"not a depth metric kind: {kind!r} (index {i})")
    ce = " CE" if kind in ("layer", "loop") else ""
    return f"{DEPTH_PREFIX}{set_name}/{kind}_{int(i)}{ce}"


def split_depth(name: str) -> tuple[str, str, int | None] | None:
    """:func:`depth_metric`'s inverse: (set, kind, index), else None."""
    m = _DEPTH.match(name)
    if m is None:
        return None
    if m.group("first"):
        return m.group("set"), m.group("first"), None
    return m.group("set"), m.group("kind"), int(m.group("i"))


def lm_eval(set_name: str, metric: str = "CE loss") -> str:
    return f"{LM_EVAL_PREFIX}{set_name}/{metric}"


def downstream(task: str, metric: str) -> str:
    return f"{DOWNSTREAM_PREFIX}{task} ({metric})"


#: OLMo-core 3.0 ``DownstreamEvaluator.metric_type_to_label``: ai2-olmo-eval metric key -> the
#: suffix OLMo-core writes (``eval/downstream/<task> (<suffix>)``).
_LABELS = {
    "f1": "F1 score",
    "acc": "accuracy",
    "len_norm": "length-normalized accuracy",
    "pmi_dc": "PMI-DC accuracy",
    "ce_loss": "CE loss",
    "bpb": "BPB",
    "soft": "soft loss",
    "soft_log": "log soft loss",
}
DOWNSTREAM_LABELS: dict[str, str] = {
    **{f"{k}_v1": v for k, v in _LABELS.items()},
    **{f"{k}_v2": f"{v} v2" for k, v in _LABELS.items()},
}


def downstream_suffixes(metric_type: str | None) -> list[str]:
    """The suffixes a task of ai2-olmo-eval ``metric_type`` records (``ICLMetric.compute``: f1,
    ce_loss and bpb report only that; others add CE loss, BPB, soft losses). None: every one."""
    if metric_type is None:
        return list(DOWNSTREAM_LABELS.values())
    keys = [metric_type] if metric_type in {"f1", "ce_loss", "bpb"} else [
        metric_type, "ce_loss", "bpb", "soft", "soft_log"
    ]
    return [DOWNSTREAM_LABELS[f"{k}_{v}"] for k in keys for v in ("v1", "v2")
            if f"{k}_{v}" in DOWNSTREAM_LABELS]


def split_downstream(name: str) -> tuple[str, str] | None:
    """:func:`downstream`'s inverse: (task, suffix), else None."""
    if not name.startswith(DOWNSTREAM_PREFIX):
        return None
    base, _ = split_loops(name)
    m = re.fullmatch(r"(?P<task>\S+) \((?P<suffix>[^()]+)\)", base[len(DOWNSTREAM_PREFIX):])
    return (m.group("task"), m.group("suffix")) if m else None


def with_loops(name: str, loops: int) -> str:
    return f"{name} (loops={int(loops)})"


def split_loops(name: str) -> tuple[str, int | None]:
    """:func:`with_loops`' inverse: (base name, loop count), or (name, None)."""
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
# Its defaults are defined only here (the spec, the job and the report import them).
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
    """Vectorised form for the report: indices (into ``losses``) of spikes, same rule. Rolling
    sums come from cumulative sums of centred values (precision); the std is formed only where
    the cheap necessary conditions hold, with the full evaluation's expressions (bit for bit)."""
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
