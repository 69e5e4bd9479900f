"""The gate's statistics in words, for every renderer (markdown, HTML, terminal).

Why one function: the noise source, the seeds-needed line, Holm and the overhead interval are
what make a verdict checkable; all three outputs must say the same thing.
"""

from __future__ import annotations

from olmoablate.report.build import Report


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
    src = report.noise
    if src is not None and src.runs:
        vals = ", ".join(f"{r} {v:.4g}" for r, v in zip(src.runs, src.run_values, strict=True))
        out.append(f"A/A baselines at matched tokens (last_n mean of the gate metric): {vals}")
    out.extend(report.noise_notes)
    return out
