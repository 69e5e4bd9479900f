"""The `olmoablate` command line: parse arguments, call the library, render the result.

Start-up must stay fast (`validate` runs in users' CI and on login nodes), so nothing here or in
the command modules it imports pulls in torch, pandas, matplotlib or olmo_core at import time.
Every `UserError` becomes one line on stderr and exit code 2 — never a traceback.
"""

from __future__ import annotations

import sys

import typer

from olmoablate.data.command import data_app
from olmoablate.errors import UserError
from olmoablate.launch.command import cancel_command, status_command, submit_command
from olmoablate.report.command import report_command
from olmoablate.spec.blocks_command import blocks_command
from olmoablate.spec.command import plan_command, validate_command

app = typer.Typer(
    name="olmoablate",
    help=(
        "Matched baseline/variant ablations of OLMo 3 architectures.\n\n"
        "spec (YAML) -> validate -> plan -> submit (local or Slurm) -> status -> report (gate verdict)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: Typer's rich help formatter costs ~0.1-0.2 s of imports on every
    # `--help`, and start-up time matters for a command users put in CI.
    rich_markup_mode=None,
)

app.command("validate")(validate_command)
app.command("plan")(plan_command)
app.command("submit")(submit_command)
app.command("status")(status_command)
app.command("cancel")(cancel_command)
app.command("report")(report_command)
app.command("blocks")(blocks_command)
app.add_typer(data_app, name="data")


def main() -> None:
    """Console-script entry point: run the app, turning UserError into a one-line error."""
    try:
        app()
    except UserError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
