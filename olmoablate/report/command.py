"""`olmoablate report` (placeholder until the report module lands)."""

from olmoablate.errors import UserError


def report_command(spec: str) -> None:
    """Build the comparison report (not available yet)."""
    raise UserError("report is not available yet")
