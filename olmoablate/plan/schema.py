"""The spec language: pydantic models for one experiment spec.

Why ``extra="forbid"`` everywhere: a typo (``learning_rate`` for ``lr``) must fail `validate`, not
train with a default for days. Per-size sections are validated once per size, after `load` picks
each size's values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from olmoablate.errors import NAME_RE, NonNegInt, PosInt, Strict, parse_count, parse_minutes
from olmoablate.plan.arch import MAX_LAYERS, Architecture
from olmoablate.plan.blocks import known_names
from olmoablate.plan.gate import Budget, Gate
from olmoablate.plan.metrics import DEFAULT_FACTOR, DEFAULT_MIN_RELATIVE_JUMP, DEFAULT_WINDOW

# Where and how a run executes (``topology``, ``slurm``): each default is defined here once and the
# launcher, the job and the accounting read it through the plan.

#: Execution settings resolved from the topology when the spec leaves them out, following
#: OLMo-core's official OLMo 3 scripts on GPU (docs/gpu-settings.md names the source of each) and
#: the cheapest faithful setting on CPU. This is the only place these defaults live.
GPU_DATA_WORKERS = 8
GPU_METRICS_INTERVAL = 10


def computes_in_bf16(precision: str, topology: Topology) -> bool:
    """The one precision rule (cost, `validate` and the job): ``bf16`` always, ``auto`` = bf16 on
    GPU and fp32 on CPU."""
    return precision == "bf16" or (precision == "auto" and topology.on_gpu)


class Topology(Strict):
    """Where and how a run executes; every field is shared by both arms (pairing certificate).
    ``None`` fields are resolved by ``_resolve``: ``data_parallel`` -> ``hsdp`` on more than one
    GPU node (as OLMo-core's official 7B/32B scripts), else ``fsdp``; ``data_workers`` -> 8 on GPU
    (official), 0 on CPU; ``metrics_interval`` -> 10 steps on GPU (official), 1 on CPU."""

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
    #: Memory per GPU in GB for `validate` (default: by slurm.constraint or gpu_type). A planning
    #: fact: never written to the plan, so no part of any certificate.
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
    # tests/plan/test_planfile.py keeps ``gpus_per_node > 0`` out of every other module).
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


#: OLMo-core 3.0 `olmo_core.data.DataMix` values (checked against the library in tests/plan/test_load.py;
#: kept as text so `validate` never imports olmo_core/torch).
OLMO_CORE_DATA_MIXES: tuple[str, ...] = (
    "OLMoE-mix-0824",
    "OLMoE-mix-0824-dev",
    "dolma17",
    "OLMo-mix-0625",
    "OLMo-mix-0625-150Bsample",
    "OLMo-mix-0625-700Bsample",
    "OLMo-mix-0625-official",
    "OLMo-mix-0925",
    "OLMo-mix-0925-official",
    "OLMo-midtraining-mix-0625-100B",
    "OLMo-midtraining-mix-0925-ingredient1-100B",
    "OLMo-midtraining-mix-0925-ingredient2-100B",
    "OLMo-longmino-mix-0625",
    "OLMo-longmino-mix-0925",
    "v3-small-ppl-validation",
    "c4-ppl-validation",
    "code-fresh-ppl-validation",
)

# ------------------------------------------------------------------------------------------- sizes
# Upper bounds of a size and a budget. Why: a typo such as ``n_layers: 10000000`` or
# ``tokens: 1e30`` must be one line at `validate`, not minutes of accounting (its cost grows with
# the layer count) or a job that fails allocating terabytes. Each is far beyond any published
# dense LM, so no real experiment meets one; raise one here if yours does.
#: Layers: :data:`olmoablate.plan.arch.MAX_LAYERS` (also a variant's depth and unrolled loops).
#: Model width: 4x the widest published dense LM (Llama 3.1 405B and others: 16,384).
MAX_D_MODEL = 65_536
#: MLP width: 16x MAX_D_MODEL (Llama 3.1 405B: 53,248; PaLM 540B: 73,728).
MAX_MLP_HIDDEN = 1 << 20
#: Vocabulary: 8x the largest in use (Gemma 3: 262,144 entries).
MAX_VOCAB = 1 << 21
#: Context: 16x the longest published pretraining context (1M tokens), also the sliding window.
MAX_SEQUENCE_LENGTH = 1 << 24
#: Training tokens per run: 25x the largest published pretraining (Qwen3, 36T tokens).
MAX_TOKENS = 10**15
#: Why each bound is what it is, by field name: the `validate` message's "allowed" part.
UPPER_BOUND_WHY: dict[str, str] = {
    "n_layers": "DeepNet trained 1,000 layers, Llama 3.1 405B has 126",
    "body_layers": "DeepNet trained 1,000 layers, Llama 3.1 405B has 126",
    "loops": "DeepNet trained 1,000 layers, Llama 3.1 405B has 126",
    "d_model": "4x the widest published dense LM, 16,384",
    "mlp_hidden_size": "16x the largest d_model allowed",
    "vocab_size": "8x the largest vocabulary in use, 262,144",
    "sliding_window": "16x the longest published pretraining context, 1M tokens",
    "sequence_length": "16x the longest published pretraining context, 1M tokens",
    "tokens": "25x the largest published pretraining, 36T tokens",
    "global_batch_size": "the token budget's own bound",
}


class CustomSize(Strict):
    """A size defined in the spec (for CPU work). Same fields as `olmoablate.plan.sizes.SizeDims`;
    bounded by the ``MAX_*`` above."""

    d_model: Annotated[int, Field(gt=0, le=MAX_D_MODEL)]
    n_layers: Annotated[int, Field(gt=0, le=MAX_LAYERS)]
    n_heads: PosInt
    n_kv_heads: PosInt | None = None
    mlp_hidden_size: Annotated[int, Field(gt=0, le=MAX_MLP_HIDDEN)]
    sliding_window: Annotated[int, Field(gt=0, le=MAX_SEQUENCE_LENGTH)]
    vocab_size: Annotated[int, Field(gt=0, le=MAX_VOCAB)] = 100352

    @model_validator(mode="after")
    def _check(self) -> CustomSize:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        kv = self.n_kv_heads or self.n_heads
        if self.n_heads % kv:
            raise ValueError(f"n_heads={self.n_heads} must be divisible by n_kv_heads={kv}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"head dim d_model/n_heads={self.d_model // self.n_heads} must be even (RoPE)"
            )
        return self


# ------------------------------------------------------------------- training (validated per size)
class Optimizer(Strict):
    name: Literal["adamw", "skip_step_adamw"] = "adamw"
    lr: float = Field(gt=0)
    betas: Annotated[
        list[Annotated[float, Field(ge=0, lt=1)]], Field(min_length=2, max_length=2)
    ] = [0.9, 0.95]
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    no_decay_embeddings: bool = True


#: Warm-up when the spec gives neither ``warmup_steps`` nor ``warmup_fraction``: 1% of the steps.
DEFAULT_WARMUP_FRACTION = 0.01


class Schedule(Strict):
    name: Literal["cosine", "linear", "constant", "wsd"] = "cosine"
    warmup_steps: NonNegInt | None = None
    warmup_fraction: float | None = Field(None, ge=0, le=1)
    alpha_f: float = Field(0.1, ge=0, le=1)
    decay_fraction: float = Field(0.1, gt=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> Schedule:
        if self.warmup_steps is not None and self.warmup_fraction is not None:
            raise ValueError("give warmup_steps or warmup_fraction, not both")
        return self

    def warmup_for(self, steps: int) -> int:
        """Warm-up steps: ``warmup_steps``, else ``warmup_fraction`` of ``steps``, else 1%."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return round(steps * (DEFAULT_WARMUP_FRACTION if self.warmup_fraction is None else self.warmup_fraction))


class Data(Strict):
    paths: list[str] | None = None
    mix: str | None = None
    root: str | None = None
    #: ``dolma2`` (real runs) or a path to a Hugging Face ``tokenizer.json`` (small-vocab CPU
    #: work); vocab size, EOS and PAD are read from it at validate (plan/tokens.py).
    tokenizer: str = Field("dolma2", min_length=1)
    eos_token_id: NonNegInt | None = None
    pad_token_id: NonNegInt | None = None
    seed: int = 34521
    vary_with_seed: bool = True

    @field_validator("mix")
    @classmethod
    def _known_mix(cls, v: str | None) -> str | None:
        if v is not None and v not in OLMO_CORE_DATA_MIXES:
            raise ValueError(
                f"unknown OLMo-core data mix {v!r} (allowed: {', '.join(OLMO_CORE_DATA_MIXES)})"
            )
        return v

    @field_validator("paths")
    @classmethod
    def _nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("must list at least one token file")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> Data:
        if (self.paths is None) == (self.mix is None):
            raise ValueError(
                "give exactly one of `paths` (token files) or `mix` (an OLMo-core data mix)"
            )
        if self.mix is not None and not self.root:
            raise ValueError("`mix` needs `root`, the folder (or s3/gs/weka URL) holding the mix")
        return self


class Stability(Strict):
    """Loss-spike rule (`olmoablate.plan.metrics`) and when the job stops as `diverged`."""

    spike_window: int = Field(DEFAULT_WINDOW, ge=5)
    spike_factor: float = Field(DEFAULT_FACTOR, gt=0)
    min_relative_jump: float = Field(DEFAULT_MIN_RELATIVE_JUMP, ge=0)
    #: Stop (diverged) after more than this many spikes; null = count only, never stop for spikes.
    max_spikes: NonNegInt | None = None
    stop_on_nonfinite: bool = True


class Wandb(Strict):
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "olmoablate"
    entity: str | None = None


#: ``training.compile``'s default: compile on CUDA (as OLMo-core's official OLMo 3 scripts do),
#: eager on CPU (see ``olmoablate.run.trainer.compile_enabled`` for why).
COMPILE_DEFAULT: Literal["auto"] = "auto"


class PerParam(Strict):
    """``training.tokens: {per_param: N}``: N tokens per parameter of the size's OLMo 3 baseline.

    Why: a scaling ladder trains each rung to its own budget, and a budget per parameter is how
    the field states one (Chinchilla's 20 tokens per parameter). Chinchilla counts *total*
    parameters, embeddings included, and so does this rule: ``olmoablate.plan.accounting.
    param_count`` of the size with no architecture (the variant's own count never changes its
    budget; the spec's budget match decides the variant's tokens). Resolved per size by
    `olmoablate.plan.load` once the size's dims are known, so every later stage (expansion,
    identity, accounting) sees a count.
    """

    per_param: float = Field(gt=0)

    def tokens(self, params: int, global_batch_size: int | None) -> int:
        """N x ``params``, rounded *up* to whole global batches (a run trains whole steps; up,
        so a rung never trains below its stated budget). Exact arithmetic on N as written."""
        want = Fraction(str(self.per_param)) * params
        if not global_batch_size or global_batch_size <= 0:
            return math.ceil(want)
        return math.ceil(want / global_batch_size) * global_batch_size


class Training(Strict):
    sequence_length: Annotated[int, Field(gt=0, le=MAX_SEQUENCE_LENGTH)]
    #: A count (``262144``, ``2.5e9``, ``'100M'``) or ``{per_param: N}`` (:class:`PerParam`,
    #: resolved to a count by `load` before this model sees it); at most MAX_TOKENS.
    tokens: int = Field(gt=0, le=MAX_TOKENS)
    global_batch_size: Annotated[int, Field(gt=0, le=MAX_TOKENS)]
    microbatch_size: PosInt | None = None
    optimizer: Optimizer
    schedule: Schedule = Schedule()
    grad_clip: float | None = Field(1.0, gt=0)
    z_loss: float | None = Field(1e-5, ge=0)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    #: torch.compile every block: "auto" (on for CUDA, off for CPU), true (also CPU: inductor),
    #: false (eager). Part of the pairing certificate, so both arms always compile alike.
    compile: bool | Literal["auto"] = COMPILE_DEFAULT
    init_seed: NonNegInt = 0
    threads: PosInt = 1
    data: Data
    checkpoint_interval: PosInt = 1000
    stability: Stability = Stability()
    wandb: Wandb = Wandb()

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v: Any) -> int:
        try:
            return parse_count(v)
        except ValueError as err:
            raise ValueError(f"{err}, or {{per_param: N}} tokens per parameter") from None

    @field_validator("compile", mode="before")
    @classmethod
    def _compile(cls, v: Any) -> Any:
        if v is True or v is False or v == "auto":
            return v
        raise ValueError(f"invalid value {v!r} (allowed: auto, true, false)")

    @model_validator(mode="after")
    def _check(self) -> Training:
        if self.global_batch_size % self.sequence_length:
            raise ValueError(
                f"global_batch_size={self.global_batch_size} tokens must be a multiple of "
                f"sequence_length={self.sequence_length}"
            )
        if self.tokens < self.global_batch_size:
            raise ValueError(
                f"tokens={self.tokens} is less than one global batch ({self.global_batch_size})"
            )
        if self.microbatch_size is not None and self.microbatch_size % self.sequence_length:
            raise ValueError(
                f"microbatch_size={self.microbatch_size} tokens must be a multiple of "
                f"sequence_length={self.sequence_length}"
            )
        return self


