"""torch.compile of every variant: compiled == eager, no graph breaks, bounded recompiles.

Why these tests exist: the gate charges every step-time overhead to the architecture, so each
variant must compile as well as the baseline - one graph per *kind* of block, never one per layer
(a Python float or dict in the block would guard per layer and, past dynamo's recompile limit,
silently run the remaining layers eagerly). Inductor on this CPU takes tens of seconds per
graph (gcc), so the models are tiny (4 layers), each test compiles once and trains a few steps, and
only SiameseNorm + Depth-Attention (whose blocks hold every new kernel: the four norms, γ, the
stream updates and the depth mix) goes through inductor's code generation; the other variants
compile with dynamo + AOTAutograd (``aot_eager``), which is where graph breaks, guards and
recompiles are decided, so every graph property below is the one a GPU run gets.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from olmoablate.models.build import build_model
from olmoablate.models.transformer import block_signatures, compile_graph_bound

pytestmark = pytest.mark.slow

SIZE = {
    "d_model": 16,
    "n_layers": 4,
    "n_heads": 2,
    "n_kv_heads": 1,  # GQA: also covers Depth-Attention's group-mean query
    "mlp_hidden_size": 16,
    "sliding_window": 4,
    "vocab_size": 32,
}

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "siamese_norm": {"siamese_norm": {}},
    "depth_attention": {"depth_attention": {"stride": 2, "recent_window": 1}},
    "sn+da": {"siamese_norm": {}, "depth_attention": {"stride": 2}},
}


#: The variant that also runs through inductor's C++ code generation (see the module docstring).
INDUCTOR = "sn+da"


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """``inductor`` for :data:`INDUCTOR`, else route every torch.compile to ``aot_eager``."""
    name = getattr(request, "param", None) or request.node.callspec.params.get("name", "")
    if name == INDUCTOR:
        return "inductor"
    real_compile, real_module_compile = torch.compile, torch.nn.Module.compile

    def compile_fn(*args: Any, **kwargs: Any) -> Any:
        kwargs["backend"] = "aot_eager"
        return real_compile(*args, **kwargs)

    def module_compile(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        kwargs["backend"] = "aot_eager"
        real_module_compile(self, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", compile_fn)
    monkeypatch.setattr(torch.nn.Module, "compile", module_compile)
    return "aot_eager"


def _counters() -> Any:
    from torch._dynamo.utils import counters

    return counters


def _pair(arch: dict[str, Any]) -> tuple[torch.nn.Module, torch.nn.Module]:
    import torch._dynamo

    torch._dynamo.reset()
    _counters().clear()
    eager = build_model(SIZE, arch).train()
    compiled = build_model(SIZE, arch).train()
    compiled.load_state_dict(eager.state_dict())
    compiled.apply_compile()  # type: ignore[operator]
    return eager, compiled


def _step(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    out = model(ids, labels=ids)
    out.loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return float(out.loss), grads


def _assert_same(eager: torch.nn.Module, compiled: torch.nn.Module, ids: torch.Tensor) -> None:
    le, ge = _step(eager, ids)
    lc, gc = _step(compiled, ids)
    assert lc == pytest.approx(le, rel=1e-5, abs=1e-6)
    for a, b in zip(ge, gc, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def _graphs() -> int:
    return int(_counters()["stats"]["unique_graphs"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_compiled_equals_eager(name: str, backend: str) -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, SIZE["vocab_size"], (2, 8))
    eager, compiled = _pair(VARIANTS[name])
    for _ in range(2):  # the second step sees OLMo-core's filled RoPE cache (one more graph)
        _assert_same(eager, compiled, ids)
    assert not _counters()["graph_break"], dict(_counters()["graph_break"])
    graphs = _graphs()
    assert 0 < graphs <= compile_graph_bound(compiled)
    # one graph per kind of block (x2: before/after OLMo-core's RoPE cache fills), plus the LM
    # head and SiameseNorm's merge - never one per layer
    kinds = len(block_signatures(compiled))
    assert graphs <= 2 * (kinds + 2)
    if name != "baseline" and kinds < SIZE["n_layers"]:
        assert graphs < 2 * (SIZE["n_layers"] + 1)  # fewer graphs than block calls + LM head
    _assert_same(eager, compiled, ids)
    assert _graphs() == graphs, "a steady-state step recompiled"


@pytest.mark.parametrize("backend", ["aot_eager"], indirect=True)
def test_looped_curriculum_compiles_a_bounded_number_of_graphs(backend: str) -> None:
    """Looped + Depth-Attention under a loop curriculum b = 1, 2, 2, ...: the no-grad prefix
    appears at b = 2 and the depth sources grow with b; the graphs stay within the bound."""
    arch = {
        "looped": {
            "body_layers": 4,
            "loops": 2,
            "tail": 1,
            "state_norm": True,
            "curriculum": {"start": 1, "increment": 1, "interval_steps": 1},
        },
        "depth_attention": {"stride": 2},
    }
    torch.manual_seed(0)
    ids = torch.randint(0, SIZE["vocab_size"], (2, 8))
    eager, compiled = _pair(arch)
    counts = []
    for step in range(1, 5):  # OLMo-core's 1-based steps
        for m in (eager, compiled):
            m.set_train_step(step)  # type: ignore[operator]
        _assert_same(eager, compiled, ids)
        counts.append(_graphs())
    assert [int(compiled.current_loops)] == [2]  # type: ignore[union-attr]
    assert not _counters()["graph_break"], dict(_counters()["graph_break"])
    assert counts[-1] <= compile_graph_bound(compiled)
    assert counts[-1] == counts[-2], f"steady state at b=2 still recompiles: {counts}"
    # evaluation (no grad, final loop's logits) agrees too
    eager.eval()
    compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), eager(ids), rtol=1e-4, atol=1e-5)


def test_depth_attention_records_only_layers_read_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer whose (k, ṽ) no later layer mixes in is not recorded (in a compiled block it would
    be a graph output with a zero-filled gradient); the forward and gradients are unchanged."""
    from olmoablate.models.depth_attention import DepthState, read_later

    arch = {"depth_attention": {"stride": 8, "recent_window": 0}}
    model = build_model({**SIZE, "n_layers": 8}, arch).train()
    da = model.arch.depth_attention  # type: ignore[union-attr]
    assert read_later(da, 8) == {0}
    state = DepthState(da, 8)
    assert [state.slot(0).keep] == [True]
    da2 = build_model(SIZE, VARIANTS["depth_attention"]).arch.depth_attention  # type: ignore[union-attr]
    assert read_later(da2, 4) == {0, 1, 2}  # stride 2, recent 1: layer 3 is read by nobody
    # signatures: layer 0 kept (no sources), layers 1-7 read one source and are not kept
    assert {(n, keep) for _, n, keep, _ in block_signatures(model)} == {(0, True), (1, False)}

    ids = torch.randint(0, SIZE["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(0))
    loss, grads = _step(model, ids)
    real_init = DepthState.__init__

    def keep_all(self: DepthState, settings: Any, depth: int | None = None) -> None:
        real_init(self, settings, None)

    monkeypatch.setattr(DepthState, "__init__", keep_all)
    loss_all, grads_all = _step(model, ids)
    assert loss == loss_all
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_all, strict=True))


