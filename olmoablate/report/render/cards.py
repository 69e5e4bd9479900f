"""One verdict card per proposal (gate): what a reader needs first, built once for every renderer.

Why a card: a reader opens the report to learn, per proposal, whether it goes to the next size
and why. The card says that in four things (the verdict, the effect with its interval, the
deciding reason in one sentence, the paired-delta plot); the full reasons, statistics and the
per-variant table follow in the gate's details. The cards are plain data (no markup): the
markdown, HTML and terminal templates format them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmoablate.report.build import Report
from olmoablate.report.gate.verdict import VariantVerdict
from olmoablate.report.render.gate_text import estimate_cells, gate_text, statistics_lines

#: The per-variant table of a gate's details.
VERDICT_HEADER = [
    "variant",
    "role",
    "verdict",
    "improvement",
    "lower bound",
    "upper bound",
    "seeds",
    "invalid pairs",
    "noise",
    "checks",
]


@dataclass(frozen=True)
class Card:
    """One gate's verdict at a glance, and its details."""

    name: str
    variant: str
    rule: str
    metric: str
    stage: str
    verdict: str
    effect: float | None
    lower: float | None
    upper: float | None
    seeds: int
    confidence: float
    #: the deciding reason, one sentence
    reason: str
    #: the paired-delta plot (``plots/gate__<name>.png``), when drawn
    plot: Path | None
    #: details: the gate's settings in words, every reason, the statistics, the variant table
    description: str
    reasons: list[str]
    statistics: list[str]
    table: tuple[list[str], list[list[Any]]]

    @property
    def title(self) -> str:
        """The card's heading: the gate's name (``Gate`` for the unnamed gate of a ``gate:``)."""
        return "Gate" if self.name == "gate" else self.name

    @property
    def details_title(self) -> str:
        return "Gate" if self.name == "gate" else f"Gate {self.name}"

    @property
    def effect_text(self) -> str:
        """``+0.21, one-sided 95% interval [+0.12, +0.30], 2 seeds`` (or why there is none)."""
        if self.effect is None:
            return "no estimate (no valid pair with the gate metric)"
        lo = "-inf" if self.lower is None else f"{self.lower:+.4g}"
        hi = "+inf" if self.upper is None else f"{self.upper:+.4g}"
        return (
            f"{self.effect:+.4g}, one-sided {self.confidence:.0%} interval [{lo}, {hi}], "
            f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        )

    @property
    def comparison(self) -> str:
        """``sn_da vs baseline at 1B, rule quality, metric eval/lm/x/CE loss``."""
        return f"{self.variant} vs baseline at {self.stage}, rule {self.rule}, metric {self.metric}"


def headline_variant(r: Report) -> VariantVerdict | None:
    """The verdict that decides the gate: its ``gate.variant``, else the first gated one."""
    g = r.results.gate
    return next(
        (x for x in r.variant_verdicts if x.variant == g.variant),
        r.variant_verdicts[0] if r.variant_verdicts else None,
    )


_BOUNDS = re.compile(r"\s*\((?:one-sided|two-sided)[^()]*(?:\([^()]*\)[^()]*)*\)")


def one_sentence(reason: str) -> str:
    """A reason without its bounds in parentheses (the card shows them) and cut at its first
    clause: ``vs baseline: improvement +0.21 > min_effect 0.01.``"""
    text = _BOUNDS.sub("", reason).split("; ")[0].strip()
    text = re.sub(r"^\[[^\]]+\]\s*", "", text)  # the verdict's own [variant] tag
    return text if not text or text.endswith(".") else text + "."


def deciding_reason(r: Report, v: VariantVerdict | None) -> str:
    """What decided: a broken pre-registration, else the variant's first stop, blocker or the
    first quality check that did not pass (its first check when all passed)."""
    if r.results.prereg_broken or v is None:
        return one_sentence(r.reasons[0]) if r.reasons else "no reason recorded."
    if v.stops:
        return one_sentence(v.stops[0])
    if v.blockers:
        return one_sentence(v.blockers[0])
    failing = [c for c in v.checks if c.outcome != "pass"]
    chk = (failing or v.checks or [None])[0]
    if chk is not None:
        return one_sentence(chk.reason)
    return one_sentence(v.reasons[0]) if v.reasons else "no reason recorded."


def verdict_rows(report: Report) -> list[list[Any]]:
    rows = []
    for v in report.variant_verdicts:
        est = v.checks[0].estimate if v.checks else None
        rows.append(
            [
                v.variant,
                v.role,
                v.verdict.upper(),
                *estimate_cells(est),
                len(v.excluded_pairs),
                est.source if est else "—",
                "; ".join(c.outcome for c in v.checks) or "—",
            ]
        )
    return rows


def card_plot_name(gate_name: str) -> str:
    return "gate__" + "".join(c if c.isalnum() or c in "-_." else "_" for c in gate_name) + ".png"


def cards(report: Report, plots: list[Path] | tuple[Path, ...] = ()) -> list[Card]:
    """One card per gate (``report.gates``; the report itself for a one-gate spec)."""
    by_name = {p.name: p for p in plots}
    out = []
    for r in report.gates or [report]:
        g = r.results.gate
        v = headline_variant(r)
        est = v.checks[0].estimate if v is not None and v.checks else None
        effect, lower, upper, seeds = estimate_cells(est)
        out.append(
            Card(
                name=r.gate_name,
                variant=v.variant if v is not None else (g.variant or "(none)"),
                rule=g.rule,
                metric=g.metric,
                stage=r.stage,
                verdict=r.verdict,
                effect=effect,
                lower=lower,
                upper=upper,
                seeds=seeds,
                confidence=g.confidence,
                reason=deciding_reason(r, v),
                plot=by_name.get(card_plot_name(r.gate_name)),
                description=gate_text(r),
                reasons=list(r.reasons),
                statistics=statistics_lines(r),
                table=(VERDICT_HEADER, verdict_rows(r)),
            )
        )
    return out
