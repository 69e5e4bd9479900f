"""Where and how a run executes: the spec's ``topology`` and ``slurm`` sections.

Why its own module: the launcher renders these into sbatch/submitit settings, the training job
into OLMo-core's parallelism and precision, and the accounting into GPU-hours; each default
(GPU data workers, metrics interval, requeue count, signal lead time) is defined here once and
every stage reads it through the plan.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from olmoablate.contract.base import NonNegInt, PosInt, Strict, parse_minutes

#: Execution settings resolved from the topology when the spec leaves them out, following
#: OLMo-core's official OLMo 3 scripts on GPU (docs/gpu-settings.md names the source of each) and
#: the cheapest faithful setting on CPU. This is the only place these defaults live.
GPU_DATA_WORKERS = 8
GPU_METRICS_INTERVAL = 10


def computes_in_bf16(precision: str, topology: Topology) -> bool:
    """The one precision rule: ``bf16`` always, ``auto`` = bf16 on GPU and fp32 on CPU.

    Used by the plan's cost accounting, `validate` and the training job alike, so what is
    costed, what is validated and what is trained can never disagree.
    """
    return precision == "bf16" or (precision == "auto" and topology.on_gpu)


class Topology(Strict):
    """Where and how a run executes. Every field is shared by both arms (pairing certificate).

    ``None`` fields are resolved by ``_resolve`` (so the plan records concrete values):
    ``data_parallel`` -> ``hsdp`` on more than one GPU node (one replica per node, sharded inside
    the node, as OLMo-core's official OLMo 3 7B/32B scripts), else ``fsdp``; ``data_workers`` ->
    8 on GPU (official), 0 on CPU; ``metrics_interval`` (metrics collection, cancel checks,
    fingerprint gathering, non-finite checks) -> 10 steps on GPU (official), 1 on CPU.
    """

    nodes: PosInt = 1
    gpus_per_node: NonNegInt = 8
    cpu_processes: PosInt = 1
    gpu_type: str = "H100"
    gpu_peak_tflops: float = Field(989.0, gt=0)
    assumed_mfu: float = Field(0.4, gt=0, le=1)
    data_parallel: Literal["ddp", "fsdp", "hsdp"] | None = None
    #: FSDP/HSDP wrapping (OLMo-core ``TransformerDataParallelWrappingStrategy``); official 7B: blocks.
    fsdp_wrapping: Literal["full", "blocks", "fine_grained"] = "blocks"
    #: Recompute each block's activations in backward (OLMo-core ``ac_config`` mode ``full``).
    activation_checkpointing: Literal["none", "full"] = "none"
    #: ``auto``: flash_2 when flash-attn is installed, CUDA is used and the run computes in bf16;
    #: torch otherwise. flash_* never run in fp32 (validate rejects it).
    attention_backend: Literal["auto", "torch", "flash_2", "flash_3"] = "auto"
    data_workers: NonNegInt | None = None
    metrics_interval: PosInt | None = None
    #: Memory per GPU in GB, for `validate`'s memory check (default: from slurm.constraint or
    #: gpu_type, `olmoablate.contract.gpus`). A planning fact, not an execution setting: never
    #: written to the plan, so it is no part of any certificate.
    gpu_memory_gb: float | None = Field(None, gt=0, exclude=True)

    @model_validator(mode="after")
    def _resolve(self) -> Topology:
        gpu = self.on_gpu
        if self.data_parallel is None:
            self.data_parallel = "hsdp" if gpu and self.nodes > 1 else "fsdp"
        if self.data_workers is None:
            self.data_workers = GPU_DATA_WORKERS if gpu else 0
        if self.metrics_interval is None:
            self.metrics_interval = GPU_METRICS_INTERVAL if gpu else 1
        return self

    # The derived facts every stage asks of a topology, decided here only (a grep test in
    # tests/contract/test_plan.py keeps ``gpus_per_node > 0`` out of every other module).
    @property
    def on_gpu(self) -> bool:
        """Whether the run trains on CUDA GPUs (``gpus_per_node: 0`` = CPU processes)."""
        return self.gpus_per_node > 0

    @property
    def ranks_per_node(self) -> int:
        """Processes per node: one per GPU, or ``cpu_processes`` on CPU (gloo DDP)."""
        return self.gpus_per_node if self.on_gpu else self.cpu_processes

    @property
    def world_size(self) -> int:
        """Ranks of the whole job (nodes x ranks per node)."""
        return self.nodes * self.ranks_per_node


class Slurm(Strict):
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    #: Minutes (``"D-HH:MM:SS"`` etc. parsed by ``_time``); the plan records it as ``time_min``.
    time: int = Field(60, ge=1)
    constraint: str | None = None
    exclusive: bool = False
    cpus_per_task: PosInt | None = None
    mem_gb: PosInt | None = None
    max_num_timeout: NonNegInt = 3
    signal_delay_s: PosInt = 120
    extra: dict[str, str | int | bool] = {}
    setup: list[str] = []

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> int:
        minutes = parse_minutes(v)
        if minutes < 1:
            raise ValueError("must be at least 1 minute")
        return minutes
