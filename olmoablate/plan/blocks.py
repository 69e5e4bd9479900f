"""The architecture-block interface (torch-free half) and the registry that finds blocks.

A block must be validated and priced on a login node and proved at job start to cost what the
plan said: this half (:class:`Block`, exact cost hooks) is what ``validate``/``plan`` import; the
torch half (``model``) only the job (docs/blocks.md). Discovery is lazy (fast ``--help``): bundled
blocks are ``"module:attr"`` strings, a key with ``:`` is the user's code, any other unknown key
scans the entry points once. Code identities are recorded in the plan (:func:`code_changes`).
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


def check_block(block: Any, ref: str, where: str) -> None:
    """The class attributes every block sets, checked at load: a one-line error in ``validate``,
    not an internal error there or a failed training job."""
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
    """One application of a physical ``layer`` (0-based) in a forward pass at unrolled index
    ``depth`` (loop t, block j: ``t * K + j``); ``grad``: differentiated, else forward only."""

    layer: int
    depth: int
    grad: bool = True


@dataclass(frozen=True)
class Unrolled:
    """How a forward pass applies the layers: ``apps`` in order, ``readouts`` LM-head reads."""

    apps: tuple[LayerApp, ...]
    readouts: int = 1


class Block:
    """The torch-free half of an architecture block: subclass, set the class attributes,
    override the cost hooks that change (defaults: "same as OLMo 3"), export ``BLOCK = MyBlock()``.
    Cost hooks are exact integers: the job proves params exactly and FLOPs within
    ``FLOPS_TOLERANCE`` before the first step (:mod:`olmoablate.run.proof`)."""

    #: The key in a variant (``variants: {x: {<name>: {...options}}}``).
    name: ClassVar[str]
    #: A pydantic model (subclass ``olmoablate.errors.Strict`` for the spec's strictness).
    Options: ClassVar[type[BaseModel]]
    summary: ClassVar[str] = ""
    #: ``"module:attr"`` of the torch half (a :class:`olmoablate.models.block_model.BlockModel`).
    model: ClassVar[str]
    #: Blocks this one cannot be combined with: name -> why (checked in both directions).
    excludes: ClassVar[Mapping[str, str]] = {}
    #: Position among the blocks of a variant: plan.json order and the order the torch halves
    #: edit the model config in (bundled: 10-40; others 100 then spec order).
    order: ClassVar[int] = 100
    #: Incremental decoding with a KV cache is supported (decode == forward).
    decode_supported: ClassVar[bool] = True
    #: A FLOP counter sees :meth:`layer_flops` as matrix products (False: elementwise work,
    #: e.g. a softmax over a few sources; the job's FLOP check then leaves it out).
    layer_flops_counted: ClassVar[bool] = True
    #: Modules whose sources are the code identity; empty: the top-level packages of both halves.
    source_modules: ClassVar[tuple[str, ...]] = ()

    def check_size(self, opts: Any, dims: SizeDims) -> str | tuple[str, str] | None:
        """A problem at this size: a line, or (option, line) to point at that option; or None."""
        return None

    def physical_layers(self, opts: Any, n_layers: int) -> int:
        """Blocks with their own weights, given the depth so far (``layers``, ``looped``)."""
        return n_layers

    def extra_params(self, opts: Any, dims: SizeDims, n_layers: int) -> int:
        """Parameters added (negative: removed) to an OLMo 3 model of ``n_layers`` layers."""
        return 0

    def unroll(
        self, opts: Any, n_layers: int, phase: int | None, training: bool
    ) -> Unrolled | None:
        """How a forward pass applies the layers, if this block changes it (one block at most);
        ``phase``: :meth:`phase_at` of the step; ``training`` False: inference (decoding)."""
        return None

    def phase_at(self, opts: Any, step: int) -> int | None:
        """A step-dependent setting (Looped: b at OLMo-core's 1-based step), or None."""
        return None

    def phases(self, opts: Any, steps: int) -> list[tuple[int, int]] | None:
        """``[(phase, number of steps), ...]`` over steps 1..``steps``, or None (one phase)."""
        return None

    def layer_flops(
        self, opts: Any, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        """Training FLOPs per token added to one differentiated layer application (3x forward;
        a forward-only application is charged a third)."""
        return 0

    def uncounted_layer_flops(
        self, opts: Any, dims: SizeDims, app: LayerApp, n_layers: int, seq_len: int
    ) -> int:
        """The part of :meth:`layer_flops` a FLOP counter does not see as matrix products (e.g.
        norm weights); not asked when ``layer_flops_counted`` is False."""
        return 0

    def head_flops(self, opts: Any, dims: SizeDims) -> int:
        """Training FLOPs per token added to one LM-head read-out."""
        return 0

    def activation_bytes(self, opts: Any, dims: SizeDims, act_unit: int) -> int:
        """Extra activation bytes per layer and token (memory estimate)."""
        return 0

    def kv_cache_bytes(self, opts: Any, dims: SizeDims, dtype_bytes: int) -> int:
        """Extra KV-cache bytes per layer application and token when decoding."""
        return 0

    def parse(self, value: Any) -> BaseModel:
        """The block's options from the spec/plan (``true`` = all defaults)."""
        return self.Options.model_validate({} if value is True or value is None else value)

    def describe(self) -> list[tuple[str, str, str]]:
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
    """Scanned once, only when a name is not bundled."""
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def known_names() -> list[str]:
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
    return sorted(files), Path(os.path.commonpath([f.parent for f in files]))


#: key -> (distribution, version) of the package a block was loaded from (None for a module
#: reference); bundled blocks are olmoablate's own.
_origins: dict[str, tuple[str | None, str | None]] = {}
_files: dict[str, list[tuple[str, bytes]]] = {}


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).digest()


def code_identity(key: str) -> dict[str, Any]:
    """Where block ``key``'s code comes from and a sha256 over its files (``runs[].code``)."""
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
    """The file block ``key`` was imported from here: a job whose working directory holds a module
    of the same name (first on ``sys.path``) loads other code than ``plan`` did; say so."""
    module = sys.modules.get(type(get_block(key)).__module__)
    return str(getattr(module, "__file__", None) or "an unknown file")


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
