"""The architecture-block interface (torch-free half) and the registry that finds blocks.

Why an interface: a proposal arrives as "change this in OLMo 3"; olmoablate must validate its
options, price it before anything is submitted and prove at job start that the model it trains
costs what the plan said. This half (:class:`Block`: name, ``Options``, exclusions, exact cost
hooks the accounting composes) is imported by ``validate``/``plan`` on a login node; the torch
half (:class:`olmoablate.models.block_model.BlockModel`) is named by ``model`` and imported only
by the training job (docs/blocks.md). Discovery is lazy, so ``--help`` and ``validate`` keep their
start-up time: bundled blocks are ``"module:attr"`` strings, a key with ``:`` is the user's own
code, and any other unknown key scans the ``olmoablate.blocks`` entry points once. Each block's
code identity (:func:`code_identity`) is recorded in the plan and checked by ``submit``, the job
and the report (:func:`code_changes`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer
from pydantic import BaseModel

from olmoablate import __version__
from olmoablate.errors import UserError
from olmoablate.io import make_console, print_whole

# Checks of a block as it is loaded, and how its option types read (for ``olmoablate blocks``).

def check_block(block: Any, ref: str, where: str) -> None:
    """The class attributes every block sets, checked when it is loaded, so that a block that
    lacks one (or names a torch half that does not exist) is a one-line error in ``validate``
    rather than an internal error there or a failure of the training job."""
    name, options, model = (getattr(block, a, None) for a in ("name", "Options", "model"))
    missing = [
        f"{attr} ({what})"
        for attr, ok, what in (
            ("name", isinstance(name, str) and name, "the key in a variant"),
            ("Options", isinstance(options, type) and issubclass(options, BaseModel),
             "a pydantic model of its options"),
            ("model", isinstance(model, str) and ":" in model,
             "'module:attr' of its olmoablate.models.block_model.BlockModel"),
        )
        if not ok
    ]
    if missing:
        raise UserError(f"{where}: block {ref!r} does not set {', '.join(missing)}")
    module = str(model).partition(":")[0]
    try:  # found without importing it (the torch half is imported by the job only)
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError(
            f"{where}: block {ref!r}: its torch half {model!r} cannot be found "
            f"(no module {module!r} where this runs)"
        )


def type_name(ann: Any) -> str:
    """``ann`` as a reader writes it: ``int | None``, ``'silu' | 'gelu_tanh'``, ``list[int]``
    (``typing.Optional[...]`` used to print as a bare ``Optional``)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann is type(None):
        return "None"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if isinstance(ann, type):
        return ann.__name__
    return re.sub(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])", "", str(ann))  # bare names


if TYPE_CHECKING:  # pragma: no cover - typing only
    from olmoablate.plan.sizes import SizeDims

#: The entry-point group an installed package adds blocks to (``name = "pkg.module:BLOCK"``).
ENTRY_POINT_GROUP = "olmoablate.blocks"

#: The bundled blocks, in the order plan.json records them (torch-free halves, imported lazily).
BUNDLED: dict[str, str] = {
    "siamese_norm": "olmoablate.plan.arch:SIAMESE_NORM",
    "depth_attention": "olmoablate.plan.arch:DEPTH_ATTENTION",
    "looped": "olmoablate.plan.arch:LOOPED",
    "layers": "olmoablate.plan.arch:LAYERS",
    "olmo_core": "olmoablate.plan.arch:OLMO_CORE",
}


@dataclass(frozen=True)
class LayerApp:
    """One application of a physical layer in a forward pass.

    ``layer``: the physical block (0-based); ``depth``: the unrolled index (a looped model's loop
    t, block j is ``t * K + j``; otherwise equal to ``layer``); ``grad``: whether the application
    is differentiated (training FLOPs) or forward only (a third of them).
    """

    layer: int
    depth: int
    grad: bool = True


@dataclass(frozen=True)
class Unrolled:
    """How a forward pass applies the physical layers: ``apps`` in order, and ``readouts``, the
    LM-head applications (a looped model supervises its last ``tail`` loops)."""

    apps: tuple[LayerApp, ...]
    readouts: int = 1


