"""Report lines: how much of each held-out set every arm scored, and its CE beside the unigram floor.

Why: a held-out CE means little without (a) how many tokens it averages (the old eval scored 2.8%
of the demo's held-out tokens, all document openings) and (b) the held-out unigram entropy of the
vocabulary, the CE of a model that learned only token frequencies. The plan records both facts
per set (`plan.json` ``eval_sets``, measured from the token files at plan time); the runs record
``eval/lm/<set>/tokens`` at every eval point (`olmoablate.train.eval_data`). Arms whose eval
points scored different token counts are flagged: their CEs average different text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from olmoablate.contract import metrics as names
from olmoablate.report.read.collect import Results


@dataclass
class ArmCoverage:
    """One (size, arm, set): final CE per seed and the token counts its eval points scored."""

    size: str
    arm: str
    eval_set: str
    final_ce: list[float] = field(default_factory=list)
    tokens_per_point: set[int] = field(default_factory=set)
    points: int = 0
    missing_tokens: bool = False  # a run without the tokens metric (older olmoablate)


def coverage(results: Results) -> list[ArmCoverage]:
    """Per (size, arm, set), from every run with metrics, in plan order."""
    out: dict[tuple[str, str, str], ArmCoverage] = {}
    for rd in results.runs.values():
        if rd.metrics is None:
            continue
        size, arm = rd.entry.size, rd.entry.arm
        for name in rd.entry.evaluation.lm_sets:
            cov = out.setdefault((size, arm, name), ArmCoverage(size, arm, name))
            ce = rd.column(names.lm_eval(name, "CE loss"))
            if ce is None:
                continue
            ok = np.isfinite(ce)
            if not ok.any():
                continue
            cov.final_ce.append(float(ce[ok][-1]))
            cov.points += int(ok.sum())
            tok = rd.column(names.lm_eval(name, "tokens"))
            if tok is None or not np.isfinite(tok[ok]).all():
                cov.missing_tokens = True
            else:
                cov.tokens_per_point |= {int(t) for t in tok[ok]}
    return list(out.values())


def coverage_lines(results: Results) -> list[str]:
    """Human lines for the terminal and the markdown report (warnings start with WARNING)."""
    facts = results.plan.eval_sets
    lines: list[str] = []
    warnings: list[str] = []
    rows = coverage(results)
    for cov in rows:
        # measured at plan time; a plan from before eval_sets existed has none
        sets = facts[cov.size] if cov.size in facts else {}
        fact = sets[cov.eval_set] if cov.eval_set in sets else None
        scorable = fact.scored_tokens if fact is not None else None
        entropy = fact.unigram_entropy_nats if fact is not None else None
        if not cov.final_ce:
            continue
        ce = sum(cov.final_ce) / len(cov.final_ce)
        seeds = f"{len(cov.final_ce)} seed{'s' if len(cov.final_ce) != 1 else ''}"
        parts = [f"final CE {ce:.3f} ({seeds})"]
        if isinstance(entropy, (int, float)) and math.isfinite(entropy):
            parts.append(f"held-out unigram entropy {entropy:.3f} ({entropy - ce:+.2f} nats below)")
        if cov.missing_tokens:
            parts.append("eval tokens per point not recorded")
        else:
            toks = sorted(cov.tokens_per_point)
            txt = "/".join(f"{t:,}" for t in toks)
            if isinstance(scorable, int) and scorable:
                txt += f" of {scorable:,} scorable ({100 * toks[0] / scorable:.1f}%" + (
                    ")" if len(toks) == 1 else f"-{100 * toks[-1] / scorable:.1f}%)"
                )
            parts.append(f"eval tokens per point {txt}")
            if len(toks) > 1:
                warnings.append(
                    f"WARNING: {cov.size} {cov.arm} {cov.eval_set}: eval points scored different "
                    f"token counts ({txt}); CEs average different text"
                )
        lines.append(f"eval {cov.eval_set} @ {cov.size} {cov.arm}: " + "; ".join(parts))
    by_set: dict[tuple[str, str], dict[str, frozenset[int]]] = {}
    for cov in rows:
        if cov.final_ce and not cov.missing_tokens:
            by_set.setdefault((cov.size, cov.eval_set), {})[cov.arm] = frozenset(
                cov.tokens_per_point
            )
    for (size, name), arms in by_set.items():
        if len(set(arms.values())) > 1:
            detail = ", ".join(
                f"{a} {'/'.join(f'{t:,}' for t in sorted(v))}" for a, v in arms.items()
            )
            warnings.append(
                f"WARNING: {size} {name}: arms scored different eval token counts ({detail}); "
                "their CEs are not on the same text"
            )
    return warnings + lines
