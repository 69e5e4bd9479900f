"""`olmoablate submit|status|cancel` (placeholder until the launch module lands)."""

from olmoablate.errors import UserError


def submit_command(spec: str) -> None:
    """Submit the planned runs (not available yet)."""
    raise UserError("submit is not available yet")


def status_command(spec: str) -> None:
    """Show run states (not available yet)."""
    raise UserError("status is not available yet")


def cancel_command(spec: str) -> None:
    """Cancel runs (not available yet)."""
    raise UserError("cancel is not available yet")
