"""examples/denseformer: a model-level mixing block written from docs/blocks.md alone.

DenseFormer's depth-weighted average over the embeddings and every earlier block output (issue
35 case 16: the docs' second check). The job's own path: a plan entry with the block's code
identity, `run_job` proving params exactly and FLOPs against the formula before step 1, then
two training steps on the tiny CPU size; and the identity at init (the baseline's outputs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from olmoablate.testing import REPO

pytestmark = pytest.mark.slow
KEY = "denseformer:BLOCK"


@pytest.fixture(autouse=True)
def _on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(REPO / "examples" / "denseformer"))
    yield
    for name in [m for m in sys.modules if m == "denseformer" or m.startswith("denseformer.")]:
        sys.modules.pop(name)


def test_denseformer_passes_the_job_proof_and_trains(tmp_path: Path) -> None:
    import torch

    from olmoablate.models.build import build_model
    from olmoablate.plan import accounting as acc
    from olmoablate.plan.blocks import code_of
    from olmoablate.plan.sizes import resolve
    from olmoablate.run.job import run_job
    from olmoablate.testing.plans import TINY_DIMS, certify, make_plan, run_entry

    arch = {KEY: {}}
    dims = resolve(TINY_DIMS)
    L = dims.n_layers
    assert acc.param_count(dims, arch) - acc.param_count(dims, None) == L * (L + 3) // 2
    model, base = build_model(TINY_DIMS, arch, init_seed=1), build_model(TINY_DIMS, None, init_seed=1)
    ids = torch.randint(0, 1000, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # the identity mix at init: OLMo 3's outputs exactly
        assert torch.allclose(model(ids), base(ids), atol=1e-5)

    run = run_entry("tiny-s0-dwa", "dwa", arch, steps=2)
    run["code"] = code_of(arch)
    plan = make_plan(tmp_path, [certify(run)])
    status = run_job(str(plan), "tiny-s0-dwa")
    assert status["state"] == "completed" and status["step"] == 2, status
    rd = plan.parent / "runs" / "tiny-s0-dwa"
    proved = json.loads((rd / "proof.json").read_text())
    assert proved["unique_params"] == run["unique_params"]
    assert proved["counted_flops_per_token"] == proved["formula_flops_per_token"]
    assert list(proved["code"]) == [KEY]
