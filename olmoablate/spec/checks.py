"""Cross-field checks of one spec, after the schema (`olmoablate.spec.load` calls them).

Why apart from loading: these are the rules that need more than one section at a time (the
global batch against the data-parallel size, GPU settings against the topology, a gate's stage,
metric and reference against the sizes, variants and evaluation of the spec). Each adds one
problem per violation at the spec path it is about; `load` turns the path into a line number.
"""

from __future__ import annotations

from typing import Any

from olmoablate.contract import sizes as sizes_mod
from olmoablate.contract.metrics import DOWNSTREAM_PREFIX, gate_metrics
from olmoablate.contract.schema import SizeSettings, Spec, computes_in_bf16

Path_ = tuple[str | int, ...]


def origin_of(rpath: Path_, origin: dict[Path_, Path_]) -> Path_:
    """Where in the spec file a resolved per-size field came from (its per-size block's path)."""
    p = tuple(rpath)
    tail: tuple[str | int, ...] = ()
    while p and p not in origin:
        tail = (p[-1], *tail)
        p = p[:-1]
    return (*origin.get(p, p), *tail)


def check_batch(settings: SizeSettings, add: Any, origin: dict[Path_, Path_]) -> int | None:
    """Global batch vs sequence length x data-parallel size; returns the per-rank microbatch."""
    t, topo = settings.training, settings.topology
    dp = topo.world_size
    where = origin_of(("training", "global_batch_size"), origin)
    if t.global_batch_size % (t.sequence_length * dp):
        add(
            where,
            f"global_batch_size={t.global_batch_size} tokens is not divisible by "
            f"sequence_length x data-parallel size = {t.sequence_length} x {dp} "
            f"(allowed: multiples of {t.sequence_length * dp})",
        )
        return None
    rank_batch = t.global_batch_size // dp
    if t.microbatch_size is None:
        mb = rank_batch if not topo.on_gpu else min(rank_batch, 2 * t.sequence_length)
    else:
        mb = t.microbatch_size
    if rank_batch % mb:
        add(
            origin_of(("training", "microbatch_size"), origin),
            f"microbatch_size={mb} must divide the per-rank batch {rank_batch} tokens "
            f"(global_batch_size / data-parallel size {dp})",
        )
        return None
    return mb


def check_execution(settings: SizeSettings, add: Any, origin: dict[Path_, Path_]) -> None:
    """Precision x backend x parallelism combinations that could never start (or would train in
    another precision than the spec says) are rejected here, not hours later at job start."""
    t, topo = settings.training, settings.topology
    gpu = topo.on_gpu
    half = computes_in_bf16(t.precision, topo)
    backend = topo.attention_backend
    if backend.startswith("flash"):
        where = origin_of(("topology", "attention_backend"), origin)
        if not gpu:
            add(where, f"{backend} needs CUDA GPUs (gpus_per_node=0; allowed on CPU: auto, torch)")
        elif not half:
            add(
                where,
                f"{backend} does not run in fp32 (training.precision={t.precision}; "
                "allowed with fp32: auto, torch)",
            )
    if topo.data_parallel == "hsdp" and topo.nodes < 2:
        add(
            origin_of(("topology", "data_parallel"), origin),
            f"hsdp replicates across nodes and shards within one: needs nodes >= 2 "
            f"(nodes={topo.nodes}; allowed on one node: fsdp, ddp)",
        )


def check_architectures(spec: Spec, dims: sizes_mod.SizeDims, add: Any) -> None:
    """Each block's own check at this size (``Block.check_size``), e.g. a loop body deeper
    than the size."""
    from olmoablate.contract.blocks import get_block

    for name, arch in spec.variants.items():
        if arch.sizes is not None and dims.name not in arch.sizes:
            continue
        for key, opts in arch.blocks.items():
            problem = get_block(key).check_size(opts, dims)
            if isinstance(problem, tuple):  # (option, message): located at the option
                add(("variants", name, key, problem[0]), problem[1])
            elif problem:
                add(("variants", name, key), problem)


