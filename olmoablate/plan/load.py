"""Load a spec file: YAML with line numbers, per-size resolution, schema and cross-field checks.

Every problem becomes one line ``FILE:LINE: field.path: what is wrong (allowed: ...)`` (an editor
can jump to it), and all of a file's problems are collected, not one typo per CI run.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import ValidationError

from olmoablate.errors import UserError, one_line, one_union_member, parse_count, shorten
from olmoablate.io import MAX_YAML_BYTES, InputLimitError, compose_yaml_bounded
from olmoablate.plan import checks as spec_paths
from olmoablate.plan import sizes as sizes_mod
from olmoablate.plan import tokens as datacheck
from olmoablate.plan.accounting import param_count
from olmoablate.plan.checks import (
    Path_,
    check_architectures,
    check_batch,
    check_budget,
    check_compile,
    check_downstream,
    check_execution,
    check_gate,
    check_ladder,
    check_names,
    check_run_ids,
    check_seed_range,
    origin_of,
)
from olmoablate.plan.planfile import LadderRecord
from olmoablate.plan.schema import (
    PER_SIZE_SECTIONS,
    UPPER_BOUND_WHY,
    PerParam,
    SizeSettings,
    Spec,
)

# `--set a.b.c=value` overrides (`plan`, `submit --set`, the report's pre-registration check):
# applied to the parsed document before validation, part of :func:`spec_sha256`; values are YAML
# with YAML 1.2 exponent floats (``3e-4`` is a float, as users expect).

#: Floats YAML 1.1 leaves as strings: an exponent without a dot or without a sign (``3e-4``,
#: ``1e5``, ``1.0e5``). Integers and YAML 1.1 floats are matched by PyYAML's own resolvers first.
_FLOAT_E = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


@lru_cache(maxsize=1)
def loader_class() -> type:
    """The safe YAML loader of specs (libyaml's when available) with YAML 1.2 exponent floats."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    cls = type("SpecLoader", (base,), {})
    cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_E, list("-+0123456789."))  # type: ignore[attr-defined]
    return cls


def parse_value(text: str) -> Any:
    """One override's value as YAML (empty: null), within every spec's parse limits."""
    return compose_yaml_bounded(text, loader_class())[1]


class OverrideError(ValueError):
    """An override that is not FIELD.PATH=VALUE or does not fit the document."""


def split(text: str) -> tuple[Path_, Any]:
    """``a.b.1B=3e-4`` -> (("a", "b", "1B"), 3e-4). A numeric part indexes a list."""
    key, eq, value = text.partition("=")
    parts = key.strip().lstrip("+").split(".")
    if not eq or not key.strip() or any(not p for p in parts):
        raise OverrideError("expected FIELD.PATH=VALUE, e.g. training.optimizer.lr.1B=3e-4")
    try:
        parsed = parse_value(value)
    except (yaml.YAMLError, ValueError) as err:  # ValueError: an InputLimitError
        first = shorten(str(err).splitlines()[0], 200)
        raise OverrideError(f"value {shorten(value)!r} is not YAML ({first})") from None
    return tuple(int(p) if p.isdigit() else p for p in parts), parsed


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[str], size_names: set[str]
) -> tuple[dict[str, Any], dict[Path_, str]]:
    """A copy of ``raw`` with every override applied, and {field path: override text}.
    ``lr.1B=3e-4`` where ``lr: 4e-4`` makes it per-size: ``{1B: 3e-4, default: 4e-4}``.
    OverrideError for a path through a value or past the end of a list."""
    doc = copy.deepcopy(raw)
    where: dict[Path_, str] = {}
    for text in overrides:
        path, value = split(text)
        node: Any = doc
        for i, part in enumerate(path[:-1]):
            nxt = path[i + 1]
            if isinstance(node, list):
                if not isinstance(part, int) or part >= len(node):
                    raise OverrideError(f"{_override_path(path[: i + 1])}: no such list item")
                child = node[part]
            else:
                key = str(part)
                child = node.get(key)
                if child is None:
                    child = node[key] = {}
                elif not isinstance(child, (dict, list)):
                    if isinstance(nxt, str) and nxt in size_names | {"default"}:
                        child = node[key] = {"default": child}
                    else:
                        raise OverrideError(
                            f"{_override_path(path[: i + 1])} is a value ({child!r}), not a section"
                        )
            node = child
        last = path[-1]
        if isinstance(node, list):
            if not isinstance(last, int) or last >= len(node):
                raise OverrideError(f"{_override_path(path)}: no such list item")
            node[last] = value
        else:
            node[str(last)] = value
        where[tuple(str(p) if not isinstance(p, int) else p for p in path)] = text
    return doc, where


