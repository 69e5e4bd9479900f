"""User-facing errors. The CLI turns these into one line each and exit code 2, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix. ``str(err)`` is the complete, one-line message."""

    exit_code = 2
