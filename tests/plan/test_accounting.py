"""Analytic accounting equals what OLMo-core (and our models) count, exactly."""

from __future__ import annotations

import pytest

from olmoablate.plan import accounting as acc
from olmoablate.plan import sizes
from olmoablate.plan.arch import DepthAttention, Looped

BIG = ["1B", "3B", "7B"]


def _olmo_core_config(name: str):  # type: ignore[no-untyped-def]
    from olmo_core.nn.transformer import TransformerConfig

    return getattr(TransformerConfig, f"olmo3_{name}")(vocab_size=sizes.DOLMA2_PADDED_VOCAB_SIZE)


@pytest.mark.parametrize("name", sizes.PRESET_NAMES)
def test_preset_table_matches_olmo_core(name: str) -> None:
    cfg = _olmo_core_config(name)
    d = sizes.preset(name)
    attn = cfg.block.sequence_mixer
    assert (cfg.d_model, cfg.n_layers) == (d.d_model, d.n_layers)
    assert attn.n_heads == d.n_heads
    assert (attn.n_kv_heads or attn.n_heads) == d.n_kv_heads
    assert cfg.block.feed_forward.hidden_size == d.mlp_hidden_size
    sw = attn.sliding_window
    assert sw.pattern == [d.sliding_window] * 3 + [-1]
    assert sw.force_full_attention_on_last_layer and not sw.force_full_attention_on_first_layer


@pytest.mark.parametrize("name", BIG)
def test_big_baselines_match_olmo_core_exactly(name: str) -> None:
    cfg = _olmo_core_config(name)
    model = cfg.build(init_device="meta")
    d = sizes.preset(name)
    assert acc.param_count(d) == cfg.num_params == model.num_params
    assert acc.non_embedding_param_count(d) == cfg.num_non_embedding_params
    for seq in (2048, 4096, 8192):
        assert acc.train_flops_per_token(d, {}, seq) == model.num_flops_per_token(seq)
    windows = [b.attention.window_size for b in model.blocks.values()]
    assert windows == [d.window_of(i) for i in range(d.n_layers)]


def test_published_totals() -> None:
    got = {n: acc.param_count(sizes.preset(n)) for n in BIG}
    assert round(got["1B"] / 1e9, 3) == 1.485
    assert round(got["3B"] / 1e9, 3) == 3.504
    assert round(got["7B"] / 1e9, 3) == 7.299


def test_depth_sources() -> None:
    da = DepthAttention(stride=8)
    assert [da.sources(u) for u in (0, 1, 9, 17)] == [[], [0], [0, 8], [0, 8, 16]]
    assert DepthAttention(stride=8, recent_window=2).sources(10) == [0, 8, 9]


def test_looped_flops_formula() -> None:
    d = sizes.preset("1B")
    body = sum(acc._layer_flops(d, j, 4, 4096) for j in range(4))
    head = 6 * acc.head_params(d)
    arch = {"looped": {"body_layers": 4, "loops": 4, "tail": 2}}
    assert acc.train_flops_per_token(d, arch, 4096) == body * (4 + 4) // 3 + 2 * head
    # K = L, b = T = 1 is the baseline
    same = {"looped": {"body_layers": 16, "loops": 1, "tail": 1}}
    assert acc.train_flops_per_token(d, same, 4096) == acc.train_flops_per_token(d, {}, 4096)


def test_curriculum_loops_and_total() -> None:
    lp = {"loops": 8, "tail": 2, "curriculum": {"start": 2, "increment": 2, "interval_steps": 10}}
    looped = Looped(body_layers=4, **lp)
    assert [looped.loops_at_step(s) for s in (1, 10, 11, 21, 31, 100)] == [2, 2, 4, 6, 8, 8]
    assert looped.loop_schedule(40) == [(2, 10), (4, 10), (6, 10), (8, 10)]
    assert looped.loop_schedule(25) == [(2, 10), (4, 10), (6, 5)]
    assert Looped(body_layers=4, loops=3).loop_schedule(7) == [(3, 7)]
    d = sizes.preset("60M")
    arch = {"looped": {"body_layers": 4, **lp}}
    total = acc.total_train_flops(d, arch, 512, 1024, 40)
    by_hand = sum(
        acc.train_flops_per_token(d, arch, 512, looped.loops_at_step(s)) * 1024
        for s in range(1, 41)
    )
    assert total == by_hand


def test_steps_for_flops_matches_budget() -> None:
    d = sizes.preset("1B")
    base = acc.total_train_flops(d, {}, 4096, 4 * 2**20, 1000)
    arch = {"looped": {"body_layers": 4, "loops": 4, "tail": 2}}
    steps = acc.steps_for_flops(d, arch, 4096, 4 * 2**20, base)
    got = acc.total_train_flops(d, arch, 4096, 4 * 2**20, steps)
    per_step = acc.train_flops_per_token(d, arch, 4096) * 4 * 2**20
    assert abs(got - base) <= per_step / 2


def test_siamese_param_delta() -> None:
    d = sizes.preset("1B")
    base = acc.param_count(d)
    assert (
        acc.param_count(d, {"siamese_norm": {"output_norms": False}})
        == base + 3 * d.d_model * 16 + 2 * d.d_model
    )
    assert (
        acc.param_count(d, {"siamese_norm": {"output_norms": True}})
        == base + 5 * d.d_model * 16 + 2 * d.d_model
    )
    assert acc.param_count(d, {"depth_attention": {"stride": 8, "recent_window": 0}}) == base


VARIANTS = {
    "baseline": {},
    "siamese": {"siamese_norm": {"output_norms": False}},
    "siamese_outnorm": {"siamese_norm": {"output_norms": True}},
    "depth": {"depth_attention": {"stride": 2, "recent_window": 1}},
    "siamese_depth": {
        "siamese_norm": {"output_norms": False},
        "depth_attention": {"stride": 3, "recent_window": 0},
    },
    "looped": {
        "looped": {
            "body_layers": 4,
            "loops": 3,
            "tail": 2,
            "input_injection": True,
            "state_norm": True,
        }
    },
    "looped_depth": {
        "looped": {"body_layers": 4, "loops": 3, "tail": 2},
        "depth_attention": {"stride": 2, "recent_window": 0},
    },
    "layers": {"layers": {"n_layers": 4}},
}


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_counts_equal_the_built_model(name: str) -> None:
    """The plan's numbers are the trained model's numbers (GQA, SWA narrower than the sequence)."""
    from olmoablate.models.build import build_model

    size = {
        "d_model": 64,
        "n_layers": 8,
        "n_heads": 4,
        "n_kv_heads": 2,
        "mlp_hidden_size": 192,
        "sliding_window": 16,
        "vocab_size": 1024,
    }
    arch = VARIANTS[name]
    model = build_model(size, arch)
    d = sizes.resolve(size)
    assert acc.param_count(d, arch) == sum(p.numel() for p in model.parameters())
    for seq in (64, 200):
        assert acc.train_flops_per_token(d, arch, seq) == model.num_flops_per_token(seq)
