"""Weights & Biases logging, the way W&B users read an ablation: on tokens, grouped by pair.

Why these choices:

* Every comparison the tool makes is at matched tokens, so every metric's x-axis is ``tokens``
  (``define_metric("*", step_metric="tokens")``, W&B's convention for a custom x-axis), and the
  cumulative ``train FLOPs`` is logged with every row so a chart can switch to a compute axis
  (FLOPs-matched pairs). ``train FLOPs`` comes from `olmoablate.contract.accounting`, the plan's own
  FLOPs convention, curriculum-aware, so the axis means the same as the plan's numbers.
* group = spec/group (a baseline and all the variants compared with it: same size and seed),
  job_type = arm, tags for spec, size, seed and arm: the W&B table groups and filters a whole
  ablation without custom columns. config = the plan entry, certificate included.
* One W&B run per arm across requeues: the id is derived from spec name and run id and
  ``resume="allow"``, so every attempt of the run continues the same W&B run.
* Optional and offline by default: ``WANDB_MODE`` in the environment wins over the plan, and any
  failure to import or talk to wandb only logs a warning. ``runs/<id>/wandb.json`` records the
  id, project and (online) URL, which `report` and `olmoablate.results` link to.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from olmo_core.distributed.utils import get_rank
from olmo_core.train.callbacks import Callback

from olmoablate.contract.plan import RunEntry
from olmoablate.io import write_json_atomic

log = logging.getLogger(__name__)

#: W&B-only axis names (never in metrics.jsonl): tokens seen and cumulative training FLOPs.
TOKENS = "tokens"
TRAIN_FLOPS = "train FLOPs"


def wandb_id(spec_name: str, run_id: str) -> str:
    """Stable W&B id, so a requeued job resumes the same W&B run."""
    return hashlib.sha1(f"{spec_name}/{run_id}".encode()).hexdigest()[:16]


def tags_of(spec_name: str, run: RunEntry) -> list[str]:
    """Filterable tags: spec, size, seed, arm (W&B caps a tag at 64 characters)."""
    tags = [f"spec:{spec_name}", f"size:{run.size}", f"seed:{run.seed}", f"arm:{run.arm}"]
    return [t[:64] for t in tags]


class FlopsAxis:
    """Cumulative training FLOPs after ``step`` steps, from the plan entry (curriculum-aware)."""

    def __init__(self, run: RunEntry) -> None:
        self.dims = run.size_dims
        self.arch = run.architecture
        self.seq = run.training.sequence_length
        self.gbs = run.training.global_batch_size

    def __call__(self, step: int) -> float:
        from olmoablate.contract.accounting import total_train_flops

        return float(total_train_flops(self.dims, self.arch, self.seq, self.gbs, step))


@dataclass
class WandBLoggerCallback(Callback):
    """One W&B run per arm (rank 0 only); see the module docstring."""

    priority: ClassVar[int] = 3

    run_id: str = ""
    wandb_id: str = ""
    project: str = "olmoablate"
    entity: str | None = None
    group: str | None = None
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    mode: str = "offline"
    directory: str = "."
    #: where the id/project/URL are recorded for `report` (None: not recorded)
    link_path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    global_batch_size: int = 0
    #: cumulative train FLOPs after a step (None: not logged)
    flops: Any = None
    _run: Any = None

    def pre_train(self) -> None:
        if get_rank() != 0:
            return
        mode = os.environ.get("WANDB_MODE") or self.mode
        if mode == "disabled":
            return
        try:
            import wandb

            Path(self.directory).mkdir(parents=True, exist_ok=True)
            run = wandb.init(
                id=self.wandb_id,
                name=self.run_id,
                resume="allow",
                project=self.project,
                entity=self.entity,
                group=self.group,
                job_type=self.job_type,
                tags=self.tags,
                config=self.config,
                mode=mode,  # type: ignore[arg-type]
                dir=self.directory,
                reinit="create_new",  # several arms trained in one process (tests, local pool)
            )
            run.define_metric(TOKENS)
            run.define_metric(TRAIN_FLOPS, step_metric=TOKENS)
            run.define_metric("*", step_metric=TOKENS)
            self._run = run
            self._write_link(mode)
        except Exception as err:  # noqa: BLE001 - wandb is optional by design
            log.warning(f"wandb disabled for this run ({type(err).__name__}: {err})")
            self._run = None

    def _write_link(self, mode: str) -> None:
        run = self._run
        if self.link_path is None:
            return
        url = getattr(run, "url", None) if mode == "online" else None
        write_json_atomic(
            self.link_path,
            {
                "id": run.id,
                "project": self.project,
                "entity": getattr(run, "entity", None) or self.entity,
                "group": self.group,
                "job_type": self.job_type,
                "mode": mode,
                "url": url or None,
            },
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if self._run is None:
            return
        row = {k: float(v) for k, v in metrics.items()}
        row[TOKENS] = float(step * self.global_batch_size)
        if self.flops is not None:
            row[TRAIN_FLOPS] = self.flops(step)
        try:
            self._run.log(row, step=step)
        except Exception as err:  # noqa: BLE001
            log.warning(f"wandb logging failed, disabling ({err})")
            self._run = None

    def close(self) -> None:
        if self._run is not None:
            try:
                self._run.finish()
            except Exception as err:  # noqa: BLE001
                log.warning(f"wandb finish failed ({err})")
            self._run = None
