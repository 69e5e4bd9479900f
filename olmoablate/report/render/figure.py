"""Matplotlib (Agg) set-up and the PNG writer shared by the report's figures."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from olmoablate.io import write_bytes_atomic


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path, dpi: int = 72) -> Path:
    import io

    buf = io.BytesIO()
    # zlib level 1: a few % larger PNGs, several times less encoding time
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    pyplot().close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


@functools.cache
def _drawing_code(module_file: str) -> bytes:
    import matplotlib

    return (
        Path(module_file).read_bytes()
        + Path(__file__).read_bytes()  # the PNG writer's settings
        + matplotlib.__version__.encode()
    )


def figure_hash(module_file: str) -> Any:
    """A sha256 already fed with what draws a figure: the drawing module's source, this module's
    and the matplotlib version. The plot cache's keys add the figure's data to it; equal keys
    mean byte-identical figures."""
    return hashlib.sha256(_drawing_code(module_file))
