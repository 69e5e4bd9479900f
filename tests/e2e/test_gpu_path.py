"""The GPU path on a CPU box: device placement, precision/backend pairing, HSDP, true step timing,
stability and decode under distribution, activation checkpointing, validate's GPU checks.

No GPU is used. Device placement runs submitit's real job environments (Slurm variables of a
task with local rank > 0; the real local executor with several GPU jobs in parallel); the
train-module tests build OLMo-core configs for CUDA environments; the timing test swaps in a
fake ``torch.cuda`` (events that report a known time); a real 2-rank gloo FSDP2 job trains with
bf16 parameters through the project's own train-module config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from olmoablate.errors import UserError
from olmoablate.plan.metrics import CE_LOSS
from olmoablate.plan.planfile import RunEntry
from olmoablate.run import guards, records
from olmoablate.run import slurm as devices
from olmoablate.run import trainer as cfgs
from olmoablate.testing import REPO
from olmoablate.testing.plans import certify, make_plan, run_entry, typed

CLI = [sys.executable, "-m", "olmoablate"]


@pytest.fixture
def clean_env() -> Any:
    """setup_distributed_env writes os.environ directly; restore it afterwards."""
    saved = dict(os.environ)
    for key in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        os.environ.pop(key, None)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


# ----------------------------------------------------------------------------- 1: device placement


def test_slurm_task_with_local_rank_1_keeps_all_node_gpus(clean_env: Any) -> None:
    """Defect 1: rank 9 = node 1, local rank 1 of 8 GPU tasks. Its cuda:1 must exist."""
    from olmoablate.run.task import setup_distributed_env

    clean_env.update(
        SUBMITIT_EXECUTOR="slurm",
        SLURM_JOB_ID="42",
        SLURM_NTASKS="16",
        SLURM_NNODES="2",
        SLURM_JOB_NUM_NODES="2",
        SLURM_NODEID="1",
        SLURM_PROCID="9",
        SLURM_LOCALID="1",
        SLURM_JOB_NODELIST="gpu[01-02]",
        SLURMD_NODENAME="gpu02",
        CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7",
    )
    exported = setup_distributed_env(on_gpu=True)
    assert exported["RANK"] == "9" and os.environ["LOCAL_RANK"] == "1"
    visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(visible) == 8, visible  # not narrowed to the local rank's single GPU
    assert int(os.environ["LOCAL_RANK"]) < len(visible)  # OLMo-core's cuda:LOCAL_RANK is valid
    assert devices.task_device(1, 8, os.environ) == "cuda:1"


def test_per_task_gpu_binding_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="must see all of the node's GPUs"):
        devices.task_device(3, 8, {"CUDA_VISIBLE_DEVICES": "3"})


def test_local_gpu_slots_and_capacity() -> None:
    visible = devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert visible == ["4", "5", "6", "7"]
    assert [devices.local_slot_devices(visible, 2, s) for s in (0, 1)] == ["4,5", "6,7"]
    assert devices.local_slot_devices(visible, 0, 1) == ""  # CPU runs never see a GPU
    assert devices.check_local_capacity(visible, 2, 2) == 2
    with pytest.raises(UserError, match=r"--parallel 3 .*\(allowed: --parallel <= 2\)"):
        devices.check_local_capacity(visible, 2, 3)
    with pytest.raises(UserError, match="only 0 GPU"):
        devices.check_local_capacity([], 1, 1)


def test_local_executor_parallel_gpu_jobs_get_their_own_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 2: two 2-GPU jobs with --parallel 2 on a node whose 4 GPUs are visible. Each job's
    tasks see that job's own 2 GPUs (not "" and not the same GPU), local rank r -> cuda:r."""
    from olmoablate.plan.layout import ResultsDir
    from olmoablate.run.submit import submit

    runs = [
        run_entry(rid, arm, arch, steps=1)
        for rid, arm, arch in (
            ("g-base", "baseline", {}),
            ("g-var", "v", {"layers": {"n_layers": 1}}),
        )
    ]
    for r in runs:
        r["topology"]["gpus_per_node"] = 2
    plan_path = make_plan(tmp_path, runs)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    submit(
        ResultsDir(plan_path.parent),
        "local",
        parallel=2,
        target="olmoablate.testing.cluster:record",
        progress=False,
    )
    slots = []
    for r in runs:
        seen = [
            json.loads((plan_path.parent / "runs" / r["run_id"] / f"env-rank{k}.json").read_text())
            for k in range(2)
        ]
        assert {s["CUDA_VISIBLE_DEVICES"] for s in seen} in ({"0,1"}, {"2,3"}), seen
        assert sorted(s["device"] for s in seen) == ["cuda:0", "cuda:1"]
        slots.append(seen[0]["CUDA_VISIBLE_DEVICES"])
    assert sorted(slots) == ["0,1", "2,3"]  # the two concurrent jobs never share a GPU


