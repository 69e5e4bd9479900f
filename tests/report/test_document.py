"""Rendered outputs: md, self-contained html (data: URI plots), csv, gate.json, screenshot."""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from olmoablate.report.assemble import build, write_next_plan
from olmoablate.report.collect import collect
from olmoablate.report.document import write_all
from olmoablate.testing import REPO
from olmoablate.testing.synthetic import ArmTruth, SynthSpec, make_results

EVAL = "eval/lm/demo-heldout/CE loss"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("r") / "loop"
    spec = SynthSpec(
        name="loop",
        sizes=("1B", "3B"),
        seeds=(0, 1),
        variants={
            "looped": {"looped": {"body_layers": 4, "loops": 4, "tail": 1}},
            "ref4": {"layers": {"n_layers": 4}},
        },
        gate={
            "metric": EVAL,
            "min_effect": 0.01,
            "rule": "quality_per_param",
            "reference": "ref4",
            "promote_to": ["3B"],
        },
        budget_match="tokens",
    )
    truths = {
        "looped": ArmTruth(
            offset=0.01, loop_eval={2: 0.3, 4: 0.0, 8: 0.05}, h_norms=(1.0, 1.5, 2.0, 2.5)
        ),
        "ref4": ArmTruth(offset=0.08),
        "3B-s1-ref4": ArmTruth(offset=0.08, data_salt="other data"),
    }
    make_results(root, spec, truths)
    report = build(collect(root, use_cache=False))
    write_next_plan(report, root)
    write_all(report, root, ["md", "html", "csv", "json"])
    return root


def test_files_written(rendered: Path) -> None:
    for name in ("report.md", "report.html", "comparison.csv", "gate.json", "next_plan.json"):
        assert (rendered / name).is_file(), name
    plots = sorted(p.name for p in (rendered / "plots").glob("*.png"))
    assert "1B__looped.png" in plots and "1B__looped__loops.png" in plots
    assert "1B__quality_vs_unique_params.png" in plots and "1B__quality_vs_train_flops.png" in plots
    assert "consistency.png" in plots


def test_gate_json(rendered: Path) -> None:
    g = json.loads((rendered / "gate.json").read_text())
    assert g["stage"] == "1B" and g["verdict"] in ("proceed", "stop", "inconclusive")
    assert g["verdict"] == "proceed", g["reasons"]
    assert isinstance(g["reasons"], list) and g["reasons"]
    assert {p["pair_id"] for p in g["pairs"]} == {"1B-s0-looped", "1B-s1-looped"}
    assert [p["pair_id"] for p in g["invalid_pairs"]] == ["3B-s1-ref4"]


def test_html_is_self_contained_with_embedded_plots(rendered: Path) -> None:
    html = (rendered / "report.html").read_text()
    imgs = re.findall(r"<img [^>]*src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    n_plots = len(list((rendered / "plots").glob("*.png")))
    assert len(imgs) == n_plots
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)
    assert not re.search(r"(src|href)=['\"](https?:|//)", html)  # no external assets
    assert "INVALID PAIR 3B-s1-ref4" in html
    assert "Gate verdict at 1B: PROCEED" in html


def test_markdown_and_csv(rendered: Path) -> None:
    md = (rendered / "report.md").read_text()
    assert "**Gate verdict at 1B: PROCEED**" in md
    assert "> **INVALID PAIR 3B-s1-ref4" in md
    assert "post-horizon divergence" in md
    assert "![1B__looped](plots/1B__looped.png)" in md
    rows = list(csv.DictReader((rendered / "comparison.csv").open()))
    pairs = {r["pair_id"] for r in rows}
    assert len(pairs) == 8
    one = [r for r in rows if r["pair_id"] == "1B-s0-looped" and r["metric"] == EVAL]
    assert len(one) == 1 and float(one[0]["delta"]) == pytest.approx(0.01, abs=0.003)
    assert any(r["kind"] == "cost" and r["metric"] == "cost/unique params" for r in rows)


