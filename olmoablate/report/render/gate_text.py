"""The gate's statistics in words, for every renderer (markdown, HTML, terminal).

Why one function: the noise source, the seeds-needed line, Holm and the overhead interval are
what make a verdict checkable; all three outputs must say the same thing.
"""

from __future__ import annotations

from typing import Any

from olmoablate.report.build import Report
from olmoablate.report.gate.sequential import SequentialResult


def statistics_lines(report: Report) -> list[str]:
    """One line per fact: per variant its role, noise source, seeds needed, step-time interval,
    jitter diagnostic and timing conditions; then the family note and noise notes."""
    out: list[str] = []
    if report.results.prereg_broken:
        out.append(report.results.prereg_broken)
    if report.family_note:
        out.append(report.family_note)
    for v in report.variant_verdicts:
        tag = f"[{v.variant}, {v.role}]"
        if v.noise:
            out.append(f"{tag} {v.noise}")
        if v.checks and v.checks[0].seeds_line:
            out.append(f"{tag} {v.checks[0].seeds_line}")
        if v.step_time is not None:
            out.append(f"{tag} {v.step_time.reason}")
        if v.jitter:
            out.append(f"{tag} {v.jitter}")
        out.extend(f"{tag} {n}" for n in dict.fromkeys(v.notes))
    for variant, res in report.sequential.items():
        out.extend(f"[{variant}] {line}" for line in look_lines(res))
    src = report.noise
    if src is not None and src.runs:
        vals = ", ".join(f"{r} {v:.4g}" for r, v in zip(src.runs, src.run_values, strict=True))
        out.append(f"A/A baselines at matched tokens (last_n mean of the gate metric): {vals}")
    out.extend(report.noise_notes)
    return out


def look_lines(res: SequentialResult) -> list[str]:
    """The sequential design's look history: one line per look, then the flags and savings."""
    out = []
    for lk in res.looks:
        est = (
            f"; improvement {lk.mean:+.4g}, bounds [{lk.lower:+.4g}, {lk.upper:+.4g}]"
            if lk.mean is not None and lk.lower is not None and lk.upper is not None
            else ""
        )
        out.append(
            f"look {lk.index} of {lk.of} ({lk.kind}, {lk.fraction:.0%} of tokens, {lk.seeds} "
            f"seed(s)): {lk.decision}; boundary: {lk.boundary}{est}"
            + (f"; {lk.note}" if lk.note else "")
        )
    out.extend(res.flags)
    if res.gpu_hours_saved:
        out.append(f"{res.status_line}: {res.gpu_hours_saved:.4g} GPU-hours of variant arms saved")
    return out


def gate_text(report: Report) -> str:
    """The gate's settings in one plain sentence (no markup: every renderer formats it)."""
    g = report.results.gate
    txt = (
        f"Variant {g.variant or '(all)'}, stage {report.stage}, rule {g.rule}, "
        f"metric {g.metric} ({g.direction} is better), min_effect {g.min_effect}, "
        f"confidence {g.confidence}, last_n {g.last_n}"
        + (f", reference {g.reference}" if g.reference else "")
        + f"; pre-registered (sha256 {str(report.results.plan.gate_sha256)[:12]})."
    )
    if report.notes:
        txt += " " + " ".join(f"{n}." for n in report.notes)
    return txt


def estimate_cells(est: Any) -> list[Any]:
    """The effect, its one-sided bounds and the seed count of a check's estimate (a table's
    four number cells; blank and 0 seeds when the check has no estimate)."""
    if est is None:
        return [None, None, None, 0]
    return [est.mean, est.lower, est.upper, est.n_seeds]