def check_budget(spec: Spec, add: Any) -> None:
    cap = spec.budget.max_gpu_hours
    for key in cap if isinstance(cap, dict) else ():
        if key != "total" and key not in spec.sizes:
            add(
                ("budget", "max_gpu_hours", key),
                f"unknown size key {key} (allowed: total, {', '.join(spec.sizes)})",
            )
    for name in spec.budget.variants:
        if name not in spec.variants:
            add(
                ("budget", "variants", name),
                f"unknown variant {name!r} (allowed: {', '.join(spec.variants)})",
            )


def check_gate(
    spec: Spec, gate: Any, where: tuple[str | int, ...], per_size: dict[str, SizeSettings], add: Any
) -> None:
    """One gate block at field path ``where`` (``gate`` or ``gates.<name>``)."""
    if gate.stage not in spec.sizes:
        add(
            (*where, "stage"),
            f"stage size {gate.stage!r} is not in sizes (allowed: {', '.join(spec.sizes)})",
        )
    for i, s in enumerate(gate.promote_to):
        if s not in spec.sizes:
            add(
                (*where, "promote_to", i),
                f"size {s!r} is not in sizes (allowed: {', '.join(spec.sizes)})",
            )
        elif s == gate.stage:
            add((*where, "promote_to", i), "cannot promote to the stage size itself")
    for key in ("variant", "reference"):
        val = getattr(gate, key)
        if val is not None and val not in spec.variants:
            add((*where, key), f"unknown variant {val!r} (allowed: {', '.join(spec.variants)})")
    if gate.rule == "quality_per_param" and gate.reference in spec.variants:
        ref = spec.variants[gate.reference]
        if ref.looped is not None:
            add(
                (*where, "reference"),
                "the parameter-matched reference must be a standard (non-looped) model, e.g. `layers: {n_layers: 4}`",
            )
        if not any(a.looped is not None for a in spec.variants.values()):
            add(
                (*where, "rule"),
                "quality_per_param compares a looped variant with its reference, but no variant is looped",
            )
    settings = per_size.get(gate.stage)
    if settings is not None:
        allowed = gate_metrics(list(settings.evaluation.lm_sets))
        ok = gate.metric in allowed or any(
            gate.metric.startswith(f"{DOWNSTREAM_PREFIX}{t}")
            for t in settings.evaluation.downstream
        )
        if not ok:
            add(
                (*where, "metric"),
                f"no run records metric {gate.metric!r} (allowed: {', '.join(sorted(allowed))}"
                + (", eval/downstream/<task>..." if settings.evaluation.downstream else "")
                + ")",
            )


def check_downstream(per_size: dict[str, SizeSettings], add: Any) -> None:
    """Downstream tasks need the `eval` extra and known task names: fail now, not after hours.

    Any tokenizer works: ai2-olmo-eval tokenizes the tasks' text with the run's own file.
    """
    from olmoablate.spec import downstream

    for st in per_size.values():
        for index, message in downstream.problems(st.evaluation.downstream):
            path: Path_ = (
                ("evaluation", "downstream")
                if index is None
                else ("evaluation", "downstream", index)
            )
            add(path, message)


def check_compile(settings: SizeSettings, add: Any, origin: dict[Path_, Path_]) -> None:
    """``training.compile: true`` on a CPU topology is a request the job cannot honour:
    OLMo-core's train module compiles only on CUDA ("Skipping model compilation since CUDA is not
    available") and the plan, its certificate and the cost would say ``compile: true`` for a run
    that trained eagerly."""
    if settings.training.compile is True and not settings.topology.on_gpu:
        add(
            origin_of(("training", "compile"), origin),
            "compile=true needs CUDA GPUs: OLMo-core's train module compiles only on CUDA "
            "(gpus_per_node=0; allowed on CPU: auto, false)",
        )
