"""User-facing errors, and the strict pydantic base whose validation errors become them.

The CLI turns a UserError into one line and exit code 2, never a traceback; every typed file
(the spec, plan.json, the run files) validates through :class:`Strict`, so a problem in any of
them is the same one line naming the file and the field."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class UserError(Exception):
    """Bad input the user can fix. ``str(err)`` is the complete, one-line message."""

    exit_code = 2


#: Set to see the Python traceback of an unexpected error (`olmoablate.cli.main`).
TRACEBACK_ENV = "OLMOABLATE_TRACEBACK"


def unexpected_error_line(err: BaseException) -> tuple[str, int]:
    """One line and an exit code for an error no command turned into a :class:`UserError`.

    The CLI promises no traceback on any path: an OS error (a path that is a file, a folder
    without permission, a full disk) is the user's to fix (exit 2); anything else is our bug,
    said in one line with how to see its traceback (exit 1).
    """
    if isinstance(err, OSError):
        what = err.strerror or str(err)
        names = [n for n in (err.filename, getattr(err, "filename2", None)) if n]
        where = f": {' -> '.join(str(n) for n in names)}" if names else ""
        return f"error: {what}{where}", 2
    first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
    return (
        f"internal error: {type(err).__name__}: {first} (set {TRACEBACK_ENV}=1 for the "
        "traceback, and please report it)",
        1,
    )


def parse_choices(values: list[str] | None, allowed: tuple[str, ...], option: str) -> set[str]:
    """``--option a,b --option c`` -> {a, b, c}, each one of ``allowed`` (else a UserError)."""
    chosen = {v.strip() for raw in values or [] for v in raw.split(",") if v.strip()}
    bad = sorted(chosen - set(allowed))
    if bad:
        raise UserError(f"{option} {', '.join(bad)}: allowed values are {', '.join(allowed)}")
    return chosen


def shorten(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters for a one-line message (a value may be megabytes)."""
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (a newline, a tab, a terminal escape)
    written as its Python escape, so a message built from user input stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


#: Names of specs, variants, gates and eval sets (they become file and run names). Match with
#: ``re.fullmatch`` in Python (``$`` alone also matches before a final newline).
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Strict(BaseModel):
    """Unknown keys, type coercions (``true`` as 1, ``"8"`` as 8) and inf/nan are errors.

    Why strict: a typo in a 7B spec (``learning_rate`` for ``lr``) must fail `validate` in CI, not
    train with a default for days; a hand-edited plan.json fails `Plan.load` naming the field.

    ``defer_build``: a model's validator is built on its first use, not at import, so a command
    pays only for the models it validates (`validate` starts in ~0.3 s on a login node).
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=False, defer_build=True
    )


PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]


_SUFFIX = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def parse_count(value: Any) -> int:
    """``262144``, ``2.5e9``, ``"100M"``, ``"2.5B"``, ``"1T"`` -> int (tokens)."""
    if isinstance(value, bool):
        raise ValueError("must be a number of tokens like 262144, 2.5e9 or '100M'")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number of tokens")
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMBGT]?)\s*", value.upper())
        if m:
            number = float(m.group(1)) * _SUFFIX.get(m.group(2), 1)
            if number.is_integer():
                return int(number)
    raise ValueError("must be a number of tokens like 262144, 2.5e9 or '100M' / '2.5B' / '1T'")


def parse_minutes(value: Any) -> int:
    """Slurm time: minutes (int) or ``"HH:MM:SS"`` / ``"D-HH:MM:SS"`` / ``"MM:SS"`` -> minutes."""
    if isinstance(value, bool):
        raise ValueError("must be minutes or 'D-HH:MM:SS'")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{2})(?::(\d{2}))?", value.strip())
        if m:
            days = int(m.group(1) or 0)
            if m.group(4) is None:  # MM:SS or D-HH:MM
                if m.group(1):
                    hours, minutes, seconds = int(m.group(2)), int(m.group(3)), 0
                else:
                    hours, minutes, seconds = 0, int(m.group(2)), int(m.group(3))
            else:
                hours, minutes, seconds = int(m.group(2)), int(m.group(3)), int(m.group(4))
            return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)
        if value.strip().isdigit():
            return int(value.strip())
    raise ValueError("must be minutes (e.g. 2880) or a Slurm time like '2-00:00:00'")


_UNION_TAG = re.compile(
    r"(bool|int|float|str|none|list\[.*\]|dict\[.*\]|literal\[.*\]|function-.*|constrained-.*)"
)


def one_union_member(errors: list[Any]) -> list[Any]:
    """pydantic errors with each failed union reported once, without its member names in ``loc``.

    A value that fits no member of a union (``floor: {sd: 0.01}`` against ``NoiseFloor | float``)
    gets one error per member; only the member the value was meant for is said: the first whose
    error is not a wrong type, else the first.
    """
    out: list[Any] = []
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for e in errors:
        loc = tuple(e["loc"])
        at = next(
            (i for i, p in enumerate(loc) if isinstance(p, str) and _UNION_TAG.fullmatch(p)), None
        )
        if at is None:
            out.append(e)
        else:
            groups.setdefault(loc[:at], []).append(e)
    for prefix, errs in groups.items():
        meant = [e for e in errs if not str(e["type"]).endswith("_type")] or errs
        member = meant[0]["loc"][len(prefix)]
        for e in errs:
            if e["loc"][len(prefix)] == member:
                loc = [p for p in e["loc"] if not (isinstance(p, str) and _UNION_TAG.fullmatch(p))]
                out.append({**e, "loc": tuple(loc)})
    return out


def first_error(err: ValidationError, allowed: tuple[str, ...] = ()) -> str:
    """The first pydantic error as one line, ``runs[3].training.steps: <what is wrong>``.

    ``allowed`` names the valid keys of the top level, said when the error is an unknown one.
    """
    e = err.errors()[0]
    loc = ""
    for part in e["loc"]:
        if isinstance(part, str) and _UNION_TAG.fullmatch(part):
            continue  # pydantic's name of a union member (``bool``, ``literal['auto']``), not a field
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "missing":
        msg = "field required (missing)"
    elif e["type"] == "extra_forbidden":
        top = allowed and len(e["loc"]) == 1
        msg = "unknown key" + (f" (allowed: {', '.join(allowed)})" if top else "")
    return f"{loc}: {msg}" if loc else msg
