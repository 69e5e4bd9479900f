"""Cross-field checks of one spec, after the schema (`olmoablate.plan.load` calls them).

The rules that need more than one section at a time; each adds one problem per violation at
the spec path it is about (`load` turns the path into a line number).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from olmoablate.errors import shorten
from olmoablate.io import user_cache_get, user_cache_put
from olmoablate.plan import sizes as sizes_mod
from olmoablate.plan import tokens as tk
from olmoablate.plan.accounting import price_arms, total_train_flops
from olmoablate.plan.blocks import get_block
from olmoablate.plan.gate import Gate
from olmoablate.plan.metrics import DOWNSTREAM_PREFIX, gate_metrics
from olmoablate.plan.names import MAX_ID_BYTES, NAME_MAX_BYTES, group_id, run_id
from olmoablate.plan.planfile import LadderRecord, LadderTarget
from olmoablate.plan.schema import SizeSettings, Spec, computes_in_bf16
from olmoablate.plan.sizes import dolma2_tokenizer_file

# Downstream-task names without importing olmo_eval (torch): its source read with `ast`, else the
# shipped list (olmo_eval_tasks.json, scripts/refresh-eval-tasks.py; it holds metric types too).

FIX_TOKENIZER = "bash scripts/prepare-data.sh"


def eval_extra_location() -> Path | None:
    try:
        spec = importlib.util.find_spec("olmo_eval")
    except (ImportError, ValueError):  # ValueError: blocked via sys.modules["olmo_eval"] = None
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


#: User cache folder of the parsed task lists (olmoablate.io.user_cache_path), keyed by tasks.py.
_TASKS_CACHE = "olmo-eval-tasks-v3"


@lru_cache(maxsize=4)
def _tasks_in(tasks_py: Path) -> frozenset[str]:
    """The task labels of ``tasks_py``. Parsing olmo_eval's 100 kB tasks.py takes ~40 ms, a
    seventh of `validate`'s budget: cached (best effort) per path, size and mtime."""
    st = tasks_py.stat()
    key = f"{tasks_py.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    hit = user_cache_get(_TASKS_CACHE, key)
    if isinstance(hit, list):
        return frozenset(str(t) for t in hit)
    names = _parse_tasks(tasks_py)
    user_cache_put(_TASKS_CACHE, key, sorted(names), keep=8)
    return names


def _parse_tasks(tasks_py: Path) -> frozenset[str]:
    tree = ast.parse(tasks_py.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id.startswith("LABEL_TO_TASK_MAP")):
            continue
        if isinstance(node.value, ast.Dict):
            for key in node.value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names.add(key.value)
    return frozenset(names)


#: The task list of the pinned ai2-olmo-eval, shipped with the package.
SHIPPED_TASKS = Path(__file__).resolve().parent / "olmo_eval_tasks.json"


@lru_cache(maxsize=1)
def shipped() -> tuple[str, dict[str, str]]:
    """(ai2-olmo-eval version, {task label: metric type}) of the shipped list."""
    doc = json.loads(SHIPPED_TASKS.read_text(encoding="utf-8"))
    return str(doc["version"]), {str(k): str(v) for k, v in doc["tasks"].items()}


def installed_tasks() -> frozenset[str] | None:
    loc = eval_extra_location()
    if loc is None or not (loc / "tasks.py").is_file():
        return None
    return _tasks_in(loc / "tasks.py")


def known_tasks() -> frozenset[str]:
    """Task labels to check names against: the installed `olmo_eval`'s, else the shipped list."""
    installed = installed_tasks()
    return installed if installed is not None else frozenset(shipped()[1])


def metric_type(task: str) -> str | None:
    """The task's ai2-olmo-eval metric type (acc, len_norm, bpb, ...) per the shipped list."""
    return shipped()[1].get(task)


def problems(tasks: list[str]) -> list[tuple[int | None, str]]:
    """[(index of the offending task or None, message)] for a list of requested tasks."""
    if not tasks:
        return []
    out: list[tuple[int | None, str]] = []
    available = known_tasks()
    for i, task in enumerate(tasks):
        if task not in available:
            close = sorted(t for t in available if t.split("_")[0] == task.split("_")[0])[:8]
            hint = f"; similar: {', '.join(close)}" if close else ""
            why = f"unknown downstream task {task!r} (not in olmo_eval's task list{hint})"
            out.append((i, why))
    tok = dolma2_tokenizer_file()
    if not tok.is_file():
        why = f"downstream tasks need the dolma2 tokenizer file {tok} (fix: {FIX_TOKENIZER})"
        out.append((None, why))
    return out


