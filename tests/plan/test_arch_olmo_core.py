"""The `olmo_core` block: OLMo-core's own config fields as a variant, typed and accounted."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, get_args

import pytest

from olmoablate.errors import UserError
from olmoablate.plan import accounting as acc
from olmoablate.plan import arch as bundled
from olmoablate.plan.arch import parse_architecture
from olmoablate.plan.sizes import resolve
from olmoablate.testing import REPO, run_cli

TINY = resolve({"name": "tiny", "d_model": 64, "n_layers": 8, "n_heads": 4, "n_kv_heads": 2,
                "mlp_hidden_size": 192, "sliding_window": 32, "vocab_size": 4096})


def test_fields_are_olmo_core_config_fields_with_olmo_core_values() -> None:
    from olmo_core.nn.attention import AttentionConfig, GateGranularity
    from olmo_core.nn.feed_forward import ActivationFunction, FeedForwardConfig
    from olmo_core.nn.rope import RoPEConfig
    from olmo_core.nn.transformer import TransformerBlockConfig, TransformerBlockType

    def names(cls: Any) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    assert {"qk_norm", "rope", "gate"} <= names(AttentionConfig)
    assert "theta" in names(RoPEConfig)
    assert {"hidden_size", "activation"} <= names(FeedForwardConfig)
    assert "name" in names(TransformerBlockConfig)
    fields = bundled.OlmoCoreFields.model_fields
    assert set(get_args(get_args(fields["activation"].annotation)[0])) == {
        a.value for a in ActivationFunction
    } == set(bundled.OLMO_CORE_ACTIVATIONS)
    assert set(bundled.OLMO_CORE_GATES) == {g.value for g in GateGranularity}
    assert set(bundled.OLMO_CORE_BLOCK_NAMES) <= {b.value for b in TransformerBlockType}


@pytest.mark.parametrize(
    "fields,extra",
    [
        ({"qk_norm": False}, {}),
        ({"rope_theta": 10_000}, {}),
        ({"mlp_hidden_size": 256, "activation": "gelu_tanh"}, {"depth_attention": {"stride": 2}}),
        ({"block_name": "peri_norm"}, {"looped": {"body_layers": 4, "loops": 2, "tail": 1}}),
        ({"block_name": "default"}, {}),
        ({"attention_gate": "elementwise", "qk_norm": False}, {}),
        ({"attention_gate": "headwise"}, {"layers": {"n_layers": 4}}),
    ],
)
def test_accounting_is_exact_against_the_built_model(fields: dict, extra: dict) -> None:
    from olmoablate.models.build import build_model_config, unique_param_count
    from olmoablate.run import proof

    arch = {"olmo_core": fields, **extra}
    cfg = build_model_config(TINY, arch)
    model = cfg.build(init_device="meta")
    assert unique_param_count(model) == acc.param_count(TINY, arch)
    if "looped" not in extra:  # OLMo-core's own count (a looped model's is ours)
        assert model.num_flops_per_token(512) == acc.train_flops_per_token(TINY, arch, 512)
    split = acc.flops_breakdown(TINY, arch, 16, acc.phase_at(arch, 1))
    assert proof.measured_flops_per_token(cfg, 16) == split.total - split.unseen
    if fields.get("qk_norm") is False:
        att = model.blocks["0"].attention
        assert att.q_norm is None and att.k_norm is None


def test_rope_theta_and_block_name_reach_olmo_core() -> None:
    from olmoablate.models.build import build_model_config

    cfg = build_model_config(TINY, {"olmo_core": {"rope_theta": 10_000, "block_name": "default"}})
    assert cfg.block.sequence_mixer.rope.theta == 10_000 and cfg.block.name == "default"


def test_errors_name_the_allowed_fields(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"olmo_core\.qk_norms: unknown key"):
        parse_architecture({"olmo_core": {"qk_norms": False}})
    with pytest.raises(UserError, match="set at least one OLMo-core field"):
        parse_architecture({"olmo_core": {}})
    with pytest.raises(UserError, match="siamese_norm cannot be combined with olmo_core"):
        parse_architecture({"olmo_core": {"qk_norm": False}, "siamese_norm": {}})
    spec = (REPO / "specs" / "demo.yaml").read_text()
    bad = spec.replace("layers: {n_layers: 4}", "olmo_core: {qk_norms: false}")
    (tmp_path / "bad.yaml").write_text(bad)
    out = run_cli("validate", str(tmp_path / "bad.yaml"), cwd=REPO)
    assert out.returncode == 2
    line = bad.splitlines().index("    olmo_core: {qk_norms: false}") + 1
    assert (
        f"bad.yaml:{line}: variants.olmo3_4layer.olmo_core.qk_norms: unknown field "
        "(did you mean 'qk_norm'? allowed: qk_norm, rope_theta, mlp_hidden_size, activation, block_name, attention_gate)"
    ) in out.stderr
