"""User-facing errors. The CLI turns these into one line each and exit code 2, never a traceback."""

from __future__ import annotations


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