#: A field's path in a spec (keys and list indices).
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
    for name, arch in spec.variants.items():
        if arch.sizes is not None and dims.name not in arch.sizes:
            continue
        for key, opts in arch.blocks.items():
            problem = get_block(key).check_size(opts, dims)
            if isinstance(problem, tuple):  # (option, message): located at the option
                add(("variants", name, key, problem[0]), problem[1])
            elif problem:
                add(("variants", name, key), problem)


def check_run_ids(spec: Spec, add: Any) -> None:
    """Every run and (size, seed) group has its own id. Ids join names with ``-s<seed>-``, so names
    that hold that pattern can spell another combination's id (size ``a-s0-b`` with variant
    ``c``, and size ``a`` with variant ``b-s0-c``, are both ``a-s0-b-s0-c``): one run would be
    dropped from the plan and the other would train into its folder."""
    seen: dict[str, str] = {}
    too_long: set[Path_] = set()
    for size in spec.sizes:
        for seed in sorted(spec.seeds, reverse=True):  # the longest ids first
            ids = [(group_id(size, seed), f"group of size {size!r}, seed {seed}", ("sizes",))]
            for name, v in [("baseline", None), *spec.variants.items()]:
                if v is not None and v.sizes is not None and size not in v.sizes:
                    continue
                where = ("sizes",) if v is None else ("variants", name)
                what = f"run of size {size!r}, seed {seed}, arm {name!r}"
                ids.append((run_id(size, seed, name), what, where))
            for rid, what, where in ids:
                if len(rid.encode()) > MAX_ID_BYTES and where not in too_long:
                    too_long.add(where)
                    add(where, _too_long(rid, where, size, seed))
                if rid in seen:
                    why = f"id {rid!r} of the {what} is also the id of the {seen[rid]}"
                    add(where, why + "; rename the size or the variant so no name holds -s<seed>-")
                seen.setdefault(rid, what)


#: OLMo-core's seed range (``olmo_core.utils.seed_all``): a job whose seed is outside it fails at
#: start, after the plan was written and the job queued.
MAX_SEED = 2**32 - 1


def check_seed_range(spec: Spec, per_size: dict[str, SizeSettings], add: Any) -> None:
    """The seeds a run trains with are the spec's seed added to ``training.init_seed`` and (with
    ``vary_with_seed``) to ``training.data.seed``: each sum must be a seed OLMo-core accepts."""
    top = max(spec.seeds)
    for size, st in per_size.items():
        t = st.training
        data = t.data.seed + (top if t.data.vary_with_seed else 0)
        sums = {"training.init_seed + seed": t.init_seed + top, "training.data.seed + seed": data}
        for name, value in sums.items():
            if value > MAX_SEED:
                why = f"{name} is {value} at size {size} for seed {top}: outside OLMo-core's"
                add(("seeds",), f"{why} seed range (allowed: 0 to {MAX_SEED})")
                return


def _too_long(rid: str, where: Path_, size: str, seed: int) -> str:
    """Why run id ``rid`` is refused, and the longest name ``where`` may have."""
    n = len(rid.encode())
    head = f"run id {shorten(rid, 40)!r} is {n} bytes"
    rule = (
        f"over the {MAX_ID_BYTES} a run id may have (a file name holds at most "
        f"{NAME_MAX_BYTES} bytes and the stages add up to {NAME_MAX_BYTES - MAX_ID_BYTES} "
        "to an id)"
    )
    if where == ("sizes",):
        allowed = f"a size name of at most {MAX_ID_BYTES - (n - len(size.encode()))} characters"
    else:
        room = MAX_ID_BYTES - len(group_id(size, seed).encode()) - 1
        allowed = f"a variant name of at most {room} characters with size {shorten(size, 20)!r}"
    return f"{head}, {rule} (allowed: {allowed})"


