"""The `olmoablate` command line: parse arguments, call the library, render the result.

Start-up must stay fast (`validate` runs in users' CI and on login nodes), so a command line
imports only the module of the command it runs (:data:`COMMANDS`), and no command module pulls
in torch, pandas, matplotlib or olmo_core at import time.
Every `UserError` becomes one line on stderr and exit code 2 — never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer

from olmoablate import __version__
from olmoablate.errors import TRACEBACK_ENV, UserError, unexpected_error_line

#: Every command: the function that implements it, as ``module:attribute``. Only the command a
#: line invokes is imported (``olmoablate validate`` never loads launch, report or data code, and
#: Typer builds only its parameters); ``--help``, a mistyped command and shell completion get all.
COMMANDS: dict[str, str] = {
    "validate": "olmoablate.plan.validate:validate_command",
    "plan": "olmoablate.plan.validate:plan_command",
    "submit": "olmoablate.run.launch:submit_command",
    "status": "olmoablate.run.launch:status_command",
    "cancel": "olmoablate.run.launch:cancel_command",
    "report": "olmoablate.report.commands:report_command",
    "explain": "olmoablate.plan.explain:explain_command",
    "board": "olmoablate.report.board:board_command",
    "watch": "olmoablate.report.commands:watch_command",
    "blocks": "olmoablate.plan.blocks:blocks_command",
}
#: Command groups (a Typer app of sub-commands), the same way.
GROUPS: dict[str, str] = {"data": "olmoablate.data.prepare:data_app"}
#: Click's shell-completion variable for this program (set while a shell asks for completions).
COMPLETE_VAR = "_OLMOABLATE_COMPLETE"


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"olmoablate {__version__}")
        raise typer.Exit()


def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Matched baseline/variant ablations of OLMo 3 architectures."""


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI app with every command, or with the one named ``only`` (see :data:`COMMANDS`)."""
    app = typer.Typer(
        name="olmoablate",
        help=(
            "Matched baseline/variant ablations of OLMo 3 architectures.\n\n"
            "spec (YAML) -> validate -> plan -> submit (local or Slurm) -> status -> report "
            "(gate verdict)."
        ),
        no_args_is_help=True,
        # --install-completion / --show-completion: commands, options, spec paths and names, run ids
        add_completion=True,
        context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False,
        # Plain click help: Typer's rich help formatter costs ~0.1-0.2 s of imports on every
        # `--help`, and start-up time matters for a command users put in CI.
        rich_markup_mode=None,
    )
    app.callback()(_main)
    for name, target in COMMANDS.items():
        if only in (None, name):
            app.command(name)(_load(target))
    for name, target in GROUPS.items():
        if only in (None, name):
            app.add_typer(_load(target), name=name)
    return app


def invoked(argv: list[str]) -> str | None:
    """The command ``argv`` runs, when only that command is needed to run it; else None.

    The first word that is not an option names the command (the app's own options, ``--version``
    and the completion ones, take no value). None for ``--help`` alone, an unknown word (click's
    "No such command" lists the real ones) and while a shell asks for completions.
    """
    if COMPLETE_VAR in os.environ:
        return None
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS or word in GROUPS else None


def __getattr__(name: str) -> Any:
    """``olmoablate.cli.app``: the whole app (tests, completion scripts, documentation tools)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module 'olmoablate.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: run the app, turning UserError into a one-line error."""
    try:
        build_app(invoked(sys.argv[1:]))()
    except UserError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as err:  # no traceback on any path (errors.unexpected_error_line)
        if os.environ.get(TRACEBACK_ENV):
            raise
        line, code = unexpected_error_line(err)
        typer.echo(line, err=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