class _Module:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model


class _Trainer:
    """What the job's model-touching callbacks read from OLMo-core's Trainer."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.train_module = _Module(model)
        self.global_step = 0
        self.metrics: dict[str, float] = {}

    def record_metric(self, name: str, value: float) -> None:
        self.metrics[name] = value


@pytest.mark.parametrize("backend", ["aot_eager"], indirect=True)
def test_job_callbacks_keep_one_graph_per_block(backend: str) -> None:
    """Issue 27, 3: the job's callbacks attached (the compute-dtype probe hooks the first linear
    layer of the model, inside a compiled block; the loop curriculum sets b): the compiled model
    still has no graph break and one graph per kind of block, and the probe records the dtype.
    The probe used to remove its hook from inside the forward: dynamo broke the first block's
    graph there, and the split code (module hooks are not guarded) served every block."""
    from olmoablate.run.callbacks import LoopCurriculumCallback
    from olmoablate.run.guards import ComputeDtypeCallback

    torch.manual_seed(0)
    ids = torch.randint(0, SIZE["vocab_size"], (2, 8))
    eager, compiled = _pair(VARIANTS["baseline"])
    trainer = _Trainer(compiled)
    probe, curriculum = ComputeDtypeCallback(), LoopCurriculumCallback()
    for cb in (probe, curriculum):
        cb.trainer = trainer  # type: ignore[assignment]
        cb.pre_train()
    counts = []
    for step in (1, 2, 3):
        trainer.global_step = step
        for cb in (probe, curriculum):
            cb.pre_step({"input_ids": ids})
        _assert_same(eager, compiled, ids)
        for cb in (probe, curriculum):
            cb.post_train_batch()
        counts.append(_graphs())
    assert probe.compute_dtype == "float32" and probe._handle is None
    assert counts[1] == counts[2], f"removing the probe recompiled: {counts}"
    assert not _counters()["graph_break"], dict(_counters()["graph_break"])
    kinds = len(block_signatures(compiled))
    assert 0 < _graphs() <= 2 * (kinds + 2), _graphs()
