"""Tests of olmoablate.run.trainer: the run entry -> OLMo-core config translation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from olmo_core.optim import (
    WSD,
    AdamWConfig,
    ConstantWithWarmup,
    CosWithWarmup,
    LinearWithWarmup,
    SkipStepAdamWConfig,
)

from olmoablate.errors import UserError
from olmoablate.run import trainer as cfgs
from olmoablate.run.runplan import load_run
from olmoablate.testing.plans import certify, make_plan, run_entry, typed

CPU = cfgs.Environment(device_type="cpu")


def _contexts(tmp_path: Path) -> tuple[Any, Any]:
    plan = make_plan(
        tmp_path,
        [
            run_entry("tiny-s0-baseline", "baseline", {}),
            run_entry("tiny-s0-da", "da", {"depth_attention": {"stride": 2, "recent_window": 0}}),
        ],
        train_tokens=2000,
        heldout_tokens=500,
    )
    return load_run(plan, "tiny-s0-baseline"), load_run(plan, "tiny-s0-da")


def _strip_run_dir(d: Any, run_id: str) -> Any:
    """Config dicts with the (per-run) cache directories normalized."""
    if isinstance(d, dict):
        return {k: _strip_run_dir(v, run_id) for k, v in d.items()}
    if isinstance(d, list):
        return [_strip_run_dir(v, run_id) for v in d]
    if isinstance(d, str):
        return d.replace(f"/runs/{run_id}/", "/runs/RUN/")
    return d


def test_arms_differ_only_in_the_model(tmp_path: Path) -> None:
    base, var = _contexts(tmp_path)
    for build in (
        lambda c: cfgs.train_module_config(c.run, CPU),
        cfgs.dataset_config,
        cfgs.data_loader_config,
        cfgs.eval_dataset_config,
    ):
        a = _strip_run_dir(build(base).as_config_dict(), base.run_id)
        b = _strip_run_dir(build(var).as_config_dict(), var.run_id)
        assert a == b
    mb = cfgs.model_config(base.run, CPU)
    mv = cfgs.model_config(var.run, CPU)
    assert mb.as_config_dict() != mv.as_config_dict()
    assert mb.init_seed == mv.init_seed == 0
    assert mb.d_model == 64 and mb.vocab_size == 1024


def test_train_module_settings_come_from_the_entry(tmp_path: Path) -> None:
    base, _ = _contexts(tmp_path)
    tm = cfgs.train_module_config(base.run, CPU)
    assert tm.rank_microbatch_size == 4 * 64 and tm.max_sequence_length == 64
    assert tm.max_grad_norm == 1.0 and tm.z_loss_multiplier == 1e-5
    assert tm.dp_config is None and tm.autocast_precision is None  # fp32, single process on CPU
    assert isinstance(tm.optim, AdamWConfig) and not isinstance(tm.optim, SkipStepAdamWConfig)
    assert tm.optim.lr == 0.01 and tm.optim.betas == (0.9, 0.95) and tm.optim.weight_decay == 0.1
    (override,) = tm.optim.group_overrides
    assert override.params == ["embeddings.weight"] and override.opts == {"weight_decay": 0.0}
    assert isinstance(tm.scheduler, CosWithWarmup)
    assert tm.scheduler.warmup == 2 and tm.scheduler.alpha_f == 0.1

    ds = cfgs.dataset_config(base)
    assert ds.paths == [str(base.workdir / "data" / "train.bin")] and ds.sequence_length == 64
    dl = cfgs.data_loader_config(base)
    assert dl.global_batch_size == 512 and dl.seed == 34521
    ev = cfgs.eval_dataset_config(base)
    assert ev.metadata == [{"label": "synthetic-heldout"}]


@pytest.mark.parametrize(
    ("schedule", "cls"),
    [
        ({"name": "linear", "warmup_steps": 3, "alpha_f": 0.0}, LinearWithWarmup),
        ({"name": "constant", "warmup_steps": 3}, ConstantWithWarmup),
        ({"name": "wsd", "warmup_steps": 3, "decay_fraction": 0.25, "alpha_f": 0.1}, WSD),
    ],
)
def test_schedules(schedule: dict[str, Any], cls: type) -> None:
    run = typed(run_entry("r", "baseline", {}, training={"schedule": schedule}))
    s = cfgs.scheduler(run)
    assert type(s) is cls and s.warmup == 3
    if cls is WSD:
        assert s.decay_fraction == 0.25 and s.decay_min_lr == pytest.approx(0.1 * 0.01)


def test_skip_step_and_decay_on_embeddings() -> None:
    run = run_entry(
        "r",
        "baseline",
        {},
        training={"optimizer": {"name": "skip_step_adamw", "no_decay_embeddings": False}},
    )
    opt = cfgs.optim_config(typed(run))
    assert isinstance(opt, SkipStepAdamWConfig) and opt.group_overrides is None


def test_parallelism_and_precision() -> None:
    run = run_entry("r", "baseline", {}, batch_seqs=8, micro_seqs=8)
    run["topology"]["data_parallel"] = "ddp"
    two = cfgs.Environment("cpu", world_size=2, distributed=True)
    ddp = cfgs.train_module_config(typed(run), two)
    assert ddp.dp_config is not None and ddp.dp_config.name == "ddp"
    assert ddp.rank_microbatch_size == 4 * 64  # clamped to the rank batch
    del run["topology"]["data_parallel"]  # the schema's default on one node: fsdp
    fsdp = cfgs.train_module_config(typed(run), two)
    assert fsdp.dp_config.name == "fsdp" and fsdp.dp_config.param_dtype is None  # fp32 on CPU
    run["topology"]["gpus_per_node"] = 1  # precision follows the plan's topology (auto -> bf16)
    gpu = cfgs.train_module_config(
        typed(run), cfgs.Environment("cuda", world_size=1, distributed=True)
    )
    assert gpu.dp_config.param_dtype == "bfloat16" and gpu.dp_config.reduce_dtype == "float32"
    with pytest.raises(UserError, match="cannot be split"):
        cfgs.train_module_config(
            typed(run), cfgs.Environment("cpu", world_size=3, distributed=True)
        )


def test_compile_setting_auto_true_false_and_certificate() -> None:
    run = run_entry("r", "baseline", {})
    assert run["training"]["compile"] == "auto"  # the schema's default, recorded by `plan`
    assert cfgs.train_module_config(typed(run), CPU).compile_model is False
    assert cfgs.compile_enabled(typed(run), cfgs.Environment("cuda")) is True
    before = run["certificate"]
    run["training"]["compile"] = True
    # OLMo-core never compiles without CUDA (validate refuses `true` on CPU): not claimed here
    assert cfgs.train_module_config(typed(run), CPU).compile_model is False
    assert cfgs.compile_enabled(typed(run), cfgs.Environment("cuda")) is True
    assert certify(run)["certificate"] != before  # both arms of a pair always compile alike
    run["training"]["compile"] = False
    assert cfgs.compile_enabled(typed(run), cfgs.Environment("cuda")) is False