def check_names(spec: Spec, add: Any) -> None:
    """The spec's name and its gates' names name folders (``results/<spec>/``,
    ``gates/<gate>/``): each at most :data:`MAX_ID_BYTES`, as a run id."""
    named: list[tuple[Path_, str]] = [(("name",), spec.name)]
    named += [(("gates", n), n) for n in spec.gates or {}]
    for where, name in named:
        n = len(name.encode())
        if n > MAX_ID_BYTES:
            add(where, f"name is {n} characters ({shorten(name, 40)!r}), too long for a folder "
                f"name (allowed: at most {MAX_ID_BYTES} characters; a file name holds at most "
                f"{NAME_MAX_BYTES} bytes)")  # fmt: skip


def check_budget(spec: Spec, add: Any) -> None:
    cap = spec.budget.max_gpu_hours
    for key in cap if isinstance(cap, dict) else ():
        if key != "total" and key not in spec.sizes:
            why = f"unknown size key {key} (allowed: total, {', '.join(spec.sizes)})"
            add(("budget", "max_gpu_hours", key), why)
    for name in spec.budget.variants:
        if name not in spec.variants:
            why = f"unknown variant {name!r} (allowed: {', '.join(spec.variants)})"
            add(("budget", "variants", name), why)


def check_gate(
    spec: Spec, gate: Any, where: tuple[str | int, ...], per_size: dict[str, SizeSettings], add: Any
) -> None:
    """One gate block at field path ``where`` (``gate`` or ``gates.<name>``)."""
    sizes = f"is not in sizes (allowed: {', '.join(spec.sizes)})"
    if gate.stage not in spec.sizes:
        add((*where, "stage"), f"stage size {gate.stage!r} {sizes}")
    for i, s in enumerate(gate.promote_to):
        if s not in spec.sizes:
            add((*where, "promote_to", i), f"size {s!r} {sizes}")
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
    if gate.rule == "multiplier":
        _check_multiplier(spec, gate, where, add)
    if gate.rule == "complementary":
        _check_complementary(spec, gate, where, add)
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


def _check_complementary(spec: Spec, gate: Gate, where: Path_, add: Any) -> None:
    """A factorial gate: ``of`` two distinct single-change variants, ``combined`` a third, each
    trained at the stage (docs/gate-statistics.md, "Factorial verdicts")."""
    variants = ", ".join(spec.variants)
    if len(gate.of) != 2 or gate.of[0] == gate.of[1]:
        add((*where, "of"), "rule complementary needs of: [A, B], two distinct single-change "
            f"variants (got {gate.of}; allowed: {variants})")  # fmt: skip
    if gate.combined is None:
        add((*where, "combined"), "rule complementary needs combined: the variant with both "
            f"changes (allowed: {variants})")  # fmt: skip
    elif gate.combined in gate.of:
        add((*where, "combined"), f"combined {gate.combined!r} is also in of: the variant with "
            "both changes must be a third variant")  # fmt: skip
    if len(spec.seeds) < 2:
        add((*where, "rule"), "rule complementary needs >= 2 seeds: its intervals are the "
            f"per-seed contrasts' spread (seeds: {spec.seeds}); a noise floor is not used")  # fmt: skip
    if gate.sequential is not None:
        add((*where, "sequential"), "rule complementary decides once, on every planned seed: "
            "sequential designs are not supported (drop sequential)")  # fmt: skip
    named = [("of", i, v) for i, v in enumerate(gate.of)]
    if gate.combined is not None:
        named.append(("combined", None, gate.combined))
    for key, i, v in named:
        at = (*where, key) if i is None else (*where, key, i)
        if v not in spec.variants:
            add(at, f"unknown variant {v!r} (allowed: {variants})")
        elif gate.stage in spec.sizes and not trains_at(spec, v, gate.stage):
            add(at, f"variant {v!r} does not train at the stage {gate.stage}: the factorial "
                "needs all four arms there")  # fmt: skip


def trains_at(spec: Spec, variant: str, size: str) -> bool:
    """Whether ``variant`` has runs at ``size`` (a variant's ``sizes:`` restricts it)."""
    arch = spec.variants.get(variant)
    return arch is not None and size in spec.sizes and (arch.sizes is None or size in arch.sizes)