# ----------------------------------------------------------------------------- 3, 4: precision


def _gpu_run(dp: str, precision: str = "auto", nodes: int = 1, **topo: Any) -> RunEntry:
    """A GPU run as `plan` records it from a spec with this topology (GPU defaults resolved)."""
    run = run_entry("r", "baseline", {}, batch_seqs=16, micro_seqs=1)
    run["topology"] = {"nodes": nodes, "gpus_per_node": 8, "data_parallel": dp, **topo}
    run["training"]["precision"] = precision
    return typed(run)


def test_ddp_on_cuda_trains_in_bf16_autocast() -> None:
    """Defect 3: DDP on CUDA (always distributed) used to get neither autocast nor bf16 params."""
    tm = cfgs.train_module_config(_gpu_run("ddp"), cfgs.Environment("cuda", 8, True))
    assert tm.dp_config.name == "ddp" and tm.dp_config.param_dtype is None  # fp32 master weights
    assert tm.autocast_precision == "bfloat16"
    fp32 = cfgs.train_module_config(_gpu_run("ddp", "fp32"), cfgs.Environment("cuda", 8, True))
    assert fp32.autocast_precision is None and fp32.dp_config.param_dtype is None
    fsdp = cfgs.train_module_config(_gpu_run("fsdp"), cfgs.Environment("cuda", 8, True))
    assert fsdp.dp_config.param_dtype == "bfloat16" and fsdp.autocast_precision is None
    assert fsdp.dp_config.reduce_dtype == "float32" and fsdp.dp_config.wrapping_strategy == "blocks"


def test_single_process_bf16_autocast_config_builds() -> None:
    """The autocast dtype must be an OLMo-core DType (a torch.dtype crashed in build())."""
    from olmoablate.models.build import build_model_config

    run = typed(run_entry("r", "baseline", {}, training={"precision": "bf16"}))
    tm = cfgs.train_module_config(run, cfgs.Environment("cpu"))
    model = build_model_config(run.size_dims, {}, attn_backend="torch").build(init_device="meta")
    assert tm.build(model).autocast_precision is torch.bfloat16


def test_flash_attention_is_never_paired_with_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_core.nn.attention import flash_attn_api

    monkeypatch.setattr(flash_attn_api, "has_flash_attn_2", lambda: True)
    cuda = cfgs.Environment("cuda", 8, True)
    assert cfgs.attention_backend(_gpu_run("fsdp", "bf16"), cuda) == "flash_2"
    assert cfgs.attention_backend(_gpu_run("fsdp", "fp32"), cuda) == "torch"  # auto + fp32
    assert cfgs.attention_backend(_gpu_run("fsdp", "bf16"), cfgs.Environment("cpu")) == "torch"
    with pytest.raises(UserError, match="does not run in fp32"):
        cfgs.attention_backend(_gpu_run("fsdp", "fp32", attention_backend="flash_2"), cuda)
    run = _gpu_run("fsdp", "bf16", attention_backend="flash_3")
    assert cfgs.attention_backend(run, cuda) == "flash_3"


def test_hsdp_builds_one_replica_per_node() -> None:
    """Defect 4: hsdp validated but every job failed at start."""
    run = _gpu_run("hsdp", nodes=2)
    tm = cfgs.train_module_config(run, cfgs.Environment("cuda", 16, True))
    dp = tm.dp_config
    assert dp.name == "hsdp" and dp.num_replicas == 2 and dp.param_dtype == "bfloat16"
    assert dp.get_replicate_and_shard_degree(16) == (2, 8)


