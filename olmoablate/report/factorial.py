"""The factorial gate (``rule: complementary``, docs/gate-statistics.md, "Factorial verdicts"):
do two changes A and B add up when combined (AB)?

Each seed trains the baseline and the three arms A, B, AB, and every arm is paired on that seed's
baseline run, so the three improvements of a seed share the baseline's noise: they are
correlated. The estimate therefore works per seed: with ``d_X = baseline - X`` (``direction:
lower``; ``X - baseline`` for higher) it forms the seed's contrasts

* interaction ``I = d_AB - d_A - d_B`` (0: the gains add; > 0: super-additive),
* margins ``M_A = d_AB - d_A`` and ``M_B = d_AB - d_B`` (AB over each single arm),

and puts a paired-seed t bound (n - 1 dof, one-sided at ``confidence``) on each contrast's mean.
Three independent per-arm intervals combined as if independent would mis-state the width
(docs: the coverage table). Each run's value is the quality gate's own per-run reduction
(:func:`.ladder.run_value`: the metric over the last ``last_n`` eval points).

The verdict, pre-registered, each claim a one-sided test at alpha = 1 - confidence:

* ``complementary``: ``I > -tolerance`` and ``M_A > 0`` and ``M_B > 0`` -- an intersection-union
  test (all three bounds must clear), level alpha with no adjustment. The primary claim.
* otherwise the two secondary claims, Holm across the two at alpha:
  ``redundant``: AB is within ``tolerance`` of the better single arm -- ``M_A > -tolerance`` and
  ``M_B > -tolerance`` (not worse than either: IUT) and ``M_A < tolerance`` or ``M_B <
  tolerance`` (not better than the better one: a union, Bonferroni alpha/2 each);
  ``interfering``: ``I < 0`` (the gains clearly fail to add);
  redundant wins when both are rejected (it says more: the combination adds nothing).
* else ``inconclusive``.

The report's verdict word: complementary -> proceed (the combination earns both changes),
redundant and interfering -> stop (the combination is not worth the two changes as a pair; the
card says which single arm to look at), inconclusive -> inconclusive. The factorial word is kept
in the check's name and the card's line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from olmoablate.plan.names import INCONCLUSIVE, PROCEED, STOP
from olmoablate.report.compare import PairResult
from olmoablate.report.ladder import run_value
from olmoablate.report.verdict import QualityCheck, VariantVerdict, combine, stability_stops
from olmoablate.stats import holm, p_above, t_ppf

#: The gate rule this module decides, and its verdict words.
COMPLEMENTARY = "complementary"
REDUNDANT, INTERFERING = "redundant", "interfering"
#: The factorial word -> (the report's verdict word, the check's outcome).
_VERDICT = {
    COMPLEMENTARY: (PROCEED, "pass"),
    REDUNDANT: (STOP, STOP),
    INTERFERING: (STOP, STOP),
    INCONCLUSIVE: (INCONCLUSIVE, INCONCLUSIVE),
}


@dataclass
class Contrast:
    """A per-seed contrast's mean with its paired-seed one-sided bounds at ``confidence``."""

    name: str
    per_seed: list[float]
    mean: float
    se: float
    dof: float
    lower: float
    upper: float

    def p_above(self, bar: float) -> float:
        """One-sided p of H0: contrast <= bar."""
        return p_above(self.mean, self.se, bar, self.dof)

    def p_below(self, bar: float) -> float:
        """One-sided p of H0: contrast >= bar."""
        return p_above(-self.mean, self.se, -bar, self.dof)


def contrast(name: str, values: Sequence[float], confidence: float) -> Contrast:
    """Mean of ``values`` (one per seed) and its t bounds with n - 1 dof, each one-sided at
    ``confidence`` (so [lower, upper] is a two-sided 2 * confidence - 1 interval)."""
    v = np.asarray(values, dtype=float)
    n = v.size
    mean = float(v.mean()) if n else math.nan
    if n < 2:
        return Contrast(name, v.tolist(), mean, math.inf, 0.0, -math.inf, math.inf)
    se = float(v.std(ddof=1) / math.sqrt(n))
    q = t_ppf(confidence, n - 1)
    return Contrast(name, v.tolist(), mean, se, float(n - 1), mean - q * se, mean + q * se)