def size_dims(spec: Spec, name: str) -> sizes_mod.SizeDims | None:
    """The dims of a preset or custom size, planned or not (a multiplier gate's target)."""
    if name in spec.custom_sizes:
        return sizes_mod.custom(name, spec.custom_sizes[name].model_dump())
    if name in sizes_mod.PRESET_NAMES:
        return sizes_mod.preset(name)
    return None


def _check_multiplier(spec: Spec, gate: Gate, where: Path_, add: Any) -> None:
    """The checks of rule multiplier that need only the spec (docs/scaling.md); the ones that
    need each size's cost are :func:`check_ladder`'s."""
    variants = ", ".join(spec.variants)
    if gate.min_multiplier is None:
        add((*where, "min_multiplier"), "rule multiplier needs min_multiplier: the compute "
            "multiplier every target's lower bound must clear (e.g. 1.05; allowed: > 0)")  # fmt: skip
    if gate.variant is None:
        add((*where, "variant"), "rule multiplier needs variant: the one proposal whose "
            f"multiplier the ladder measures (allowed: {variants})")  # fmt: skip
    if gate.sequential is not None:
        add((*where, "sequential"), "rule multiplier decides once, on the whole ladder: "
            "sequential designs are not supported (drop sequential)")  # fmt: skip
    if gate.noise.measure is not None:
        add((*where, "noise", "measure"), "rule multiplier takes its noise from the rungs' "
            "paired seeds, or from noise.floor when every rung has one seed; A/A baselines "
            "are not used (drop noise.measure)")  # fmt: skip
    if not gate.targets:
        add((*where, "at"), "a multiplier gate needs at least one target size: at: [<size>, "
            "...] (default: promote_to, which is empty)")  # fmt: skip
    known = [*sizes_mod.PRESET_NAMES, *(c for c in spec.custom_sizes if c not in sizes_mod.PRESET_NAMES)]
    for key, names in (("at", gate.at), ("rungs", gate.rungs)):
        for i, s in enumerate(names):
            if s in names[:i]:
                add((*where, key, i), f"size {s!r} is listed twice")
    for i, s in enumerate(gate.at):
        if s not in known:
            add((*where, "at", i), f"unknown size {s!r} (allowed: OLMo 3 presets and custom "
                f"sizes: {', '.join(known)})")  # fmt: skip
    for i, s in enumerate(gate.rungs):
        if s not in spec.sizes:
            add((*where, "rungs", i), f"size {s!r} is not in sizes: a rung is trained by both "
                f"arms (allowed: {', '.join(spec.sizes)})")  # fmt: skip
        elif s in gate.targets:
            add((*where, "rungs", i), f"size {s!r} is also a target (at): a size is a rung or "
                "a target, not both")  # fmt: skip
        elif gate.variant in spec.variants and not trains_at(spec, gate.variant, s):
            own = spec.variants[gate.variant].sizes or []
            add((*where, "rungs", i), f"variant {gate.variant!r} does not train at {s} (its "
                f"sizes: {', '.join(own)}); a rung needs both arms")  # fmt: skip


#: The fewest rungs a ladder fits: the baseline law has three parameters (E, A, alpha).
MIN_RUNGS = 3

#: (size, its dims, the largest rung's global batch) -> (its planned tokens, or why unknown).
BudgetOf = Any


def baseline_flops(dims: sizes_mod.SizeDims, settings: SizeSettings) -> int:
    """The training FLOPs of the size's baseline run (the order of a ladder's rungs)."""
    t = settings.training
    steps = t.tokens // t.global_batch_size
    return total_train_flops(dims, None, t.sequence_length, t.global_batch_size, steps)