def _override_path(path: Path_) -> str:
    return ".".join(str(p) for p in path)


def covering(path: Path_, where: dict[Path_, str]) -> str | None:
    """The override that set ``path`` or a field above or below it (for error messages): of
    ``--set gate={...} --set gate.noise.floor=x``, the second for a problem of the floor."""
    p = tuple(map(str, path))
    hits = []
    for opath, text in where.items():
        o = tuple(map(str, opath))
        if p[: len(o)] == o or (len(p) >= len(o) - 1 and o[: len(p)] == p):
            hits.append((len(o) if p[: len(o)] == o else -len(o), text))
    return max(hits, key=lambda h: h[0])[1] if hits else None


def spec_sha256(data: bytes, overrides: Sequence[str] = ()) -> str:
    """sha256 of the file's bytes, then ``\\n--set <override>`` for each override in order (none:
    the file's own sha256, as before overrides existed)."""
    h = hashlib.sha256(data)
    for text in overrides:
        h.update(b"\n--set " + text.encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str
    #: The `--set` override that wrote this field, when one did.
    override: str | None = None

    def __str__(self) -> str:
        via = f" (from --set {shorten(self.override)})" if self.override else ""
        return one_line(f"{self.file}:{self.line}: {self.field}: {self.message}{via}")


class SpecError(UserError):
    """One or more problems in spec files; ``str()`` is one line per problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass
class LoadedSpec:
    path: Path
    text: str
    sha256: str
    raw: dict[str, Any]
    spec: Spec
    dims: dict[str, sizes_mod.SizeDims]
    per_size: dict[str, SizeSettings]
    microbatch: dict[str, int] = field(default_factory=dict)
    #: per size: what each LM eval set holds (tokens an eval point scores, unigram entropy).
    eval_sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Problems that do not stop the spec (``validate`` prints them with ``warning:``).
    warnings: list[Problem] = field(default_factory=list)
    #: ``--set`` overrides applied (in order) and the fields they set.
    overrides: list[str] = field(default_factory=list)
    override_paths: dict[Path_, str] = field(default_factory=dict)
    #: Where each field is written (line numbers) and, per size, where each resolved per-size
    #: field came from: what the feasibility checks need to point at a line.
    lines: Any = None
    origins: dict[str, dict[Path_, Path_]] = field(default_factory=dict)
    #: Per multiplier gate (by name): its rungs in compute order and its priced targets.
    ladders: dict[str, LadderRecord] = field(default_factory=dict)

    def problem(self, path: Path_, message: str, size: str | None = None) -> Problem:
        """A Problem at ``path`` (a resolved per-size path when ``size`` is given)."""
        if size is not None:
            path = origin_of(path, self.origins.get(size, {}))
        return _problem(str(self.path), self.lines, path, message, self.override_paths)


def _problem(
    file: str, lines: _LineMap | None, path: Path_, message: str, overrides: dict[Path_, str]
) -> Problem:
    """The Problem at ``path``: its line, dotted field and the ``--set`` that wrote it, if any."""
    line = lines.line_of(path) if lines is not None else 1
    return Problem(file, line, _dotted(path), message, covering(path, overrides))


# ----------------------------------------------------------------------------- yaml with positions
class _LineMap:
    """Maps a field path to the 1-based line where it (or its closest existing parent) is written."""

    def __init__(self) -> None:
        self.lines: dict[Path_, int] = {(): 1}
        self.duplicates: list[tuple[Path_, int]] = []

    def walk(self, node: yaml.Node, path: Path_ = ()) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                sub = (*path, key)
                if key in seen:
                    self.duplicates.append((sub, key_node.start_mark.line + 1))
                seen.add(key)
                self.lines[sub] = key_node.start_mark.line + 1
                self.walk(value_node, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, i)
                self.lines[sub] = item.start_mark.line + 1
                self.walk(item, sub)

    def line_of(self, path: Path_) -> int:
        p = tuple(path)
        while p not in self.lines:
            p = p[:-1]
        return self.lines[p]


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if part == "[key]":  # pydantic's marker for an invalid mapping key
            out += " (key)"
            continue
        # a key is user input: one line (a newline escaped), and a long name cut
        part = part if isinstance(part, int) else one_line(shorten(str(part), 40))
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "<document>"


def _pydantic_message(err: dict[str, Any], model: type | None) -> str:
    """A short, actionable message for one pydantic error, with the allowed values when known."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    msg = str(err.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, err.get("loc", ())[:-1])
        if not allowed:
            return "unknown field"
        loc = err.get("loc", ())
        close = difflib.get_close_matches(str(loc[-1]) if loc else "", allowed, n=1, cutoff=0.6)
        mean = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown field ({mean}allowed: {', '.join(allowed)})"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"invalid value {shorten(repr(err.get('input')))} (allowed: {ctx.get('expected', '')})"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "less_than_equal" and str((err.get("loc") or ("",))[-1]) in UPPER_BOUND_WHY:
        why = UPPER_BOUND_WHY[str(err["loc"][-1])]
        return (
            f"{shorten(repr(err.get('input')))} is above the upper bound (allowed: at most "
            f"{ctx.get('le')}; {why})"
        )
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return f"{msg} (got {shorten(repr(err.get('input')))})"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{msg} (got {type(err.get('input')).__name__} {shorten(repr(err.get('input')))})"
    if kind == "string_pattern_mismatch":
        return f"invalid name {shorten(repr(err.get('input')))} (allowed: letters, digits, '_', '.', '-'; must start with a letter or digit)"
    return msg


def _allowed_fields(model: type | None, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the pydantic model found by following ``loc`` from ``model``."""
    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(str(part))
        if info is None:
            sub = getattr(current, "field_model", None)  # a mapping of typed entries (blocks)
            found = sub(str(part)) if callable(sub) else None
            if found is not None:
                current = found
            continue  # a dict key or list index: `_model_in` already stepped into the values
        current = _model_in(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _model_in(annotation: Any) -> Any:
    """The BaseModel class inside ``X | None`` / ``dict[str, X]`` / ``list[X]`` annotations."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------- per-size values
#: A key that reads as a size (``307M``, ``1.5B``): in a per-size mapping, a misspelled size.
_SIZE_LIKE = re.compile(r"[0-9]+(\.[0-9]+)?[KMBT]")


def _is_per_size(value: Any, size_names: set[str]) -> bool:
    if not isinstance(value, dict) or not value:
        return False
    keys = {str(k) for k in value}
    return keys <= size_names | {"default"} and bool(keys & size_names)


def _resolve(
    value: Any,
    size: str,
    size_names: set[str],
    path: Path_,
    origin: dict[Path_, Path_],
    resolved_path: Path_,
    problems: list[tuple[Path_, str]],
) -> Any:
    """Pick ``size``'s value from every per-size mapping inside ``value``; record where it came from."""
    origin[resolved_path] = path
    if isinstance(value, dict) and value and not _is_per_size(value, size_names):
        keys = [str(k) for k in value]
        odd = [k for k in keys if k not in size_names and k != "default"]
        if set(keys) & size_names and all(_SIZE_LIKE.fullmatch(k) for k in odd):
            allowed = f"{', '.join(sorted(size_names))}, default"
            problems.extend(((*path, k), f"unknown size key {k} (allowed: {allowed})") for k in odd)
            return None
    if _is_per_size(value, size_names):
        keys = {str(k): k for k in value}
        if size in keys:
            key = keys[size]
        elif "default" in keys:
            key = keys["default"]
        else:
            given = ", ".join(str(k) for k in value)
            problems.append(
                (path, f"no value for size {size} (given for: {given}; add {size} or default)")
            )
            return None
        return _resolve(
            value[key], size, size_names, (*path, str(key)), origin, resolved_path, problems
        )
    if isinstance(value, dict):
        return {
            k: _resolve(
                v, size, size_names, (*path, str(k)), origin, (*resolved_path, str(k)), problems
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _resolve(v, size, size_names, (*path, i), origin, (*resolved_path, i), problems)
            for i, v in enumerate(value)
        ]
    return value


def _per_param(
    training: Any, dims: sizes_mod.SizeDims, origin: dict[Path_, Path_], add: Any
) -> bool:
    """``tokens: {per_param: N}`` in one size's resolved ``training`` replaced by its count
    (:class:`olmoablate.plan.schema.PerParam`); False after adding its problems."""
    if not isinstance(training, dict) or not isinstance(training.get("tokens"), dict):
        return True
    try:
        rule = PerParam.model_validate(training["tokens"])
    except ValidationError as err:
        for e in err.errors():
            add(origin_of(("training", "tokens", *e["loc"]), origin), _pydantic_message(e, PerParam))
        return False
    training["tokens"] = per_param_tokens(rule, dims, training.get("global_batch_size"))
    return True


def per_param_tokens(rule: PerParam, dims: sizes_mod.SizeDims, global_batch_size: Any) -> int:
    """The count ``rule`` gives at ``dims``: N x the baseline's total parameters, rounded up to a
    whole number of ``global_batch_size`` (not rounded while that is invalid: the schema says
    what is wrong with it)."""
    gbs = global_batch_size if type(global_batch_size) is int and global_batch_size > 0 else None
    return rule.tokens(param_count(dims), gbs)


def target_budget(
    raw: dict[str, Any], size: str, size_names: set[str], dims: sizes_mod.SizeDims, gbs: int
) -> tuple[int | None, str]:
    """(The planned baseline tokens of a multiplier gate's target outside ``sizes``, "") or
    (None, why). It comes from ``training.tokens`` resolved for that size: ``{per_param: N}``
    (rounded up to whole batches of ``gbs``, the largest rung's), or a count given for that size
    by name; a count shared with other sizes is no budget for it."""
    found: list[tuple[Path_, str]] = []
    origin: dict[Path_, Path_] = {}
    training = _resolve(raw.get("training") or {}, size, size_names, ("training",), origin,
                        ("training",), found)  # fmt: skip
    value = training.get("tokens") if isinstance(training, dict) else None
    fix = f"add {size} to sizes, give training.tokens a {size}: value, or use {{per_param: N}}"
    if isinstance(value, dict):
        try:
            rule = PerParam.model_validate(value)
        except ValidationError as err:
            return None, f"target {size}: training.tokens.per_param: {_pydantic_message(err.errors()[0], PerParam)}"
        return per_param_tokens(rule, dims, gbs), ""
    named = size in (str(p) for p in origin.get(("training", "tokens"), ()))
    if value is not None and named:
        try:
            return parse_count(value), ""
        except ValueError as err:
            return None, f"target {size}: training.tokens.{size}: {err}"
    given = "no count" if value is None else f"the count {shorten(repr(value))} of other sizes"
    return None, (
        f"target {size} is not in sizes (priced, not planned), and training.tokens gives it "
        f"{given}: its planned budget is unknown ({fix})"
    )


# ----------------------------------------------------------------------------------------- loading
def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedSpec:
    """Parse and fully validate one spec file, ``--set`` ``overrides`` applied in order; a
    SpecError lists every problem found."""
    p = Path(path)
    fname = str(path)
    try:
        # read once: a pipe (``validate <(cat spec)``) or FIFO gives its bytes only once
        with p.open("rb") as fh:
            data_bytes = fh.read(MAX_YAML_BYTES + 1)
            info = os.fstat(fh.fileno())
    except OSError as err:
        raise SpecError([Problem(fname, 1, "<file>", f"cannot read: {err.strerror}")]) from None
    if len(data_bytes) > MAX_YAML_BYTES:  # the real size of a file; a pipe's is not known
        size = (f"{info.st_size} bytes" if stat.S_ISREG(info.st_mode)
                else f"more than {MAX_YAML_BYTES} bytes (a stream, read that far)")  # fmt: skip
        why = f"refused: the spec is {size}, over the limit of {MAX_YAML_BYTES} bytes (1 MiB)"
        raise SpecError([Problem(fname, 1, "<file>", why)])
    try:
        text = data_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError([Problem(fname, 1, "<file>", "not UTF-8 text")]) from None

    lines = _LineMap()
    # One bounded parse (olmoablate.io: size, nesting and alias expansion limits) with the safe
    # loader: the node tree gives line numbers, the same tree is constructed into plain data.
    try:
        node, raw = compose_yaml_bounded(text, loader_class())
    except InputLimitError as err:
        raise SpecError([Problem(fname, err.line, "<yaml>", f"refused: {err}")]) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        detail = f"{context}: {problem}" if context else problem
        raise SpecError([Problem(fname, line, "<yaml>", f"YAML syntax error: {detail}")]) from None
    if node is not None:
        lines.walk(node)
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else type(raw).__name__
        raise SpecError(
            [Problem(fname, 1, "<document>", f"a spec must be a YAML mapping, got {got}")]
        )

    problems: list[Problem] = []
    warnings: list[Problem] = []
    set_paths: dict[Path_, str] = {}

    def add(path: Path_, message: str) -> None:
        problems.append(_problem(fname, lines, path, message, set_paths))

    def warn(path: Path_, message: str) -> None:
        warnings.append(_problem(fname, lines, path, f"warning: {message}", set_paths))

    if overrides:
        customs = raw.get("custom_sizes")
        known = set(sizes_mod.PRESET_NAMES) | (
            {str(k) for k in customs} if isinstance(customs, dict) else set()
        )
        for text in overrides:
            try:
                raw, got = apply_overrides(raw, [text], known)
            except OverrideError as err:
                raise SpecError([Problem(fname, 1, f"--set {shorten(text)}", str(err))]) from None
            set_paths.update(got)

    for dup_path, _line in lines.duplicates:
        add(dup_path, "duplicate key (a later value would silently replace the earlier one)")

    try:
        spec = Spec.model_validate(raw)
    except ValidationError as err:
        for e in one_union_member(err.errors()):
            add(tuple(e["loc"]), _pydantic_message(e, Spec))
        raise SpecError(_dedupe(problems)) from None

    # ---- sizes ------------------------------------------------------------------------------
    dims: dict[str, sizes_mod.SizeDims] = {}
    allowed_sizes = list(sizes_mod.PRESET_NAMES) + list(spec.custom_sizes)
    for i, name in enumerate(spec.sizes):
        if name in spec.custom_sizes:
            if name in sizes_mod.PRESET_NAMES:
                shadow = f"custom size {name!r} shadows the OLMo 3 preset of that name"
                add(("custom_sizes", name), shadow)
            dims[name] = sizes_mod.custom(name, spec.custom_sizes[name].model_dump())
        elif name in sizes_mod.PRESET_NAMES:
            dims[name] = sizes_mod.preset(name)
        else:
            add(("sizes", i), f"unknown size {name!r} (allowed: {', '.join(allowed_sizes)})")
    if len(set(spec.sizes)) != len(spec.sizes):
        add(("sizes",), "sizes must be unique")

    size_names = set(sizes_mod.PRESET_NAMES) | set(spec.custom_sizes)
    per_size: dict[str, SizeSettings] = {}
    microbatch: dict[str, int] = {}
    eval_sets: dict[str, dict[str, Any]] = {}
    origins: dict[str, dict[Path_, Path_]] = {}
    for size in dims:
        resolved: dict[str, Any] = {}
        origin: dict[Path_, Path_] = origins.setdefault(size, {})
        for section, model in PER_SIZE_SECTIONS.items():
            res_problems: list[tuple[Path_, str]] = []
            given = raw.get(section, {}) or {}
            value = _resolve(given, size, size_names, (section,), origin, (section,), res_problems)
            for ppath, msg in res_problems:
                add(ppath, msg)
            if res_problems:
                continue
            if section == "training" and not _per_param(value, dims[size], origin, add):
                continue
            try:
                resolved[section] = model.model_validate(value)
            except ValidationError as err:
                for e in err.errors():
                    add(origin_of((section, *e["loc"]), origin), _pydantic_message(e, model))
        if len(resolved) != len(PER_SIZE_SECTIONS):
            continue
        settings = SizeSettings(**resolved)
        for ppath, msg in spec_paths.resolve_settings(settings, spec_folder(p, info.st_mode)):
            warn(origin_of(ppath, origin), msg)
        per_size[size] = settings
        mb = check_batch(settings, add, origin)
        if mb:
            microbatch[size] = mb
        check_architectures(spec, dims[size], add)
        data_problems, facts = datacheck.check_size(settings, dims[size], mb)
        for ppath, msg in data_problems:
            add(origin_of(ppath, origin), msg)
        eval_sets[size] = {name: f.to_dict() for name, f in facts.items()}
        check_execution(settings, add, origin)
        check_compile(settings, add, origin)
        if dims[size].sliding_window >= settings.training.sequence_length:
            warn(
                origin_of(("training", "sequence_length"), origin),
                f"SWA inactive: every layer is full (size {size}: sliding_window="
                f"{dims[size].sliding_window} >= sequence_length="
                f"{settings.training.sequence_length}; OLMo 3 pretrains at 8192 with window 4096)",
            )

    for name, arch in spec.variants.items():
        for i, s in enumerate(arch.sizes or []):
            if s not in spec.sizes:
                add(
                    ("variants", name, "sizes", i),
                    f"size {s!r} is not in the spec's sizes (allowed: {', '.join(spec.sizes)})",
                )
    check_budget(spec, add)
    check_names(spec, add)
    check_run_ids(spec, add)
    check_seed_range(spec, per_size, add)
    ladders: dict[str, LadderRecord] = {}

    def budget_of(size: str, d: sizes_mod.SizeDims, gbs: int) -> tuple[int | None, str]:
        return target_budget(raw, size, size_names, d, gbs)

    for name, gate, where in spec.all_gates():
        check_gate(spec, gate, where, per_size, add)
        if gate.rule == "multiplier":
            ladder = check_ladder(spec, gate, where, dims, per_size, budget_of, add)
            if ladder is not None:
                ladders[name] = ladder
    check_downstream(per_size, add)

    if problems:
        raise SpecError(_dedupe(problems))
    return LoadedSpec(
        path=p,
        text=text,
        sha256=spec_sha256(data_bytes, list(overrides)),
        raw=raw,
        spec=spec,
        dims=dims,
        per_size=per_size,
        microbatch=microbatch,
        eval_sets=eval_sets,
        warnings=_dedupe(warnings),
        overrides=list(overrides),
        override_paths=set_paths,
        lines=lines,
        origins=origins,
        ladders=ladders,
    )


def spec_folder(path: Path, mode: int) -> Path:
    """The folder a spec's relative paths resolve against: the spec file's, or the working
    directory for a spec read from an unnamed pipe (``<(cat spec)`` is ``/dev/fd/N``, a pipe
    with no folder of its own)."""
    real = path.resolve()
    unnamed = not stat.S_ISREG(mode) and (
        str(real).startswith(("/proc/", "/dev/fd/")) or real.name.startswith("pipe:")
    )
    return Path.cwd() if unnamed else real.parent


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[int, str, str]] = set()
    out: list[Problem] = []
    for pr in problems:
        key = (pr.line, pr.field, pr.message)
        if key not in seen:
            seen.add(key)
            out.append(pr)
    return sorted(out, key=lambda pr: pr.line)