@dataclass
class FactorialResult:
    """The factorial estimate and its verdict. ``claims``: each claim's p-value (IUT: the
    largest of its parts); ``holm``: the secondary claims' Holm-adjusted p-values."""

    seeds: list[int]
    improvements: dict[str, list[float]]
    interaction: Contrast
    margin_a: Contrast
    margin_b: Contrast
    confidence: float
    tolerance: float
    claims: dict[str, float]
    holm: dict[str, float]
    verdict: str
    line: str
    arms: dict[str, str] = field(default_factory=dict)  # role (A, B, AB) -> variant name

    @property
    def decision(self) -> str:
        return _VERDICT[self.verdict][0]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["decision"] = self.decision
        return _json(out)


def _json(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _pmax(*ps: float) -> float:
    return max(min(1.0, p) for p in ps)


def factorial_estimate(
    d_a: Sequence[float],
    d_b: Sequence[float],
    d_ab: Sequence[float],
    *,
    confidence: float,
    tolerance: float,
    seeds: Sequence[int] | None = None,
    arms: dict[str, str] | None = None,
) -> FactorialResult:
    """Decide a factorial from per-seed improvements over the seed's shared baseline (same seed
    order in all three). Pure: numbers in, a result out (the module docstring has the rule)."""
    a, b, ab = (np.asarray(x, dtype=float) for x in (d_a, d_b, d_ab))
    if not a.size == b.size == ab.size:
        raise ValueError(f"one improvement per seed in each arm: got {a.size}, {b.size}, {ab.size}")
    inter = contrast("interaction", ab - a - b, confidence)
    m_a = contrast("margin over A", ab - a, confidence)
    m_b = contrast("margin over B", ab - b, confidence)
    alpha, tol = 1.0 - confidence, float(tolerance)
    claims = {
        COMPLEMENTARY: _pmax(inter.p_above(-tol), m_a.p_above(0.0), m_b.p_above(0.0)),
        REDUNDANT: _pmax(
            m_a.p_above(-tol), m_b.p_above(-tol), 2.0 * min(m_a.p_below(tol), m_b.p_below(tol))
        ),
        INTERFERING: _pmax(inter.p_below(0.0)),
    }
    rejected, adjusted = holm([claims[REDUNDANT], claims[INTERFERING]], alpha)
    held = {REDUNDANT: adjusted[0], INTERFERING: adjusted[1]}
    n = a.size
    if n < 2:
        verdict = INCONCLUSIVE
    elif claims[COMPLEMENTARY] < alpha:
        verdict = COMPLEMENTARY
    elif rejected[0]:
        verdict = REDUNDANT
    elif rejected[1]:
        verdict = INTERFERING
    else:
        verdict = INCONCLUSIVE
    conf = f"{confidence:.0%}"
    line = (
        f"factorial: {verdict} over {n} seed(s): interaction {inter.mean:+.4g} "
        f"[{_f(inter.lower)}, {_f(inter.upper)}], AB over A {m_a.mean:+.4g} [{_f(m_a.lower)}, "
        f"{_f(m_a.upper)}], AB over B {m_b.mean:+.4g} [{_f(m_b.lower)}, {_f(m_b.upper)}] "
        f"(paired-seed t bounds, each one-sided {conf}; tolerance {tol:g}; claim p: "
        f"complementary {claims[COMPLEMENTARY]:.3g} (IUT), redundant {held[REDUNDANT]:.3g}, "
        f"interfering {held[INTERFERING]:.3g} (Holm))"
    )
    if n < 2:
        line += "; fewer than 2 complete seeds: no paired-seed interval"
    return FactorialResult(
        list(seeds) if seeds is not None else list(range(n)),
        {"A": a.tolist(), "B": b.tolist(), "AB": ab.tolist()}, inter, m_a, m_b,
        float(confidence), tol, claims, held, verdict, line, dict(arms or {}),
    )  # fmt: skip


def _f(x: float) -> str:
    return f"{x:+.4g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def naive_interaction(
    d_a: Sequence[float], d_b: Sequence[float], d_ab: Sequence[float], confidence: float
) -> tuple[float, float]:
    """What the factorial does NOT do (kept for the coverage table): the interaction's bounds
    from three per-arm intervals taken as independent, se = sqrt(se_A^2 + se_B^2 + se_AB^2),
    t with n - 1 dof. Wrong under a shared baseline: the arms' improvements are correlated."""
    arms = [contrast(k, x, confidence) for k, x in (("A", d_a), ("B", d_b), ("AB", d_ab))]
    est = arms[2].mean - arms[0].mean - arms[1].mean
    se = math.sqrt(sum(c.se**2 for c in arms))
    q = t_ppf(confidence, arms[0].dof) if arms[0].dof > 0 else math.inf
    return est - q * se, est + q * se


