"""The spec's identity as plan.json records it (``spec_sha256``), in one place.

Why in the contract: `plan` writes it, `submit --set` checks that the plan it launches was made
from the same file with the same overrides, and the report's pre-registration check reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def spec_sha256(data: bytes, overrides: Sequence[str] = ()) -> str:
    """sha256 of the spec file's bytes, then ``\\n--set <override>`` for each ``--set`` override
    in order (no overrides: the file's own sha256, as before overrides existed)."""
    h = hashlib.sha256(data)
    for text in overrides:
        h.update(b"\n--set " + text.encode("utf-8"))
    return h.hexdigest()
