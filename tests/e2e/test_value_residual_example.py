"""examples/value-residual: a `module:attr` block written from docs/blocks.md alone.

Its equation (λ = 1 is the baseline, λ < 1 mixes in layer 0's values), the exact cost the job
proves (L − 1 parameters, the baseline's FLOPs as the counter sees them), decode == forward and
shared weights equal to the baseline's for the same seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from olmoablate.plan import accounting as acc
from olmoablate.plan.sizes import resolve
from olmoablate.testing import REPO

pytestmark = pytest.mark.slow
KEY = "value_residual:BLOCK"
TINY = {"d_model": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "mlp_hidden_size": 192,
        "sliding_window": 128, "vocab_size": 512}


@pytest.fixture(autouse=True)
def _on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "examples" / "value-residual"))


def test_value_residual_is_the_equation_and_costs_its_formula() -> None:
    import torch

    from olmoablate.models.build import build_model, build_model_config, param_counts
    from olmoablate.models.generate import greedy_decode
    from olmoablate.run.proof import PROOF_SEQ_LEN, measured_flops_per_token

    dims, arch = resolve(TINY), {KEY: {"init": 0.5}}
    model, base = build_model(TINY, arch), build_model(TINY, None)
    assert param_counts(model)["unique"] == acc.param_count(dims, arch) == (
        acc.param_count(dims, None) + dims.n_layers - 1
    )
    split = acc.flops_breakdown(dims, arch, PROOF_SEQ_LEN)
    assert measured_flops_per_token(build_model_config(TINY, arch)) == split.total - split.unseen
    shared = dict(base.named_parameters())
    for name, p in model.named_parameters():
        if name in shared:
            assert torch.equal(p, shared[name]), name
    prompt = torch.randint(0, 512, (2, 6), generator=torch.Generator().manual_seed(0))
    tokens, logits = greedy_decode(model, prompt, 4)
    with torch.no_grad():
        assert torch.allclose(model(tokens[:, :-1])[:, 5:], logits, atol=1e-5)
        mixed, plain = model(prompt), base(prompt)
        assert not torch.allclose(mixed, plain, atol=1e-3)
        for block in list(model.blocks.values())[1:]:
            block.attention.vr_lambda.fill_(1.0)
        assert torch.allclose(model(prompt), plain, atol=1e-5)


def test_value_residual_spec_validates_and_its_exclusions_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from olmoablate.errors import UserError
    from olmoablate.plan.arch import parse_architecture
    from olmoablate.testing import run_cli

    with pytest.raises(UserError, match="depth_attention"):
        parse_architecture({KEY: {}, "depth_attention": {"stride": 2}})
    here = [str(REPO / "examples" / "value-residual"), str(REPO)]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(here))
    out = run_cli("validate", "--skip-paths", str(REPO / "examples/value-residual/spec.yaml"),
                  cwd=tmp_path)
    assert out.returncode == 0 and "(2 runs, 1 pairs" in out.stdout, out.stdout + out.stderr