def test_activation_checkpointing_and_official_intervals() -> None:
    run = _gpu_run("fsdp", activation_checkpointing="full")
    tm = cfgs.train_module_config(run, cfgs.Environment("cuda", 8, True))
    assert tm.ac_config is not None and tm.ac_config.mode == "full"
    assert cfgs.trainer_intervals(run) == {
        "metrics_collect_interval": 10,
        "cancel_check_interval": 10,
    }
    assert run.topology.data_workers == 8
    cpu = typed(run_entry("r", "baseline", {}))
    assert cfgs.trainer_intervals(cpu)["metrics_collect_interval"] == 1
    assert cpu.topology.data_workers == 0


# ----------------------------------------------------------------------------- validate


def _spec(tmp_path: Path, topology: str, training: str = "", seq: int = 64) -> Path:
    text = f"""
name: g
sizes: [tiny]
custom_sizes:
  tiny: {{d_model: 64, n_layers: 4, n_heads: 4, mlp_hidden_size: 128, sliding_window: 32, vocab_size: 100352}}
variants: {{da: {{depth_attention: {{stride: 2}}}}}}
training:
  sequence_length: {seq}
  tokens: 65536
  global_batch_size: {seq * 16}
  optimizer: {{lr: 0.001}}
  data: {{paths: [x.bin]}}
  {training}
topology: {topology}
"""
    p = tmp_path / "g.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("topology", "training", "message"),
    [
        (
            "{gpus_per_node: 8, attention_backend: flash_2}",
            "precision: fp32",
            "does not run in fp32",
        ),
        ("{gpus_per_node: 0, attention_backend: flash_2}", "", "needs CUDA GPUs"),
        ("{gpus_per_node: 8, nodes: 1, data_parallel: hsdp}", "", "needs nodes >= 2"),
        ("{gpus_per_node: 0}", "compile: true", "compile=true needs CUDA GPUs"),
    ],
)
def test_validate_rejects_impossible_gpu_combinations(
    tmp_path: Path, topology: str, training: str, message: str
) -> None:
    proc = subprocess.run(
        [*CLI, "validate", str(_spec(tmp_path, topology, training))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    field = "training.compile" if "compile" in message else "topology."
    assert len(lines) == 1 and message in lines[0] and field in lines[0], proc.stderr


def test_validate_warns_when_swa_is_inactive(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*CLI, "validate", str(_spec(tmp_path, "{gpus_per_node: 0}", seq=32))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "SWA inactive: every layer is full" in proc.stderr
    ok = subprocess.run(
        [*CLI, "validate", str(_spec(tmp_path, "{gpus_per_node: 0}", seq=64))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and "SWA inactive" not in ok.stderr


def test_shipped_gpu_specs_use_olmo3_context_and_window() -> None:
    from olmoablate.plan.load import load_spec

    for name in ("siamese_depth_attention", "looped_olmo"):
        ls = load_spec(REPO / "specs" / f"{name}.yaml")
        assert not ls.warnings
        for size in ("1B", "3B", "7B"):
            st = ls.per_size[size]
            assert st.training.sequence_length == 8192 and ls.dims[size].sliding_window == 4096
            assert st.topology.data_parallel == "hsdp" and st.topology.fsdp_wrapping == "blocks"
            assert st.topology.metrics_interval == 10 and st.topology.data_workers == 8


# ----------------------------------------------------------------------------- 5: timing


class _FakeTrainer:
    def __init__(self, interval: int = 1, max_steps: int = 100) -> None:
        self.global_step = 0
        self.metrics_collect_interval = interval
        self.max_steps = max_steps
        self.callbacks: dict[str, Any] = {}
        self.dp_process_group = None
        self.device = torch.device("cpu")
        self.metrics: dict[str, Any] = {}
        self.cancelled: list[str] = []

    def get_metric(self, name: str) -> Any:
        return self.metrics.get(name)

    def cancel_run(self, reason: str, no_sync: bool = False) -> None:
        self.cancelled.append(reason)

    def record_metric(self, name: str, value: Any, reduce_type: Any = None) -> None:
        self.metrics[name] = (value, reduce_type)


class _FakeEvent:
    log: list[str] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.synced = False

    def record(self) -> None:
        _FakeEvent.log.append("record")

    def synchronize(self) -> None:
        self.synced = True
        _FakeEvent.log.append("synchronize")

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert end.synced, "elapsed_time read before the end event completed"
        return 250.0  # ms: what the GPU took, whatever the host clock says


def test_step_time_comes_from_synchronised_cuda_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 5: under (fake) CUDA the host clock only measures kernel queueing."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 0)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    _FakeEvent.log = []
    cb = records.MetricsJSONLCallback(path=str(tmp_path / "m.jsonl"), global_batch_size=8)
    cb.trainer = _FakeTrainer()  # type: ignore[assignment]
    cb.pre_train()
    for step in (1, 2):
        cb.trainer.global_step = step
        cb.pre_step({})
        cb.post_train_batch()
    assert "synchronize" not in _FakeEvent.log  # no per-step host sync
    for step in (1, 2):
        cb.log_metrics(step, {"train/CE loss": 1.0})
    cb.close()
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step_time_s"] for r in rows] == [0.25, 0.25]
    assert [r["step_in_attempt"] for r in rows] == [1, 2]


def test_step_events_inserted_while_the_bookkeeping_thread_resolves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27, 6: OLMo-core calls ``log_metrics`` from its bookkeeping thread, which resolves
    the pending CUDA events while the main thread records the next steps' events. A bare dict
    raised "dictionary changed size during iteration" there on one rank (the others then wait in
    collectives). Here the two threads run flat out with Python switching threads every
    microsecond; every step must end up resolved exactly once."""
    import threading

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: 0)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    _FakeEvent.log = []
    cb = records.MetricsJSONLCallback(path=str(tmp_path / "m.jsonl"), global_batch_size=8)
    cb.trainer = _FakeTrainer()  # type: ignore[assignment]
    cb.pre_train()
    n_steps = 20_000
    errors: list[BaseException] = []
    done = threading.Event()

    def bookkeeping() -> None:
        try:
            while not done.is_set():
                cb._resolve_events(cb.trainer.global_step // 2)  # lags behind the main thread
        except BaseException as err:  # noqa: BLE001 - the failure under test
            errors.append(err)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=bookkeeping)
    thread.start()
    try:
        for step in range(1, n_steps + 1):
            cb.trainer.global_step = step
            cb.pre_step({})
            cb.post_train_batch()
            if errors:
                break
    finally:
        done.set()
        thread.join()
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    cb._resolve_events(n_steps)
    assert len(cb.step_times) == n_steps and not cb._events


# ----------------------------------------------------------------------------- 6: stability


def test_stability_without_grad_norm_keeps_the_loss_device() -> None:
    """Defect 6: no grad-norm metric (grad_clip null) + a loss on another device (meta stands in
    for CUDA) used to stack a CPU zero with it."""
    loss = torch.tensor(2.0, device="meta")
    flags = guards.nonfinite_flags([loss, None])
    assert flags.device.type == "meta" and flags.shape == (2,)
    cb = guards.StabilityCallback()
    cb.trainer = _FakeTrainer(interval=10)  # type: ignore[assignment]
    cb.pre_train()
    cb.trainer.global_step = 2  # not a collect step: flags stay on the device, no sync
    cb.trainer.metrics = {CE_LOSS: loss}
    cb.post_train_batch()
    cb.trainer.global_step = 10  # collect step, CPU values: one check for steps 2..10
    cb._flags = [(s, f, v) for s, f, v in cb._flags if f.device.type != "meta"]
    cb.trainer.metrics = {CE_LOSS: torch.tensor(float("nan"))}
    cb.post_train_batch()
    assert cb.diverged_at_step == 10 and "non-finite train/CE loss" in (cb.reason or "")
    assert cb.trainer.cancelled


def test_fingerprints_are_gathered_at_metrics_steps_only(tmp_path: Path) -> None:
    path = tmp_path / "fp.jsonl"
    cb = records.FingerprintCallback(path=str(path), global_batch_size=4)
    cb.trainer = _FakeTrainer(interval=5, max_steps=7)  # type: ignore[assignment]
    cb.pre_train()
    batches = {
        s: torch.randint(0, 100, (2, 3), generator=torch.Generator().manual_seed(s))
        for s in range(1, 8)
    }
    counts = []
    for s in range(1, 8):
        cb.trainer.global_step = s
        cb.pre_step({"input_ids": batches[s]})
        cb.post_train_batch()
        counts.append(len(path.read_text().splitlines()) if path.exists() else 0)
    assert counts == [1, 1, 1, 1, 5, 5, 7]  # first step, every 5th, the last
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["sha256"] for r in rows] == [records.global_batch_sha256(batches[s]) for s in range(1, 8)]


# ----------------------------------------------------------------------------- activation memory


def _saved_bytes(model: Any, ids: torch.Tensor) -> tuple[int, list[torch.Tensor]]:
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels=ids).loss
    loss.backward()
    return total, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_depth_attention_activation_checkpointing_saves_memory_same_grads() -> None:
    from olmo_core.nn.transformer.config import TransformerActivationCheckpointingMode

    from olmoablate.models.build import build_model_config

    dims = {
        "d_model": 64,
        "n_layers": 8,
        "n_heads": 4,
        "n_kv_heads": 4,
        "mlp_hidden_size": 128,
        "sliding_window": 16,
        "vocab_size": 256,
    }
    arch = {"depth_attention": {"stride": 2, "recent_window": 1}}
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    results = []
    for ac in (False, True):
        model = build_model_config(dims, arch, attn_backend="torch", init_seed=3).build(
            init_device="cpu"
        )
        model.init_weights(device=torch.device("cpu"), max_seq_len=32)
        if ac:
            model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.full)
        results.append(_saved_bytes(model, ids))
    (plain, g0), (ckpt, g1) = results
    assert ckpt < plain / 2, (plain, ckpt)
    assert len(g0) == len(g1) and all(
        torch.allclose(a, b, atol=1e-6) for a, b in zip(g0, g1, strict=True)
    )


# ----------------------------------------------------------------------------- FSDP2 bf16, 7


@pytest.mark.slow
def test_two_rank_gloo_fsdp_bf16_params_and_decode(tmp_path: Path) -> None:
    """A real 2-rank gloo FSDP2 job with bf16 parameter dtype through the project's config:
    it computes in bf16 and, although distributed, records decode figures (defect 7)."""
    entry = run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        steps=3,
        evaluation={"interval": 3},
        training={"precision": "bf16"},
    )
    entry["topology"].update(cpu_processes=2, data_parallel="fsdp")
    plan = make_plan(tmp_path, [certify(entry)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "olmoablate.run.job",
            str(plan),
            "tiny-s0-baseline",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run_dir = plan.parent / "runs" / "tiny-s0-baseline"
    summary = json.loads((run_dir / "summary.json").read_text())
    ex = summary["execution"]
    assert summary["state"] == "completed" and ex["world_size"] == 2
    assert ex["data_parallel"] == "fsdp" and ex["param_dtype"] == "bfloat16"
    assert ex["compute_dtype"] == "bfloat16" and ex["autocast_dtype"] is None
    assert summary["decode_latency_s"] > 0 and summary["kv_cache_bytes"] > 0
    assert len((run_dir / "fingerprints.jsonl").read_text().splitlines()) == 3


def test_a_compile_request_the_cpu_job_cannot_honour_is_recorded(tmp_path: Path) -> None:
    """Issue 27, 9: a plan saying ``compile: true`` (made before validate refused it on CPU)
    trains eagerly on the CPU, and summary.json says so instead of only a buried log line."""
    from olmoablate.run.job import run_job

    entry = run_entry(
        "tiny-s0-baseline",
        "baseline",
        {},
        steps=2,
        evaluation={"interval": 2},
        training={"compile": True},
    )
    plan = make_plan(tmp_path, [certify(entry)], train_tokens=6_000, heldout_tokens=1_000)
    assert run_job(str(plan), "tiny-s0-baseline")["state"] == "completed"
    run_dir = plan.parent / "runs" / "tiny-s0-baseline"
    ex = json.loads((run_dir / "summary.json").read_text())["execution"]
    assert ex["compile"] == {"requested": True, "compiled": False, "how": None}
    assert ex["gpu_model"] is None and ex["attention_backend"] == "TorchAttentionBackend"