@pytest.mark.skipif(
    shutil.which("chromium") is None and os.environ.get("CI") != "true",
    reason="chromium not installed (apt-get install chromium); under CI=true this fails instead",
)
def test_headless_chromium_screenshot(rendered: Path, tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    subprocess.run(
        [
            str(REPO / "scripts" / "screenshot-report.sh"),
            str(rendered / "report.html"),
            str(out),
            "2400",
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    import matplotlib.image as mpimg

    img = mpimg.imread(out)
    assert img.shape[0] == 2400 and img.shape[1] == 1200
    # a page with plots is not blank: many distinct pixel values, not only white
    assert img[..., :3].std() > 0.05
    shutil.copy(out, rendered / "screenshot.png")


def test_unchanged_figures_are_reused_and_changed_ones_redrawn(tmp_path: Path) -> None:
    root = tmp_path / "two"
    spec = SynthSpec(name="two", variants={"a": {}, "b": {"siamese_norm": {}}}, steps=120)
    make_results(root, spec, {"a": ArmTruth(offset=-0.02), "b": ArmTruth(offset=0.01)})
    out = tmp_path / "out"
    write_all(build(collect(root)), out, ["md"])
    figs = {p.name: p.stat().st_ino for p in (out / "plots").glob("*.png")}
    assert {"1B__a.png", "1B__b.png", "consistency.png"} <= set(figs)
    write_all(build(collect(root)), out, ["md"])  # nothing changed: group figures not redrawn
    again = {p.name: p.stat().st_ino for p in (out / "plots").glob("*.png")}
    assert again["1B__a.png"] == figs["1B__a.png"] and again["1B__b.png"] == figs["1B__b.png"]
    assert again["consistency.png"] == figs["consistency.png"]  # keyed by the data it draws
    # the baseline and "a" log more steps: a's figure is redrawn (atomic write: a new file),
    # b's is not (the comparison stops where b stops: nothing it draws changed)...
    for arm in ("baseline", "a"):
        with (root / "runs" / f"1B-s0-{arm}" / "metrics.jsonl").open("a") as fh:
            for s in range(121, 131):
                fh.write(json.dumps({"step": s, "tokens": s * 2048, "train/CE loss": 2.0}) + "\n")
    write_all(build(collect(root)), out, ["md"])
    third = {p.name: p.stat().st_ino for p in (out / "plots").glob("*.png")}
    assert third["1B__a.png"] != again["1B__a.png"]
    assert third["1B__b.png"] == again["1B__b.png"]
    # ...and a deleted figure is drawn again
    (out / "plots" / "1B__b.png").unlink()
    (out / "plots" / "consistency.png").unlink()
    write_all(build(collect(root)), out, ["md"])
    assert (out / "plots" / "1B__b.png").is_file()
    assert (out / "plots" / "consistency.png").is_file()


def test_tradeoff_and_consistency_keys_follow_their_data(rendered: Path) -> None:
    """The looped tradeoff figures and the consistency figure are cached by what they draw."""
    from olmoablate.report import plots

    report = build(collect(rendered, use_cache=False))
    pairs = [p for p in report.pairs if p.size == report.sizes[0]]
    points = plots.tradeoff_points(report, pairs)
    assert len(points) >= 2  # the rendered fixture has a looped arm: its tradeoffs are drawn
    key = plots._data_key(report, ["1B", points])
    assert key == plots._data_key(report, ["1B", plots.tradeoff_points(report, pairs)])
    moved = {arm: {**d, "q": [q + 1e-9 for q in d["q"]]} for arm, d in points.items()}
    assert plots._data_key(report, ["1B", moved]) != key


def test_one_card_per_proposal_and_no_markup_leaks(rendered: Path) -> None:
    html = (rendered / "report.html").read_text()
    md = (rendered / "report.md").read_text()
    assert html.count("class=\"card\"") == 1 and html.count("<h2>Gate</h2>") == 1
    assert html.count("<th>variant</th><th>role</th>") == 1  # the verdict table once
    assert "`" not in html and "**" not in html  # no markdown in the page
    assert "gate__" in html and (rendered / "plots" / "gate__gate.png").is_file()
    assert not re.search(r"\[(\w+)\] \[\1\]", html + md)  # no tag repeated
    assert "### Gate: PROCEED" in md and "Why: " in md


def test_terminal_block_fits_100_columns(rendered: Path) -> None:
    import io

    from rich.console import Console

    from olmoablate.report.document import render_terminal

    report = build(collect(rendered, use_cache=False))
    buf = io.StringIO()
    Console(file=buf, width=300, soft_wrap=True, color_system=None).print(render_terminal(report))
    lines = buf.getvalue().splitlines()
    assert lines and max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    assert any(ln.split() == ["PROCEED", "Gate"] for ln in lines)
    assert any(ln.strip().startswith("looped vs reference ref4 at 1B") for ln in lines)


def test_no_loop_count_figure_for_one_loop_count(tmp_path: Path) -> None:
    root = tmp_path / "one"
    spec = SynthSpec(
        name="one",
        variants={"looped": {"looped": {"body_layers": 4, "loops": 4, "tail": 1}}},
        gate={"metric": EVAL, "min_effect": 0.01},
    )
    make_results(root, spec, {"looped": ArmTruth(offset=0.01, loop_eval={4: 0.0})})
    write_all(build(collect(root, use_cache=False)), root, ["md"])
    plots = {p.name for p in (root / "plots").glob("*.png")}
    assert "1B__looped.png" in plots and "1B__looped__loops.png" not in plots


def test_deciding_reason_is_one_sentence_without_the_bounds() -> None:
    from olmoablate.report.cards import one_sentence

    long = (
        "[looped] vs baseline: improvement -0.06608 (one-sided 95% bounds [-0.1362, +0.004085], "
        "2 seed(s), noise: paired seeds): not separable from min_effect 0; seeds needed: about 3"
    )
    assert one_sentence(long) == "vs baseline: improvement -0.06608: not separable from min_effect 0."
