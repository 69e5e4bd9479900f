"""Effective-depth diagnostic (`olmoablate.models.depth`) on tiny CPU models of the bundled blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from olmoablate.models.build import build_model
from olmoablate.models.depth import MARGIN_NATS, DepthProfile, depth_profile, first_within
from tests.models.test_build import ARCHS, SEQ, VOCAB, randomize, size

BUNDLED = ["baseline", "sn", "sn_outnorm", "da", "da_recent", "sn_da", "looped", "looped_da"]


def _ids(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))


def _own_ce(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    model.eval()
    with torch.no_grad():
        logits = model(ids)
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
    if mask is not None:
        ce = ce.masked_select(mask[:, 1:].flatten())
    return float(ce.mean())


@pytest.mark.parametrize("name", BUNDLED)
def test_last_layer_lens_equals_model_ce(name: str) -> None:
    dims = size(2)
    model = build_model(dims, ARCHS[name], init_seed=1)
    randomize(model)
    ids = _ids()
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 8:] = False  # padding: scored positions only
    prof = depth_profile(model, ids, mask)
    looped = "looped" in name
    n = ARCHS[name]["looped"]["loops"] if looped else dims["n_layers"] + 1
    assert prof.unit == ("loop" if looped else "layer") and len(prof.ce) == n
    assert prof.ce[-1] == pytest.approx(_own_ce(model, ids, mask), abs=1e-5)
    # the model's own loss path (OLMo-core LM head with labels) agrees too, unmasked
    full = depth_profile(model, ids)
    labels = F.pad(ids[:, 1:], (0, 1), value=-100)
    with torch.no_grad():
        out = model(ids, labels=labels)
    assert full.ce[-1] == pytest.approx(float(out.ce_loss), abs=1e-5)
    if "da" in name:
        metrics = prof.metrics("x")
        weights = {k: v for k, v in metrics.items() if "/da_" in k}
        assert weights and all(0.0 <= v <= 1.0 for v in weights.values())
        assert model.depth_weights is None  # recording switched off again


def test_weights_sum_to_one_per_layer() -> None:
    """Per layer, own weight + weights on its sources sum to 1 (the recorded α is the softmax)."""
    model = build_model(size(2), ARCHS["da_recent"], init_seed=1)
    randomize(model)
    model.depth_weights = {}
    with torch.no_grad():
        model(_ids())
    for _u, (_src, alpha) in model.depth_weights.items():
        torch.testing.assert_close(alpha.sum(dim=0), torch.ones_like(alpha[0]))
    model.depth_weights = None


def test_recording_does_not_change_the_output() -> None:
    model = build_model(size(2), ARCHS["sn_da"], init_seed=1)
    randomize(model)
    model.eval()
    ids = _ids()
    with torch.no_grad():
        plain = model(ids)
        model.depth_weights = {}
        recorded = model(ids)
        model.depth_weights = None
    assert torch.equal(plain, recorded)


def _identity_upper_half(model: torch.nn.Module, n_layers: int) -> None:
    """Blocks n/2.. add 0 to the residual stream: zero attention and MLP output projections.
    SiameseNorm's X renormalisation (x_norm) is made scale-only (weight 1): the final merge's
    RMSNorm_fx is scale invariant, so the output is unchanged by those blocks too."""
    with torch.no_grad():
        for i in range(n_layers // 2, n_layers):
            blk = model.blocks[str(i)]
            blk.attention.w_out.weight.zero_()
            blk.feed_forward.w2.weight.zero_()
            if hasattr(blk, "x_norm"):
                blk.x_norm.weight.fill_(1.0)


@pytest.mark.parametrize("name", ["baseline", "sn", "da", "sn_da"])
def test_identity_upper_half_flattens_profile(name: str) -> None:
    dims = size(2)
    n = dims["n_layers"]
    model = build_model(dims, ARCHS[name], init_seed=1)
    randomize(model)
    _identity_upper_half(model, n)
    ce = depth_profile(model, _ids()).ce
    upper = ce[n // 2 :]  # layer_{n/2} (after the last working block) .. layer_n
    assert max(upper) - min(upper) < 1e-4, ce
    lower = ce[: n // 2 + 1]
    assert max(lower) - min(lower) > 1e-2, ce  # the working half does change the prediction
    assert first_within(ce) <= n // 2


def test_first_within_margin() -> None:
    assert first_within([]) is None
    assert first_within([5.0, 4.0, 3.04, 3.0]) == 2  # 0.04 <= MARGIN_NATS
    assert first_within([5.0, 3.0 + 2 * MARGIN_NATS, 3.0]) == 2
    assert first_within([3.0]) == 0


def test_profiles_add_as_token_weighted_means() -> None:
    a = DepthProfile(ce_sum=[4.0, 2.0], tokens=2.0, da_sum={0: 1.0}, da_n={0: 2.0})
    b = DepthProfile(ce_sum=[2.0, 1.0], tokens=2.0, da_sum={0: 0.0}, da_n={0: 2.0})
    total = DepthProfile()
    total.add(a)
    total.add(b)
    assert total.ce == [1.5, 0.75]
    m = total.metrics("s")
    assert m["eval/depth/s/layer_0 CE"] == 1.5
    assert m["eval/depth/s/da_weight_0"] == 0.25
    assert m[f"eval/depth/s/first_within_{MARGIN_NATS:g}"] == 1.0
