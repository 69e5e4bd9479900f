"""contract/blocks.py: the block registry finds blocks lazily and names what is allowed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.errors import UserError
from olmoablate.plan import accounting as acc
from olmoablate.plan.arch import parse_architecture
from olmoablate.plan.blocks import code_identity, get_block
from olmoablate.plan.sizes import resolve
from olmoablate.testing import REPO, run_cli
from olmoablate.testing import bad_blocks as blocks


def test_validate_of_bundled_blocks_does_not_scan_entry_points() -> None:
    """Bundled block names are found without scanning every installed package's entry points."""
    code = (
        "import sys; from pathlib import Path\n"
        "from olmoablate.plan.validate import validate_command\n"
        "validate_command([Path('specs')])\n"
        "import olmoablate.plan.blocks as b\n"
        "print(b._entry_points is None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[-1] == "True", out.stdout + out.stderr


def test_unknown_block_lists_bundled_and_installed_blocks() -> None:
    with pytest.raises(UserError) as err:
        parse_architecture({"value_residual": {}})
    msg = str(err.value)
    assert "unknown block 'value_residual'" in msg
    for name in ("siamese_norm", "depth_attention", "looped", "layers", "layerscale"):
        assert name in msg
    assert "module:attr" in msg and "olmoablate.blocks" in msg


def test_module_attr_key_and_located_option_errors(tmp_path: Path) -> None:
    a = parse_architecture({"olmoablate.testing.bad_blocks:OFF_BY_ONE": {}})
    assert list(a.as_mapping()) == ["olmoablate.testing.bad_blocks:OFF_BY_ONE"]
    d = resolve({"d_model": 32, "n_layers": 4, "n_heads": 4, "mlp_hidden_size": 64,
                 "sliding_window": 16, "vocab_size": 512})
    assert acc.param_count(d, a) == acc.param_count(d, {}) + 1
    with pytest.raises(UserError, match=r"olmoablate\.testing\.bad_blocks:OFF_BY_ONE\.x: unknown key"):
        parse_architecture({"olmoablate.testing.bad_blocks:OFF_BY_ONE": {"x": 1}})
    with pytest.raises(UserError, match="cannot load block 'nosuchmod:B'"):
        parse_architecture({"nosuchmod:B": {}})
    with pytest.raises(UserError, match=r"layerscale\.init: .*greater than 0"):
        parse_architecture({"layerscale": {"init": 0}})


def test_an_installed_block_declares_its_combinations() -> None:
    with pytest.raises(UserError, match=r"siamese_norm cannot be combined with layerscale \(both"):
        parse_architecture({"siamese_norm": {}, "layerscale": {}})
    ok = parse_architecture({"layerscale": {}, "depth_attention": {"stride": 2}})
    assert list(ok.blocks) == ["depth_attention", "layerscale"]  # bundled order first


def test_spec_errors_name_a_block_option_and_its_line(tmp_path: Path) -> None:
    spec = (REPO / "specs" / "demo.yaml").read_text()
    bad = spec.replace("depth_attention: {stride: 2, recent_window: 0}", "depth_attention: {strid: 2}")
    (tmp_path / "bad.yaml").write_text(bad)
    line = bad.splitlines().index("    depth_attention: {strid: 2}") + 1
    out = run_cli("validate", str(tmp_path / "bad.yaml"), cwd=REPO)
    assert out.returncode == 2
    assert (
        f"bad.yaml:{line}: variants.siamese_depth.depth_attention.strid: unknown field "
        "(did you mean 'stride'? allowed: stride, recent_window)" in out.stderr
    )


def test_code_identity_of_bundled_and_installed_blocks() -> None:
    da = code_identity("depth_attention")
    assert (da["distribution"], da["module"]) == (
        "olmoablate",
        "olmoablate.plan.arch:DepthAttentionBlock",
    )
    assert da["files"] >= 5 and len(da["sha256"]) == 64
    ls = code_identity("layerscale")
    assert (ls["distribution"], ls["version"], ls["files"]) == ("olmoablate-layerscale", "0.1.0", 2)
    assert get_block("layerscale").name == "layerscale"


def test_blocks_command_lists_installed_blocks_with_options() -> None:
    out = run_cli("blocks", "--json", cwd=REPO)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert list(rows)[:4] == ["siamese_norm", "depth_attention", "looped", "layers"]
    assert rows["layerscale"]["options"] == [{"option": "init", "type": "float", "default": "0.1"}]
    assert rows["looped"]["excludes"].keys() == {"siamese_norm", "layers"}
    types = {o["option"]: o["type"] for o in rows["olmo_core"]["options"]}  # was "Optional"
    assert types["rope_theta"] == "int | None"
    assert types["activation"] == "'silu' | 'gelu_tanh' | None"
    assert rows["layerscale"]["from"] == "olmoablate-layerscale 0.1.0"


def test_code_identity_of_a_block_in_a_namespace_package_hashes_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A research repository's folder without __init__.py is a namespace package: its spec has
    # no origin. Its identity used to hash zero files, so an edit after plan went unnoticed.
    pkg = tmp_path / "ns_blocks_r1"
    pkg.mkdir()
    src = pkg / "mine.py"
    src.write_text(
        "from olmoablate.errors import Strict\n"
        "from olmoablate.plan.blocks import Block\n"
        "class Mine(Block):\n"
        "    name = 'mine'\n    Options = Strict\n    model = 'ns_blocks_r1.mine:MODEL'\n"
        "BLOCK = Mine()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_identity("ns_blocks_r1.mine:BLOCK")
    assert before["files"] == 1
    src.write_text(src.read_text() + "# an edit after plan\n")
    assert code_identity("ns_blocks_r1.mine:BLOCK")["sha256"] != before["sha256"]


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("NO_MODEL", "does not set model ('module:attr' of its olmoablate.models.block_model"),
        ("MODEL_TYPO", "its torch half 'olmoablate.testing.block:UNCHANGED' cannot be found"),
    ],
)
def test_a_block_without_a_torch_half_is_a_spec_error(attr: str, message: str) -> None:
    # was an internal AttributeError (no `model`), or passed validate and plan (a typo)
    with pytest.raises(UserError, match=re.escape(message)):
        parse_architecture({f"olmoablate.testing.bad_blocks:{attr}": {}})


def test_code_change_names_the_file_the_block_was_loaded_from() -> None:
    # a job whose cwd shadows the planned module loads other code: say which file it loaded
    from olmoablate.plan.blocks import code_changes

    key = "olmoablate.testing.bad_blocks:OFF_BY_ONE"
    (msg,) = code_changes({key: {"sha256": "0" * 64, "version": None}}, {key: {}})
    assert "changed since plan" in msg
    assert msg.endswith(f"loaded here from {blocks.__file__}")
