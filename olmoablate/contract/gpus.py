"""GPU memory by model name: what `validate`/`plan` compare a run's per-device estimate with.

Why a table: a login node has no GPU to ask, and a cluster names its GPUs in Slurm constraints
(``h100``, ``a100-80gb``). The spec may state the memory itself (``topology.gpu_memory_gb``);
otherwise it comes from ``slurm.constraint``, then ``topology.gpu_type``. A bare ``a100`` is
taken as the 40 GB part (the smaller, so a plan that fits there fits both).
"""

from __future__ import annotations

import re

#: Usable memory per device in GB (the vendor's HBM size; lowercase names as in constraints).
GPU_MEMORY_GB: dict[str, float] = {
    "h100": 80,
    "h100-80gb": 80,
    "h100nvl": 94,
    "h800": 80,
    "h200": 141,
    "gh200": 96,
    "b200": 180,
    "gb200": 186,
    "a100": 40,
    "a100-40gb": 40,
    "a100-80gb": 80,
    "a800": 80,
    "l40s": 48,
    "l40": 48,
    "a40": 48,
    "a6000": 48,
    "a10": 24,
    "a10g": 24,
    "l4": 24,
    "v100": 16,
    "v100-32gb": 32,
    "mi250x": 128,
    "mi300x": 192,
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def gpu_memory_gb(
    explicit: float | None, constraint: str | None, gpu_type: str | None
) -> tuple[float | None, str]:
    """(GB per device, where it came from) — (None, why) when nothing names a known GPU."""
    if explicit is not None:
        return explicit, "topology.gpu_memory_gb"
    for token in re.split(r"[&|,()\[\]*\s]+", constraint or ""):
        if _key(token) in GPU_MEMORY_GB:
            return GPU_MEMORY_GB[_key(token)], f"slurm.constraint {token}"
    if gpu_type and _key(gpu_type) in GPU_MEMORY_GB:
        return GPU_MEMORY_GB[_key(gpu_type)], f"topology.gpu_type {gpu_type}"
    return None, (
        f"no known GPU in slurm.constraint {constraint!r} or topology.gpu_type {gpu_type!r} "
        "(set topology.gpu_memory_gb)"
    )
