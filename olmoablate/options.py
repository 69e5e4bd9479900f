"""Command-line options every command shares, defined once (the results root and its aliases).

A layer of its own just above the contract (it names the contract's results-root constants);
typer only: the command modules name these at import time, so nothing here may load
pydantic or the contract's models (``--help`` start-up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from olmoablate.contract.roots import RESULTS_ROOT, RESULTS_ROOT_ENV

#: ``--results-root DIR`` (alias ``--store``; default ``$OLMOABLATE_RESULTS_ROOT`` or results).
RootOpt = Annotated[
    Path,
    typer.Option(
        "--results-root",
        "--store",
        metavar="DIR",
        envvar=RESULTS_ROOT_ENV,
        help="The store: the folder that holds one results folder per spec (for a SPEC given "
        "by name).",
    ),
]

__all__ = ["RESULTS_ROOT", "RootOpt"]