def check_ladder(
    spec: Spec,
    gate: Gate,
    where: Path_,
    dims: dict[str, sizes_mod.SizeDims],
    per_size: dict[str, SizeSettings],
    budget_of: BudgetOf,
    add: Any,
) -> LadderRecord | None:
    """A multiplier gate's rungs (in the baseline's training-FLOPs order) and priced targets,
    after the checks that need them: at least :data:`MIN_RUNGS` rungs, the stage is the largest,
    every target has a planned budget. None when a size it needs did not load (already said)
    or a check failed."""
    targets = gate.targets
    if gate.variant not in spec.variants:
        return None
    rungs = list(gate.rungs) or [
        s for s in spec.sizes if trains_at(spec, gate.variant, s) and s not in targets
    ]
    if any(s not in per_size or s not in dims for s in rungs):
        return None
    rungs.sort(key=lambda s: baseline_flops(dims[s], per_size[s]))
    ok = True
    if len(rungs) < MIN_RUNGS:
        ok = False
        how = "" if gate.rungs else f" (the sizes {gate.variant} trains at, other than the targets)"
        add((*where, "rungs"), f"a ladder needs at least {MIN_RUNGS} rungs (the law has 3 "
            f"parameters), got {len(rungs)}: {', '.join(rungs) or '-'}{how}; add sizes both "
            "arms train at to `sizes` (e.g. 14M, 30M, 60M)")  # fmt: skip
    elif gate.stage != rungs[-1]:
        ok = False
        add((*where, "stage"), f"stage must be the ladder's largest rung, {rungs[-1]} (rungs in "
            f"compute order: {', '.join(rungs)}), got {gate.stage}")  # fmt: skip
    if not rungs:
        return None
    top = per_size[rungs[-1]].training
    arch = spec.variants[gate.variant].as_mapping()
    match = spec.budget.variants.get(gate.variant, spec.budget.match)
    priced: list[LadderTarget] = []
    key = "at" if gate.at else "promote_to"
    for i, s in enumerate(targets):
        d = dims.get(s) or size_dims(spec, s)
        if d is None:
            ok = False  # an unknown size (said by check_gate)
            continue
        t = per_size[s].training if s in per_size else top
        if s in per_size:
            tokens: int | None = t.tokens
        else:
            tokens, why = budget_of(s, d, top.global_batch_size)
            if tokens is None:
                ok = False
                add((*where, key, i), why)
                continue
        price = price_arms(d, arch, match, t.sequence_length, t.global_batch_size, tokens)
        priced.append(LadderTarget(size=s, **dataclasses.asdict(price)))
    return LadderRecord(rungs=rungs, targets=priced) if ok else None


def check_downstream(per_size: dict[str, SizeSettings], add: Any) -> None:
    """Downstream tasks need the `eval` extra and known task names: fail now, not after hours
    (any tokenizer works: ai2-olmo-eval tokenizes the tasks' text with the run's own file)."""
    for st in per_size.values():
        for index, message in problems(st.evaluation.downstream):
            add(("evaluation", "downstream", *([] if index is None else [index])), message)


def check_compile(settings: SizeSettings, add: Any, origin: dict[Path_, Path_]) -> None:
    """``training.compile: true`` on CPU: OLMo-core compiles only on CUDA, so the plan and its
    certificate would say ``compile: true`` for a run that trained eagerly."""
    if settings.training.compile is True and not settings.topology.on_gpu:
        add(
            origin_of(("training", "compile"), origin),
            "compile=true needs CUDA GPUs: OLMo-core's train module compiles only on CUDA "
            "(gpus_per_node=0; allowed on CPU: auto, false)",
        )


# Spec paths resolve against the spec file's folder, not the cwd (old cwd-relative specs work,
# with a warning); `$VAR` paths and URLs are kept as written (the job expands them).

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
_VAR = re.compile(r"\$\{(?P<b>[A-Za-z_][A-Za-z0-9_]*)\}|\$(?P<p>[A-Za-z_][A-Za-z0-9_]*)")
#: Remote schemes OLMo-core's data loading reads (cached_path / fsspec).
REMOTE_SCHEMES = ("s3", "gs", "gcs", "r2", "weka", "http", "https", "hf")


def _relative(value: str) -> bool:
    return not ("$" in value or "://" in value or value.startswith("~") or Path(value).is_absolute())


def resolve(value: str, base: Path) -> tuple[str, str | None]:
    """(the path as the plan records it, a warning or None); see the module docstring."""
    if not _relative(value):
        return value, None
    here = Path(os.path.normpath(base / value))
    if here.exists():
        return str(here), None
    old = Path(os.path.normpath(Path.cwd() / value))
    if old.exists() and old != here:
        better = os.path.relpath(old, base)
        return str(old), (
            f"{value} is resolved against the working directory (the old rule); relative paths "
            f"resolve against the spec's folder {base}: write {better} (found there from anywhere)"
        )
    return str(here), None