class Block:
    """The torch-free half of an architecture block. Subclass it, set the class attributes,
    override the cost hooks your block changes (every default is "same as OLMo 3"), and export
    one instance (``BLOCK = MyBlock()``).

    Every cost hook returns an exact integer for the model the torch half builds; the job proves
    the parameter count exactly and the FLOPs within ``FLOPS_TOLERANCE`` before the first step
    (:mod:`olmoablate.run.proof`).
    """

    #: The key of the block in a variant (``variants: {x: {<name>: {...options}}}``).
    name: ClassVar[str]
    #: The block's options: a pydantic model (subclass ``olmoablate.errors.Strict`` for
    #: the same strictness as the rest of the spec); every default lives here.
    Options: ClassVar[type[BaseModel]]
    #: One line for ``olmoablate blocks``.
    summary: ClassVar[str] = ""
    #: ``"module:attr"`` of the torch half (a :class:`olmoablate.models.block_model.BlockModel`).
    model: ClassVar[str]
    #: Blocks this one cannot be combined with: name -> why (checked in both directions).
    excludes: ClassVar[Mapping[str, str]] = {}
    #: Position among the blocks of a variant: plan.json order and the order the torch halves
    #: edit the model config in (bundled: 10-40; others 100 then spec order).
    order: ClassVar[int] = 100
    #: Whether the block supports incremental decoding with a KV cache (decode == forward).
    decode_supported: ClassVar[bool] = True
    #: Whether a FLOP counter sees :meth:`layer_flops` as matrix products (False: elementwise
    #: work the convention counts, e.g. a softmax over a few sources; the job's FLOP check then
    #: leaves it out of the match).
    layer_flops_counted: ClassVar[bool] = True
    #: Modules whose source files make up the block's code identity. Empty: every ``.py`` file
    #: of the top-level package of the block's module and of its torch half.
    source_modules: ClassVar[tuple[str, ...]] = ()

    # ---------------------------------------------------------------- validation
    def check_size(self, opts: Any, dims: SizeDims) -> str | tuple[str, str] | None:
        """A problem with this block at this size: one line, or (option, line) to point the
        spec error at that option; None when fine."""
        return None

    # ---------------------------------------------------------------- cost hooks
    def physical_layers(self, opts: Any, n_layers: int) -> int:
        """Blocks with their own weights, given the depth so far (``layers``, ``looped``)."""
        return n_layers

    def extra_params(self, opts: Any, dims: SizeDims, n_layers: int) -> int:
        """Parameters this block adds (negative: removes) to an OLMo 3 model of ``n_layers``
        physical layers."""
        return 0

    def unroll(
        self, opts: Any, n_layers: int, phase: int | None, training: bool
    ) -> Unrolled | None:
        """How a forward pass applies the layers, if this block changes it (one block at most).

        ``phase`` is the block's value for the step (:meth:`phase_at`); ``training``: a training
        forward (False: an inference forward, e.g. decoding).
        """
        return None

    def phase_at(self, opts: Any, step: int) -> int | None:
        """A step-dependent setting of the block (Looped: the loop count b at OLMo-core's
        1-based step), or None when the cost does not depend on the step."""
        return None

    def phases(self, opts: Any, steps: int) -> list[tuple[int, int]] | None:
        """``[(phase, number of steps), ...]`` over steps 1..``steps``, or None (one phase)."""
        return None

    def layer_flops(
        self, opts: Any, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        """Training FLOPs per token this block adds to one differentiated layer application
        (forward + backward = 3x forward; a forward-only application is charged a third)."""
        return 0

    def uncounted_layer_flops(
        self, opts: Any, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        """The part of :meth:`layer_flops` a FLOP counter does not see as matrix products, when
        only part of it is (e.g. norm weights the convention counts); with
        ``layer_flops_counted = False`` all of it is, and this is not asked."""
        return 0

    def head_flops(self, opts: Any, dims: SizeDims) -> int:
        """Training FLOPs per token this block adds to one LM-head read-out."""
        return 0

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        """Extra activation bytes per layer and token (memory estimate)."""
        return 0

    def kv_cache_bytes(self, opts: Any, dims: SizeDims, dtype_bytes: int) -> int:
        """Extra KV-cache bytes per layer application and token when decoding."""
        return 0

    # ---------------------------------------------------------------- helpers
    def parse(self, value: Any) -> BaseModel:
        """``value`` from the spec/plan as this block's options (``true`` = all defaults)."""
        return self.Options.model_validate({} if value is True or value is None else value)

    def describe(self) -> list[tuple[str, str, str]]:
        """(option, type, default) rows for ``olmoablate blocks``."""
        rows = []
        for name, info in self.Options.model_fields.items():
            required = info.is_required()
            default = "required" if required else repr(info.get_default(call_default_factory=True))
            rows.append((name, type_name(info.annotation), default))
        return rows


# ------------------------------------------------------------------------------------ registry
_loaded: dict[str, Block] = {}
_entry_points: dict[str, Any] | None = None


def load_ref(ref: str, where: str) -> Any:
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise UserError(f"{where}: {ref!r} is not a 'module:attr' reference")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (Exception, SystemExit) as err:  # the user's module may raise anything at import
        why = f"{type(err).__name__}: {err}"
        raise UserError(f"{where}: cannot load block {ref!r} ({why})") from None
    return obj


def _as_block(obj: Any, ref: str, where: str) -> Block:
    if isinstance(obj, type) and issubclass(obj, Block):
        obj = obj()
    if not isinstance(obj, Block):
        raise UserError(f"{where}: {ref!r} is not an olmoablate.plan.blocks.Block")
    check_block(obj, ref, where)
    return obj


def installed_entry_points() -> dict[str, Any]:
    """The ``olmoablate.blocks`` entry points (scanned once, only when a name is not bundled)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def known_names() -> list[str]:
    """Bundled and installed block names (scans the entry points)."""
    return [*BUNDLED, *(n for n in installed_entry_points() if n not in BUNDLED)]


def get_block(key: str, where: str = "architecture") -> Block:
    """The block a variant key names: bundled, ``module:attr``, or an installed entry point."""
    hit = _loaded.get(key)
    if hit is not None:
        return hit
    if key in BUNDLED:
        block = _as_block(load_ref(BUNDLED[key], where), BUNDLED[key], where)
        _origins[key] = ("olmoablate", __version__)
    elif ":" in key:
        block = _as_block(load_ref(key, where), key, where)
        _origins[key] = (None, None)  # the user's own code: identified by module and hash
    else:
        ep = installed_entry_points().get(key)
        if ep is None:
            raise UserError(
                f"{where}: unknown block {key!r} (allowed: {', '.join([*known_names(), 'sizes'])}; "
                f"or a 'module:attr' reference, or a package adding the {ENTRY_POINT_GROUP!r} "
                "entry point)"
            )
        block = _as_block(load_ref(ep.value, where), ep.value, where)
        dist = getattr(ep, "dist", None)
        _origins[key] = (dist.name, dist.version) if dist is not None else (None, None)
    if ":" not in key and block.name != key:
        raise UserError(f"{where}: block {key!r} loads a block named {block.name!r}")
    _loaded[key] = block
    return block


def is_block_key(key: str) -> bool:
    """Whether ``key`` is (cheaply) known to be a block name: bundled or already loaded."""
    return key in BUNDLED or key in _loaded


# ------------------------------------------------------------------------------------ identity
def _module_files(module: str) -> list[Path]:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return []
    if spec.submodule_search_locations:  # a package: all its .py files
        # A namespace package (no __init__.py, common in research repositories) has no
        # origin, only its search locations: hash every .py file under each of them.
        roots = [Path(p) for p in spec.submodule_search_locations]
        if spec.origin is not None and not roots:
            roots = [Path(spec.origin).parent]
        return sorted({p for r in roots for p in r.rglob("*.py") if "__pycache__" not in p.parts})
    return [Path(spec.origin)] if spec.origin is not None else []


def _source_files(block: Block) -> tuple[list[Path], Path]:
    """The block's source files and the directory their names are relative to."""
    modules = list(block.source_modules)
    if not modules:
        mine = type(block).__module__.split(".")[0]
        theirs = block.model.partition(":")[0].split(".")[0]
        modules = [mine] if mine == theirs else [mine, theirs]
    files: list[Path] = []
    for m in modules:
        files.extend(f for f in _module_files(m) if f not in files)
    if not files:
        raise UserError(
            f"block {block.name!r}: no source files found for {', '.join(modules)}, so its "
            "code identity could not be recorded (set the block's source_modules)"
        )
    root = Path(*_common_parts([f.parent for f in files]))
    return sorted(files), root


def _common_parts(dirs: list[Path]) -> tuple[str, ...]:
    parts = dirs[0].parts
    for d in dirs[1:]:
        n = 0
        while n < min(len(parts), len(d.parts)) and parts[n] == d.parts[n]:
            n += 1
        parts = parts[:n]
    return parts


#: key -> (distribution, version) of the package a block was loaded from (None for a module
#: reference); bundled blocks are olmoablate's own.
_origins: dict[str, tuple[str | None, str | None]] = {}
_files: dict[str, list[tuple[str, bytes]]] = {}


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).digest()


def code_identity(key: str) -> dict[str, Any]:
    """Where block ``key``'s code comes from and a sha256 over its source files (path + bytes),
    as the plan records it in ``runs[].code``."""
    block = get_block(key)
    if key not in _files:  # which files: fixed per process (the content is re-read on change)
        found, root = _source_files(block)
        _files[key] = [(str(f), f.relative_to(root).as_posix().encode()) for f in found]
    files = _files[key]
    h = hashlib.sha256()
    for path, name in files:
        st = os.stat(path)
        h.update(name + b"\0")
        h.update(_file_digest(path, st.st_mtime_ns, st.st_size))
    module = type(block).__module__
    dist, ver = _origins.get(key, (None, None))
    return {
        "name": block.name,
        "module": f"{module}:{type(block).__name__}",
        "distribution": dist,
        "version": ver,
        "files": len(files),
        "sha256": h.hexdigest(),
    }


def code_of(architecture: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``code_identity`` of every block of an architecture mapping (``{}`` for a baseline)."""
    return {key: code_identity(key) for key in architecture}


def code_changes(recorded: Mapping[str, Any] | None, architecture: Mapping[str, Any]) -> list[str]:
    """One line per block whose code now differs from ``recorded`` (the plan's ``code``)."""
    recorded = dict(recorded or {})
    out = []
    for key, now in code_of(architecture).items():
        was = recorded.get(key)
        if was is None:
            out.append(f"block {key!r}: no code identity in the plan")
        elif was.get("sha256") != now["sha256"] or was.get("version") != now["version"]:
            version = was.get("version") != now["version"]
            out.append(
                f"block {key!r} ({now['module']}) changed since plan: sha256 "
                f"{str(was.get('sha256'))[:12]} -> {now['sha256'][:12]}"
                + (f", version {was.get('version')} -> {now['version']}" if version else "")
                + f", loaded here from {_loaded_from(key)}"
            )
    return out


def _loaded_from(key: str) -> str:
    """The file block ``key`` was imported from in this process: a job whose working directory
    (first on ``sys.path`` under ``python -m``) holds a module of the same name loads other code
    than ``plan`` did, and the refusal should say so rather than only "changed"."""
    module = sys.modules.get(type(get_block(key)).__module__)
    return str(getattr(module, "__file__", None) or "an unknown file")


# `olmoablate blocks`: the bundled and installed blocks with what a spec may set (torch-free).

def blocks_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the installed architecture blocks (bundled and from packages) with their options.

    A variant combines blocks by name: `variants: {x: {<block>: {<option>: value}}}`; a block in
    your own code is named `module:attr` instead. How to add one: docs/blocks.md.
    """
    rows = []
    for name in known_names():
        block = get_block(name, where="blocks")
        ident = code_identity(name)
        dist = ident["distribution"]
        rows.append(
            {
                "name": name,
                "from": f"{dist} {ident['version']}" if dist else ident["module"],
                "module": ident["module"],
                "summary": block.summary,
                "options": [
                    {"option": o, "type": t, "default": d} for o, t, d in block.describe()
                ],
                "excludes": dict(block.excludes),
                "decode": block.decode_supported,
            }
        )
    for r in rows:  # exclusions hold both ways: show them on both blocks
        for other in rows:
            if r["name"] in other["excludes"] and other["name"] not in r["excludes"]:
                r["excludes"][other["name"]] = other["excludes"][r["name"]]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("block", "from", "options (default)", "cannot combine with", "decode")
    for r in rows:
        opts = "\n".join(f"{o['option']}: {o['type']} = {o['default']}" for o in r["options"])
        table.add_row(
            f"{r['name']}\n{r['summary']}",
            r["from"],
            opts or "(none)",
            ", ".join(r["excludes"]) or "-",
            "yes" if r["decode"] else "no",
        )
    print_whole(make_console(), table)
