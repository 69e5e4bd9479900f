"""spec/overrides.py and the loader's number, size-key and field-name messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmoablate.plan.load import SpecError, apply_overrides, load_spec, parse_value, spec_sha256
from olmoablate.testing import MINIMAL_SPEC

MINIMAL = (MINIMAL_SPEC).read_text()


def _spec(tmp_path: Path, text: str = MINIMAL) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_exponent_floats_are_numbers(tmp_path: Path) -> None:
    """YAML 1.1 reads 3e-4 and 1.0e5 as strings; specs read them as floats (YAML 1.2)."""
    assert parse_value("3e-4") == 3e-4 and parse_value("1.0e5") == 1e5
    assert parse_value("12") == 12 and parse_value("abc") == "abc" and parse_value("3e") == "3e"
    ls = load_spec(_spec(tmp_path, MINIMAL.replace("lr: 1.0e-3", "lr: 3e-4")))
    assert ls.per_size["tiny"].training.optimizer.lr == 3e-4


def test_unknown_size_key_is_named(tmp_path: Path) -> None:
    text = MINIMAL.replace("sizes: [tiny]", "sizes: [tiny, 190M]").replace(
        "tokens: 4096", "tokens: {tiny: 4096, 190M: 4B, 307M: 8B}"
    )
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, text))
    (p,) = [p for p in info.value.problems if "307M" in p.field]
    assert p.field == "training.tokens.307M"
    assert p.message.startswith("unknown size key 307M (allowed: ")


def test_misspelled_field_says_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, MINIMAL.replace("global_batch_size", "global_batch_sise")))
    assert "did you mean 'global_batch_size'?" in str(info.value)


def test_override_sets_and_makes_per_size() -> None:
    doc, where = apply_overrides(
        {"training": {"optimizer": {"lr": 4e-4}}}, ["training.optimizer.lr.1B=3e-4"], {"1B"}
    )
    assert doc["training"]["optimizer"]["lr"] == {"default": 4e-4, "1B": 3e-4}
    assert where == {("training", "optimizer", "lr", "1B"): "training.optimizer.lr.1B=3e-4"}


def test_override_is_validated_like_the_file_and_named(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ls = load_spec(spec, ["training.optimizer.lr=3e-4", "seeds=[0, 1]"])
    assert ls.per_size["tiny"].training.optimizer.lr == 3e-4 and ls.spec.seeds == [0, 1]
    assert ls.sha256 == spec_sha256(spec.read_bytes(), ls.overrides)
    assert ls.sha256 != load_spec(spec).sha256
    with pytest.raises(SpecError) as info:
        load_spec(spec, ["training.optimizer.lr=fast"])
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"{spec}:13: training.optimizer.lr: ")
    assert line.endswith("(from --set training.optimizer.lr=fast)")
    for bad, msg in (
        ("training", "expected FIELD.PATH=VALUE"),
        ("training.tokens.x=1", "training.tokens is a value (4096), not a section"),
    ):
        with pytest.raises(SpecError) as info:
            load_spec(spec, [bad])
        assert f"--set {bad}: {msg}" in str(info.value)
