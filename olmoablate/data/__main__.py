"""`python -m olmoablate.data prepare|check` — the same `data_app` that cli.py mounts as `data`.

Why a second entry point: the setup script must work on a fresh checkout even while an unrelated
command module fails to import, and it only needs this sub-app. Errors behave like the main CLI:
a UserError becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import typer

from olmoablate.data.prepare import data_app
from olmoablate.errors import UserError


def main() -> None:
    try:
        data_app(prog_name="olmoablate data")
    except UserError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
