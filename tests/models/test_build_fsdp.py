"""Each variant trains with OLMo-core's real Trainer on CPU, and 2-rank gloo FSDP == 1 process.

The training runs happen in subprocesses (this file is also the worker script): OLMo-core's
``prepare_training_environment`` changes process-global state (default device, logging, the
multiprocessing start method) that must not leak into the pytest process. One process trains all
variants in sequence so the ~6 s OLMo-core import is paid once per mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmoablate.testing import REPO

VARIANTS: dict[str, dict] = {
    "baseline": {},
    "sn_da": {"siamese_norm": {}, "depth_attention": {"stride": 2}},
    "sn_outnorm": {"siamese_norm": {"output_norms": True}},
    "looped": {
        "looped": {
            "body_layers": 4,
            "loops": 3,
            "tail": 2,
            "state_norm": True,
            "curriculum": {"start": 2, "increment": 1, "interval_steps": 2},
        },
        "depth_attention": {"stride": 3},
    },
    "layers": {"layers": {"n_layers": 4}},
}
SIZE = {
    "d_model": 64,
    "n_layers": 8,
    "n_heads": 4,
    "n_kv_heads": 2,
    "mlp_hidden_size": 128,
    "sliding_window": 16,
    "vocab_size": 1024,
}
STEPS = 4
SEQ = 64


def _worker(root: str, dp: str) -> None:
    """Train every variant for STEPS steps; rank 0 writes {variant: [CE loss per step]}."""
    from dataclasses import dataclass, field

    import numpy as np
    import torch
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.distributed.utils import get_rank
    from olmo_core.optim import AdamWConfig, CosWithWarmup
    from olmo_core.train import (
        Duration,
        TrainerConfig,
        prepare_training_environment,
        teardown_training_environment,
    )
    from olmo_core.train.callbacks import Callback, CheckpointerCallback
    from olmo_core.train.train_module import (
        TransformerDataParallelConfig,
        TransformerTrainModuleConfig,
    )

    from olmoablate.models.build import build_model_config

    torch.set_num_threads(1)
    prepare_training_environment(seed=0, backend=None if dp == "none" else "gloo")

    @dataclass
    class Capture(Callback):
        losses: dict[int, float] = field(default_factory=dict)
        loops: dict[int, int] = field(default_factory=dict)

        def pre_step(self, batch: dict) -> None:
            model = self.trainer.train_module.model
            if hasattr(model, "set_train_step"):
                self.loops[self.step] = model.set_train_step(self.step)
                self.trainer.train_module.num_flops_per_token.cache_clear()

        def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
            if "train/CE loss" in metrics:
                self.losses[step] = float(metrics["train/CE loss"])

    tokens = np.memmap(f"{root}/tokens.bin", dtype=np.uint16, mode="r")
    assert tokens.shape[0] > 0
    tok = TokenizerConfig(vocab_size=1024, eos_token_id=1022, pad_token_id=1023)
    results: dict[str, dict] = {}
    for name, arch in VARIANTS.items():
        model_cfg = build_model_config(SIZE, arch, init_seed=11)
        tm_cfg = TransformerTrainModuleConfig(
            rank_microbatch_size=2 * SEQ,
            max_sequence_length=SEQ,
            optim=AdamWConfig(lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95)),
            scheduler=CosWithWarmup(warmup_steps=1),
            max_grad_norm=1.0,
            z_loss_multiplier=1e-5,
            dp_config=None
            if dp == "none"
            else TransformerDataParallelConfig(name=DataParallelType(dp)),
        )
        capture = Capture()
        trainer_cfg = TrainerConfig(
            save_folder=f"{root}/{dp}/{name}/ckpt",
            save_overwrite=True,
            max_duration=Duration.steps(STEPS),
            metrics_collect_interval=1,
            cancel_check_interval=1,
        ).with_callback("checkpointer", CheckpointerCallback(enabled=False))
        trainer_cfg = trainer_cfg.with_callback("capture", capture)
        model = model_cfg.build(init_device="meta")
        train_module = tm_cfg.build(model)
        dataset = NumpyFSLDatasetConfig(
            paths=[f"{root}/tokens.bin"],
            sequence_length=SEQ,
            tokenizer=tok,
            work_dir=f"{root}/{dp}/{name}/ds",
        ).build()
        loader = NumpyDataLoaderConfig(global_batch_size=4 * SEQ, seed=7, num_workers=0).build(
            dataset, dp_process_group=train_module.dp_process_group
        )
        trainer = trainer_cfg.build(train_module, loader)
        trainer.fit()
        # OLMo-core keeps one global world mesh per process; the next variant builds its own.
        import olmo_core.distributed.parallel as parallel

        parallel._WORLD_MESH = None
        callback = trainer.callbacks["capture"]
        results[name] = {
            "losses": [callback.losses[s] for s in sorted(callback.losses)],
            "loops": [callback.loops[s] for s in sorted(callback.loops)],
            "flops": int(model.num_flops_per_token(SEQ)),
        }
    if get_rank() == 0:
        Path(f"{root}/losses_{dp}.json").write_text(json.dumps(results))
    teardown_training_environment()


def _make_tokens(root: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    # Learnable structure: short repeated motifs, so a few steps visibly lower the loss.
    motifs = rng.integers(0, 1000, size=(32, 8))
    seq = motifs[rng.integers(0, 32, size=4096)].reshape(-1)
    mm = np.memmap(root / "tokens.bin", dtype=np.uint16, mode="w+", shape=seq.shape)
    mm[:] = seq
    mm.flush()


def _run(cmd: list[str], root: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


@pytest.mark.slow
def test_variants_train_and_fsdp_matches_single_process(tmp_path: Path) -> None:
    _make_tokens(tmp_path)
    here = str(Path(__file__).resolve())
    _run([sys.executable, here, str(tmp_path), "none"], tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            here,
            str(tmp_path),
            "fsdp",
        ],
        tmp_path,
    )
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            here,
            str(tmp_path),
            "ddp",
        ],
        tmp_path,
    )
    single = json.loads((tmp_path / "losses_none.json").read_text())
    print("\nCE loss per step (1 process):", {k: v["losses"] for k, v in single.items()})
    for mode in ("fsdp", "ddp"):
        multi = json.loads((tmp_path / f"losses_{mode}.json").read_text())
        print(f"CE loss per step (2-rank {mode}):", {k: v["losses"] for k, v in multi.items()})
        for name in VARIANTS:
            a, b = single[name]["losses"], multi[name]["losses"]
            assert len(a) == STEPS and len(b) == STEPS, (name, a, b)
            assert all(x == x and x < 8.0 for x in a), (name, a)  # finite, < ln(1024) + margin
            assert a[-1] < a[0], (name, a)  # it learns
            for x, y in zip(a, b, strict=True):
                assert abs(x - y) <= 1e-4 * max(1.0, abs(x)), (mode, name, a, b)
            assert multi[name]["flops"] == single[name]["flops"]
    # the curriculum moved b during training: start 2, +1 every 2 steps
    assert single["looped"]["loops"] == [2, 2, 3, 3]


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
