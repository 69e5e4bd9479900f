"""KV-cached greedy decoding equals the full forward pass at every position, for every variant."""

from __future__ import annotations

import pytest
import torch

from olmoablate.models.build import build_model
from olmoablate.models.generate import IncrementalDecoder, greedy_decode

VOCAB = 64
SIZE = {
    "d_model": 32,
    "n_layers": 8,
    "n_heads": 4,
    "n_kv_heads": 2,
    "mlp_hidden_size": 48,
    "sliding_window": 3,  # decode runs past the window, so SWA eviction is exercised
    "vocab_size": VOCAB,
}
ARCHS = {
    "baseline": {},
    "sn_da": {"siamese_norm": {}, "depth_attention": {"stride": 3, "recent_window": 1}},
    # up to 5 sources per layer: the stacked no-grad mix with several sources
    "sn_da_s2": {"siamese_norm": {}, "depth_attention": {"stride": 2, "recent_window": 1}},
    "looped": {"looped": {"body_layers": 4, "loops": 3, "tail": 2, "state_norm": True}},
    "looped_da": {"looped": {"body_layers": 4, "loops": 2}, "depth_attention": {"stride": 2}},
}


def _model(arch: dict) -> torch.nn.Module:
    model = build_model(SIZE, arch, init_seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger-than-init weights so positions really differ
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.mark.parametrize("name", list(ARCHS))
def test_incremental_decode_equals_full_forward(name: str) -> None:
    model = _model(ARCHS[name])
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    tokens, logits = greedy_decode(model, prompt, max_new_tokens=9)
    assert tokens.shape == (2, 14) and logits.shape == (2, 9, VOCAB)
    with torch.no_grad():
        full = model(tokens[:, :-1])
    torch.testing.assert_close(logits, full[:, 4:], atol=1e-4, rtol=1e-4)
    assert torch.equal(tokens[:, 5:], full[:, 4:].argmax(-1))

    # token-by-token from the very first position: every position goes through the cache
    with IncrementalDecoder(model, 2, tokens.shape[1], n_loops=None) as dec:
        per_pos = torch.cat([dec.step(tokens[:, i : i + 1]) for i in range(tokens.shape[1] - 1)], 1)
    torch.testing.assert_close(per_pos, full, atol=1e-4, rtol=1e-4)


def test_looped_decode_other_loop_count() -> None:
    model = _model(ARCHS["looped_da"])
    prompt = torch.randint(0, VOCAB, (1, 4))
    tokens, logits = greedy_decode(model, prompt, max_new_tokens=5, n_loops=4)
    with torch.no_grad():
        full = model(tokens[:, :-1], n_loops=4)
    torch.testing.assert_close(logits, full[:, 3:], atol=1e-4, rtol=1e-4)


def test_cache_shapes_and_sizes() -> None:
    caches = {}
    for name, arch in ARCHS.items():
        model = _model(arch)
        with IncrementalDecoder(model, 2, 16) as dec:
            dec.step(torch.zeros(2, 3, dtype=torch.long))
            caches[name] = ([tuple(k.shape) for k in dec.keys], dec.cache_bytes())
    base_shapes, base_bytes = caches["baseline"]
    assert caches["sn_da"][0] == base_shapes  # Depth-Attention: same cache as the baseline
    assert caches["sn_da"][1] == base_bytes
    assert len(caches["looped"][0]) == 3 * 4  # one cache per (loop, body block)
    assert caches["looped"][1] == base_bytes * 12 // 8
    assert base_shapes[0] == (2, 16, 2, 8)
    # the cache forward and the norm forwards are removed again afterwards
    model = _model(ARCHS["baseline"])
    with IncrementalDecoder(model, 1, 4) as dec:
        assert len(dec.norms) == 8 * 4 + 1  # per block: 2 output norms + q/k norms; LM head
        assert all("forward" in n.__dict__ for n in dec.norms)
    assert all("forward" not in blk.attention.__dict__ for blk in model.blocks.values())
    assert all("forward" not in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoder_rms_norm_is_olmo_core_bit_for_bit(dtype: torch.dtype) -> None:
    """The decoder's F.rms_norm forward equals OLMo-core's RMSNorm exactly, also for a low
    precision input (computed in fp32, cast back) and under autocast (defers to OLMo-core)."""
    model = _model(ARCHS["sn_da"])
    norm = model.blocks["2"].x_norm
    x = torch.randn(3, 5, SIZE["d_model"], generator=torch.Generator().manual_seed(2)).to(dtype)
    want = norm(x)
    with IncrementalDecoder(model, 1, 4):
        got = norm(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = norm(x)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.equal(auto, want)


def test_stacked_mix_equals_per_source_mix() -> None:
    """Depth-Attention's no-grad (stacked) mix is the training mix's equation (GQA, 0-4 sources)."""
    from olmoablate.models.depth_attention import mix_values, mix_values_stacked

    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 5, 4, 8, generator=g)
    k, v = (torch.randn(2, 5, 2, 8, generator=g) for _ in range(2))
    for n in range(5):
        ks = tuple(torch.randn(2, 5, 2, 8, generator=g) for _ in range(n))
        vs = tuple(torch.randn(2, 5, 2, 8, generator=g) for _ in range(n))
        with torch.enable_grad():
            train = mix_values(q, k, v, ks, vs)
        with torch.no_grad():
            infer = mix_values(q, k, v, ks, vs)
        torch.testing.assert_close(infer, train, atol=1e-6, rtol=1e-6)
        if n:
            torch.testing.assert_close(mix_values_stacked(q, k, v, ks, vs), train)
            assert not torch.allclose(infer, v, atol=1e-3)  # the sources really mix in