@dataclass
class FactorialReading:
    """Per seed, the three arms' improvements on the seed's shared baseline run."""

    seeds: list[int] = field(default_factory=list)
    d: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": [], "AB": []})
    used: list[PairResult] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    invalid: dict[str, list[str]] = field(default_factory=dict)


def read_factorial(pairs: Sequence[PairResult], gate: Any, stage: str) -> FactorialReading:
    """The per-seed improvements of ``gate.of`` and ``gate.combined`` at ``stage``: a seed enters
    only with all three arms complete, valid and paired on one baseline run."""
    roles = {"A": gate.of[0], "B": gate.of[1], "AB": gate.combined}
    sign = 1.0 if gate.direction == "lower" else -1.0
    out = FactorialReading()
    mine = [p for p in pairs if p.size == stage and p.variant_name in roles.values()]
    for seed in sorted({p.seed for p in mine}):
        by_role: dict[str, PairResult] = {}
        why: list[str] = []
        for role, name in roles.items():
            p = next((x for x in mine if x.seed == seed and x.variant_name == name), None)
            if p is None:
                why.append(f"no pair of {name!r}")
            elif not p.valid:
                out.invalid[p.pair_id] = list(p.invalid_reasons)
                why.append(f"pair {p.pair_id} INVALID ({'; '.join(p.invalid_reasons)})")
            elif not p.complete:
                out.unfinished.append(f"pair {p.pair_id}: not complete ({p.incomplete_reason})")
                why.append(f"pair {p.pair_id} not complete")
            else:
                by_role[role] = p
        if not why and len({p.baseline.run_id for p in by_role.values()}) != 1:
            why.append("the three arms are not paired on one baseline run")
        vals: dict[str, float] = {}
        if not why:
            vb = run_value(by_role["A"], "baseline", gate.metric, gate.last_n)
            for role, p in by_role.items():
                vv = run_value(p, "variant", gate.metric, gate.last_n)
                if vb is None or vv is None:
                    why.append(f"pair {p.pair_id}: no points of {gate.metric}")
                else:
                    vals[role] = sign * (vb - vv)
        if why:
            out.left_out.append(f"seed {seed} left out of the factorial: {'; '.join(why)}")
            continue
        out.seeds.append(seed)
        for role in ("A", "B", "AB"):
            out.d[role].append(vals[role])
        out.used.extend(by_role.values())
    return out


@dataclass
class FactorialOutcome:
    verdict: str
    reasons: list[str]
    verdicts: list[VariantVerdict]
    result: FactorialResult | None


def evaluate_factorial_gate(gate: Any, pairs: Sequence[PairResult], stage: str) -> FactorialOutcome:
    """Decide a ``rule: complementary`` gate at ``stage``: one verdict, on ``gate.combined``."""
    reading = read_factorial(pairs, gate, stage)
    roles = {"A": gate.of[0], "B": gate.of[1], "AB": gate.combined}
    res = factorial_estimate(
        reading.d["A"], reading.d["B"], reading.d["AB"], confidence=gate.confidence,
        tolerance=gate.tolerance, seeds=reading.seeds, arms=roles,
    )  # fmt: skip
    stops: list[str] = []
    blockers: list[str] = []
    for p in reading.used:
        st = p.stability
        if p.variant_name == gate.combined and "variant" in st:
            stops.extend(
                f"pair {p.pair_id}: {r}"
                for r in stability_stops(st["variant"].health, gate, "variant")
            )
        if "baseline" in st and (base := stability_stops(st["baseline"].health, gate, "baseline")):
            blockers.append(
                f"pair {p.pair_id}: baseline unstable ({'; '.join(base)}); comparison unreliable"
            )
    if reading.unfinished:
        blockers.append(
            f"{len(reading.unfinished)} pair(s) of the factorial not finished; the verdict waits "
            f"for every planned seed: {'; '.join(reading.unfinished)}"
        )
    outcome = _VERDICT[res.verdict][1]
    check = QualityCheck(f"factorial ({res.verdict})", outcome, res.line, None)
    preamble = [
        f"pair {pid} INVALID, excluded: {'; '.join(r)}" for pid, r in reading.invalid.items()
    ]
    v = VariantVerdict(
        gate.combined, combine(stops, blockers, [check]), [*preamble, *stops, *blockers, res.line],
        [check], [p.pair_id for p in reading.used], list(reading.invalid),
        notes=list(reading.left_out), preamble=preamble, stops=stops, blockers=blockers,
    )  # fmt: skip
    return FactorialOutcome(v.verdict, [f"[{gate.combined}] {r}" for r in v.reasons], [v], res)
