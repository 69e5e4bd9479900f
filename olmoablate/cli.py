"""The `olmoablate` command line: parse arguments, call the library, render the result.

Start-up must stay fast (`validate` runs in users' CI and on login nodes), so nothing here or in
the command modules it imports pulls in torch, pandas, matplotlib or olmo_core at import time.
Every `UserError` becomes one line on stderr and exit code 2 — never a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from olmoablate.data.command import data_app
from olmoablate.errors import TRACEBACK_ENV, UserError, unexpected_error_line
from olmoablate.launch.command import cancel_command, status_command, submit_command
from olmoablate.report.command import report_command
from olmoablate.report.render.board_render import board_command
from olmoablate.spec.blocks_command import blocks_command
from olmoablate.spec.command import plan_command, validate_command
from olmoablate.spec.explain import explain_command
from olmoablate.watch import watch_command

app = typer.Typer(
    name="olmoablate",
    help=(
        "Matched baseline/variant ablations of OLMo 3 architectures.\n\n"
        "spec (YAML) -> validate -> plan -> submit (local or Slurm) -> status -> report (gate verdict)."
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

def _version(value: bool) -> None:
    if value:
        from olmoablate import __version__

        typer.echo(f"olmoablate {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Matched baseline/variant ablations of OLMo 3 architectures."""


app.command("validate")(validate_command)
app.command("plan")(plan_command)
app.command("submit")(submit_command)
app.command("status")(status_command)
app.command("cancel")(cancel_command)
app.command("report")(report_command)
app.command("explain")(explain_command)
app.command("board")(board_command)
app.command("watch")(watch_command)
app.command("blocks")(blocks_command)
app.add_typer(data_app, name="data")


def main() -> None:
    """Console-script entry point: run the app, turning UserError into a one-line error."""
    try:
        app()
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
