"""The docs name real files, and the gate calibration's published block is reproducible
(issue 34, item 8): the same command gives the same bytes, and ``--check`` notices a change."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

from olmoablate.testing import REPO

#: this repository's files (scripts/<subfolder>/ paths in the docs are OLMo-core's)
PATH = re.compile(
    r"\b((?:olmoablate|bench|tests)/[\w/.-]+\.(?:py|sh|md)|scripts/[\w.-]+\.(?:py|sh))\b"
)


def test_docs_name_files_that_exist() -> None:
    named = {
        (doc.name, m)
        for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for m in PATH.findall(doc.read_text(encoding="utf-8"))
    }
    assert named, "no path found: the pattern is wrong"
    missing = sorted(f"{doc}: {p}" for doc, p in named if not (REPO / p).exists())
    assert missing == []


def _bench() -> object:
    spec = importlib.util.spec_from_file_location(
        "gate_calibration", REPO / "bench" / "gate_calibration.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_gate_calibration_block_is_reproducible_and_checked(tmp_path: Path) -> None:
    gc = _bench()
    args = argparse.Namespace(reps=60, holm_reps=12, seed=1)
    block = gc.published(gc.run(args.reps, args.holm_reps, args.seed, 2, 2)[0], args)  # type: ignore[attr-defined]
    again = gc.published(gc.run(args.reps, args.holm_reps, args.seed, 2, 2)[0], args)  # type: ignore[attr-defined]
    assert block == again and "--reps 60 --holm-reps 12 --seed 1" in block
    assert "2 seeds, +1 after inconclusive" in block and "inconclusive (unplanned)" in block
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{gc.BEGIN}\nold\n{gc.END}\nafter\n")  # type: ignore[attr-defined]
    assert not gc.sync(doc, block, False)[0]  # type: ignore[attr-defined]
    assert gc.sync(doc, block, True)[0]  # type: ignore[attr-defined]
    assert gc.sync(doc, block, False)[0] and doc.read_text().startswith("before\n")  # type: ignore[attr-defined]
    doc.write_text(doc.read_text().replace("±", "+-", 1))
    assert not gc.sync(doc, block, False)[0]  # type: ignore[attr-defined]
