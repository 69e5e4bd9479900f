"""Where results folders live by default: the one name of the default and of its environment
variable. Plain constants (no pydantic), so the CLI's command modules can name them at import
time without slowing `--help`; `olmoablate.contract.layout` re-exports them."""

from __future__ import annotations

from pathlib import Path

RESULTS_ROOT = Path("results")
#: Environment variable every command reads as its --results-root default.
RESULTS_ROOT_ENV = "OLMOABLATE_RESULTS_ROOT"