class Evaluation(Strict):
    interval: PosInt = 1000
    lm_sets: dict[str, list[str]] = {}
    max_eval_tokens: PosInt | None = None
    downstream: list[str] = []
    #: Cap each downstream task's eval at this many batches (quick checks; default: all).
    max_downstream_batches: PosInt | None = None
    loop_counts: list[int | str] = []
    #: When the LM evaluator also scores the effective-depth diagnostic (docs/depth.md): at
    #: every eval point, at the final one only, or never ("none"; not "off", which YAML reads as
    #: false). Not dumped at its default, so the
    #: identities of runs planned before it existed are unchanged.
    depth: Literal["every", "final", "none"] = Field("every", exclude_if=lambda v: v == "every")

    @field_validator("lm_sets")
    @classmethod
    def _sets(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, paths in v.items():
            if not re.fullmatch(NAME_RE, name):
                raise ValueError(f"set name {name!r} must match {NAME_RE}")
            if not paths:
                raise ValueError(f"set {name!r} must list at least one token file")
        return v

    @field_validator("loop_counts")
    @classmethod
    def _loops(cls, v: list[int | str]) -> list[int | str]:
        for item in v:
            if isinstance(item, bool):
                raise ValueError("loop counts are positive integers or multiples of b like '2b'")
            if isinstance(item, int):
                if item < 1:
                    raise ValueError(f"loop count {item} must be >= 1")
            elif not re.fullmatch(r"\s*([0-9]*\.?[0-9]+)?\s*b\s*", item):
                raise ValueError(
                    f"loop count {item!r} must be an integer >= 1 or a multiple of the trained "
                    "loop count b like 'b', '0.5b', '2b'"
                )
        return v


# ---------------------------------------------------------------------------------------- the spec
#: Sections whose leaf values may be given per size (``{1B: ..., 3B: ..., default: ...}``).
PER_SIZE_SECTIONS: dict[str, type[Strict]] = {
    "training": Training,
    "evaluation": Evaluation,
    "topology": Topology,
    "slurm": Slurm,
}


class Spec(Strict):
    """One experiment spec. Per-size sections are kept raw here and resolved per size."""

    name: Annotated[str, Field(pattern=NAME_RE)]
    description: str = ""
    sizes: list[str] = Field(min_length=1)
    #: A size's name is part of every run id and so of a path: the same names as variants.
    custom_sizes: dict[Annotated[str, Field(pattern=NAME_RE)], CustomSize] = {}
    seeds: list[NonNegInt] = [0]
    #: A variant's name is part of its run ids: the same names as sizes.
    variants: dict[Annotated[str, Field(pattern=NAME_RE)], Architecture]
    budget: Budget = Budget()
    training: dict[str, Any]
    evaluation: dict[str, Any] = {}
    topology: dict[str, Any] = {}
    slurm: dict[str, Any] = {}
    gate: Gate | None = None
    #: Several pre-registered gates (name -> block), one verdict each; `gate:` is the one-gate
    #: shorthand, and after validation `gate` is the first of `gates`.
    gates: dict[str, Gate] | None = None

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("must list at least one seed")
        if len(set(v)) != len(v):
            raise ValueError("seeds must be unique")
        return v

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: dict[str, Architecture]) -> dict[str, Architecture]:
        if not v:
            raise ValueError(
                "a spec needs at least one variant to compare with the OLMo 3 baseline "
                f"(allowed blocks: {_block_names()})"
            )
        for name, arch in v.items():
            if name == "baseline":
                raise ValueError("'baseline' is reserved for the plain OLMo 3 arm")
            if not re.fullmatch(NAME_RE, name):
                raise ValueError(f"variant name {name!r} must match {NAME_RE}")
            if not arch.as_mapping():
                raise ValueError(
                    f"variant {name!r} is empty, i.e. identical to the baseline "
                    f"(allowed blocks: {_block_names()})"
                )
        return v

    @model_validator(mode="after")
    def _gates(self) -> Spec:
        for g in [self.gate] if self.gates is None else list(self.gates.values()):
            why = g.check_seeds(len(self.seeds)) if g is not None else None
            if why:
                raise ValueError(why)
        if self.gates is None:
            return self
        if self.gate is not None:
            raise ValueError("give `gate` (one gate) or `gates` (one gate per proposal), not both")
        if not self.gates:
            raise ValueError("`gates` must name at least one gate (or use `gate`)")
        for name, g in self.gates.items():
            if not re.fullmatch(NAME_RE, name):
                raise ValueError(f"gate name {name!r} must match {NAME_RE}")
            if g.variant is None and g.rule != "complementary":  # that one decides on `combined`
                raise ValueError(
                    f"gates.{name}.variant is required: each gate decides on one proposal "
                    f"(allowed: {', '.join(self.variants)})"
                )
        self.gate = next(iter(self.gates.values()))
        return self

    def all_gates(self) -> list[tuple[str, Gate, tuple[str | int, ...]]]:
        """(name, gate, field path in the spec) of every gate; a `gate:` spec has one."""
        if self.gates:
            return [(n, g, ("gates", n)) for n, g in self.gates.items()]
        if self.gate is not None:
            return [(self.gate.variant or "gate", self.gate, ("gate",))]
        return []


def _block_names() -> str:
    return ", ".join(known_names())


@dataclass
class SizeSettings:
    """The per-size sections of a spec, resolved and validated for one size."""

    training: Training
    evaluation: Evaluation
    topology: Topology
    slurm: Slurm
