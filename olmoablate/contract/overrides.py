"""`--set a.b.c=value`: change one field of a spec from the command line, and the YAML numbers.

Why in the contract: `plan` applies the overrides, `submit --set` checks a plan's identity with
them and the report re-applies them to the spec file when it checks the pre-registered gate, so
what an override means is defined once. Why overrides rather than editing YAML: a smoke test or a sweep point should not need a copied spec
(OLMo-core scripts take ``--a.b=c`` dotlists, NeMo-Run ``a.b=1``, Hydra ``+a.b=c``). An override
is applied to the parsed document before validation, so it is checked exactly like the file
(its problems name the override), and it is part of the spec's identity: :func:`spec_sha256`
hashes the file's bytes and then every override in order, so a plan made with ``--set`` can never
pass for the plain file's plan (pre-registration), and plan.json records the overrides.

The value is read as YAML (``3e-4``, ``true``, ``[1, 2]``, ``{1B: 4, default: 2}``) with the
numbers of :func:`loader_class`: YAML 1.1 reads ``3e-4`` (no dot, or no exponent sign) as a
string, YAML 1.2 and OmegaConf read a float; specs follow the users' expectation.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import yaml

Path_ = tuple[str | int, ...]

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
    """One override's value as YAML (an empty value is null), within the limits every spec is
    parsed with (olmoablate.io: size, nesting, alias expansion; an InputLimitError)."""
    from olmoablate.io import compose_yaml_bounded

    return compose_yaml_bounded(text, loader_class())[1]


def shorten(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters for a one-line message (a value may be megabytes)."""
    return text if len(text) <= width else text[: width - 3] + "..."


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

    Setting a size's value of a field that has one value for all sizes (``lr.1B=3e-4`` where
    ``lr: 4e-4``) makes it per-size: ``{1B: 3e-4, default: 4e-4}``. Raises OverrideError
    (with the override's text) for a path through a value or past the end of a list.
    """
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
    """The spec's identity as plan.json records it: sha256 of the file's bytes, then
    ``\\n--set <override>`` for each override in order (no overrides: the file's own sha256, as
    before overrides existed)."""
    h = hashlib.sha256(data)
    for text in overrides:
        h.update(b"\n--set " + text.encode("utf-8"))
    return h.hexdigest()