def resolve_settings(settings: SizeSettings, base: Path) -> list[tuple[Path_, str]]:
    """Rewrite the size's data/eval/tokenizer paths to what the plan records; [(path, warning)]."""
    out: list[tuple[Path_, str]] = []
    data = settings.training.data

    def one(value: str, where: Path_) -> str:
        got, why = resolve(value, base)
        if why:
            out.append((where, why))
        return got

    if tk.packaged_tokenizer(data.tokenizer) is not None:
        data.tokenizer = str(tk.packaged_tokenizer(data.tokenizer))
    elif data.tokenizer != "dolma2":
        data.tokenizer = one(data.tokenizer, ("training", "data", "tokenizer"))
    if data.paths:
        data.paths = [one(p, ("training", "data", "paths", i)) for i, p in enumerate(data.paths)]
    if data.root:
        data.root = one(data.root, ("training", "data", "root"))
    ev = settings.evaluation
    ev.lm_sets = {
        name: [one(p, ("evaluation", "lm_sets", name, i)) for i, p in enumerate(paths)]
        for name, paths in ev.lm_sets.items()
    }
    return out


@dataclass(frozen=True)
class PathCheck:
    """One checked path: a warning (with its fix) or a note saying it is not checked here."""

    where: Path_
    warning: str | None = None
    note: str | None = None


def check(value: str, where: Path_, folder: bool = False) -> PathCheck | None:
    """Check one (already resolved) path; None when it is a local file/folder that exists."""
    expanded = value
    for m in _VAR.finditer(value):
        var = m.group("b") or m.group("p")
        if var not in os.environ:
            return PathCheck(
                where,
                warning=f"{value}: not checked, ${{{var}}} is not set here (fix: export "
                f"{var}=<its folder> before validate, or --skip-paths where the data is not "
                "reachable, e.g. CI)",
            )
    if "$" in value:
        expanded = os.path.expandvars(value)
    m = _SCHEME.match(expanded)
    if m:
        scheme, rest = m.group("scheme").lower(), m.group("rest")
        bucket, _, key = rest.partition("/")
        if scheme not in REMOTE_SCHEMES:
            return PathCheck(
                where, warning=f"{expanded}: unknown URL scheme {scheme}:// (allowed: "
                f"{', '.join(s + '://' for s in REMOTE_SCHEMES)})",
            )  # fmt: skip
        if not bucket or (not key and not folder) or re.search(r"\s", rest):
            return PathCheck(
                where, warning=f"{expanded}: not a {scheme}:// URL of the form {scheme}://"
                f"<bucket>/<path>",
            )  # fmt: skip
        return PathCheck(where, note=f"{expanded} (remote: not checked here)")
    p = Path(expanded).expanduser()
    ok = p.is_dir() if folder else p.is_file()
    if ok:
        return None
    what = "folder" if folder else "file"
    shown = expanded if expanded == value else f"{value} (= {expanded})"
    kind = file_kind(p)
    if kind is not None:  # there, but not what is read: a folder for a token file, /dev/zero
        want = "a folder" if folder else "a regular file (token ids)"
        return PathCheck(
            where, warning=f"{what} {shown} is {kind}, not {want} (fix: give the path of "
            f"{want.split(' (')[0]}; relative paths resolve against the spec's folder)",
        )  # fmt: skip
    return PathCheck(
        where,
        warning=f"{what} {shown} not found (fix: create it or correct the path; relative paths "
        "resolve against the spec's folder; `olmoablate data prepare` makes the demo's files)",
    )


def file_kind(p: Path) -> str | None:
    """What ``p`` is, in words (``a directory``, ``a character device``, ...), or None when
    nothing is there (or it cannot be looked at)."""
    import stat

    try:
        mode = p.stat().st_mode
    except OSError:
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISSOCK, "a socket")]  # fmt: skip
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def check_settings(settings: SizeSettings) -> list[PathCheck]:
    """Every data/eval path of one size (tokenizer files are checked by the loader itself)."""
    data = settings.training.data
    found: list[PathCheck | None] = []
    for i, p in enumerate(data.paths or []):
        found.append(check(p, ("training", "data", "paths", i)))
    if data.root:
        found.append(check(data.root, ("training", "data", "root"), folder=True))
    for name, paths in settings.evaluation.lm_sets.items():
        for i, p in enumerate(paths):
            found.append(check(p, ("evaluation", "lm_sets", name, i)))
    return [f for f in found if f is not None]
