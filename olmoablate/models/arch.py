"""Parse and validate the spec's architecture mapping (``arch``) into typed settings.

Why a separate, torch-free module: the model builder, the analytic accounting and the spec
validator all need the same reading of ``arch`` (defaults, allowed keys, rejected combinations).
Keeping it free of torch lets `validate`/`plan` use it on a login node. Every problem is a
one-line :class:`~olmoablate.errors.UserError` naming the field and the allowed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from olmoablate.errors import UserError

#: OLMo 3 attention cycle (3 SWA layers + 1 full); a looped body must be whole cycles.
ATTENTION_CYCLE = 4

ARCH_KEYS = ("siamese_norm", "depth_attention", "looped", "layers")
_SIAMESE_KEYS = ("output_norms",)
_DEPTH_KEYS = ("stride", "recent_window")
_LOOPED_KEYS = (
    "body_layers",
    "loops",
    "tail",
    "input_injection",
    "state_norm",
    "curriculum",
)
_CURRICULUM_KEYS = ("start", "increment", "interval_steps")
_LAYERS_KEYS = ("n_layers",)


@dataclass(frozen=True)
class SiameseNormSettings:
    """``siamese_norm``: keep OLMo 3's output norms inside the sublayer update Δ or not."""

    output_norms: bool = False


@dataclass(frozen=True)
class DepthAttentionSettings:
    """``depth_attention``: sources are absolute layers ``j % stride == 0`` plus a recent window."""

    stride: int = 8
    recent_window: int = 0

    def sources(self, layer: int) -> list[int]:
        """S_l: earlier (unrolled) layers whose (key, mixed value) layer ``layer`` may mix in."""
        chosen = {j for j in range(layer) if j % self.stride == 0}
        chosen.update(range(max(0, layer - self.recent_window), layer))
        return sorted(chosen)


@dataclass(frozen=True)
class CurriculumSettings:
    """Loop-count curriculum: ``b(step) = min(loops, start + increment * (step // interval))``."""

    start: int
    increment: int
    interval_steps: int


@dataclass(frozen=True)
class LoopedSettings:
    """``looped``: K body blocks applied ``loops`` times, loss on the last ``tail`` outputs."""

    body_layers: int
    loops: int
    tail: int = 1
    input_injection: bool = True
    state_norm: bool = False
    curriculum: CurriculumSettings | None = None

    def loops_at_step(self, step: int) -> int:
        """The loop count b used for training step ``step`` (the curriculum, else ``loops``)."""
        if self.curriculum is None:
            return self.loops
        c = self.curriculum
        return max(1, min(self.loops, c.start + c.increment * (step // c.interval_steps)))


@dataclass(frozen=True)
class ArchSettings:
    """The whole ``arch`` mapping; every field None = the OLMo 3 baseline."""

    siamese_norm: SiameseNormSettings | None = None
    depth_attention: DepthAttentionSettings | None = None
    looped: LoopedSettings | None = None
    n_layers: int | None = None

    @property
    def is_baseline(self) -> bool:
        return (
            self.siamese_norm is None
            and self.depth_attention is None
            and self.looped is None
            and self.n_layers is None
        )


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if value is None or value is True:
        return {}
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: expected a mapping with keys {', '.join(keys)}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(keys)}")
    return dict(value)


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise UserError(f"{where}: must be >= {minimum}, got {value}")
    return int(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: expected true or false, got {value!r}")
    return value


def parse_arch(arch: Mapping[str, Any] | ArchSettings | None, where: str = "arch") -> ArchSettings:
    """Validate ``arch`` and fill in defaults; raises UserError with the offending field."""
    if isinstance(arch, ArchSettings):
        return arch
    top = _mapping(arch, where, ARCH_KEYS)

    siamese = None
    if "siamese_norm" in top:
        d = _mapping(top["siamese_norm"], f"{where}.siamese_norm", _SIAMESE_KEYS)
        siamese = SiameseNormSettings(
            output_norms=_bool(d.get("output_norms", False), f"{where}.siamese_norm.output_norms")
        )

    depth = None
    if "depth_attention" in top:
        d = _mapping(top["depth_attention"], f"{where}.depth_attention", _DEPTH_KEYS)
        depth = DepthAttentionSettings(
            stride=_int(d.get("stride", 8), f"{where}.depth_attention.stride", 1),
            recent_window=_int(
                d.get("recent_window", 0), f"{where}.depth_attention.recent_window", 0
            ),
        )

    looped = None
    if "looped" in top:
        w = f"{where}.looped"
        d = _mapping(top["looped"], w, _LOOPED_KEYS)
        for key in ("body_layers", "loops"):
            if key not in d:
                raise UserError(f"{w}.{key}: required")
        body = _int(d["body_layers"], f"{w}.body_layers", ATTENTION_CYCLE)
        if body % ATTENTION_CYCLE:
            raise UserError(
                f"{w}.body_layers: must be a multiple of {ATTENTION_CYCLE} (the OLMo 3 "
                f"[SWA, SWA, SWA, Full] cycle), got {body}"
            )
        loops = _int(d["loops"], f"{w}.loops", 1)
        tail = _int(d.get("tail", 1), f"{w}.tail", 1)
        if tail > loops:
            raise UserError(f"{w}.tail: must be <= loops ({loops}), got {tail}")
        curriculum = None
        if d.get("curriculum") is not None:
            c = _mapping(d["curriculum"], f"{w}.curriculum", _CURRICULUM_KEYS)
            for key in _CURRICULUM_KEYS:
                if key not in c:
                    raise UserError(f"{w}.curriculum.{key}: required")
            curriculum = CurriculumSettings(
                start=_int(c["start"], f"{w}.curriculum.start", 1),
                increment=_int(c["increment"], f"{w}.curriculum.increment", 0),
                interval_steps=_int(c["interval_steps"], f"{w}.curriculum.interval_steps", 1),
            )
        looped = LoopedSettings(
            body_layers=body,
            loops=loops,
            tail=tail,
            input_injection=_bool(d.get("input_injection", True), f"{w}.input_injection"),
            state_norm=_bool(d.get("state_norm", False), f"{w}.state_norm"),
            curriculum=curriculum,
        )

    n_layers = None
    if "layers" in top:
        d = _mapping(top["layers"], f"{where}.layers", _LAYERS_KEYS)
        if "n_layers" not in d:
            raise UserError(f"{where}.layers.n_layers: required")
        n_layers = _int(d["n_layers"], f"{where}.layers.n_layers", 1)

    if looped is not None and siamese is not None:
        raise UserError(f"{where}: 'looped' cannot be combined with 'siamese_norm'")
    if looped is not None and n_layers is not None:
        raise UserError(f"{where}: 'looped' cannot be combined with 'layers'")

    return ArchSettings(
        siamese_norm=siamese, depth_attention=depth, looped=looped, n_layers=n_layers
    )
