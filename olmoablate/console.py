"""Tables and progress lines that stay whole in a terminal, a Slurm log, CI or ``| tee``.

Why: rich sizes a table to the console, and a console that is not a terminal is 80 columns wide,
so cells were cut (``to…``, ``lo…``) exactly where results are read later (job logs, CI). Every
table of the CLI is printed through :func:`print_whole`, which widens the output to what the
table needs instead of cutting cells. rich is imported inside the functions: ``plan`` and
``status`` import this module on a login node.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

#: Widest output a table may ask for (a safety cap, far beyond any real table of ours).
MAX_WIDTH = 100_000


def make_console(stderr: bool = False, file: IO[str] | None = None) -> Any:
    """A rich Console for our output (``file``: tests; else stdout/stderr). Text lines are not
    wrapped (a log viewer wraps them; a wrapped line breaks grep), tables go through
    :func:`print_whole`."""
    from rich.console import Console

    return Console(file=file, stderr=stderr, highlight=False, soft_wrap=True)


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default stdout) is an interactive terminal (``TERM=dumb`` is not)."""
    stream = sys.stdout if stream is None else stream
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return tty and os.environ.get("TERM", "") != "dumb"


def needed_width(console: Any, renderable: Any) -> int:
    """Columns ``renderable`` needs to show every cell whole (its maximum rich measurement)."""
    from rich.measure import Measurement

    options = console.options.update(max_width=MAX_WIDTH)
    return int(Measurement.get(console, options, renderable).maximum)


def print_whole(console: Any, renderable: Any) -> None:
    """Print a table (or any renderable) at least as wide as it needs, so no cell is cut.

    In a narrow terminal the lines are then wider than the screen (the terminal wraps them),
    which keeps every value readable; cutting a run id or a loss is never acceptable.
    """
    before = int(console.width)
    width = max(before, needed_width(console, renderable))
    console.width = width  # Console.print(width=...) can only narrow, never widen
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = before
