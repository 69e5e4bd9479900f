"""GPU check (not run in CI; no GPU was available when it was written): flash vs torch, step times.

1. For every variant, the same weights run with ``attn_backend="flash_2"`` and ``"torch"`` under
   bf16 autocast must give the same logits to bf16 tolerance (checks that Depth-Attention's mixing
   before the backend call and the looped/siamese forward do not break the flash path).
2. Forward+backward step time of each variant at the 1B preset's shape (d=2048, 16 layers,
   sequence 4096, batch 1, bf16 autocast, flash_2 when installed), as ratios to the baseline,
   next to the analytic FLOPs ratio.

Exits 0 with a "skipped" line when CUDA is not available.
Usage: ``python bench/gpu_check.py [--seq 4096] [--reps 10] [--layers 16]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from olmoablate.models import build_model

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "sn+da": {"siamese_norm": {}, "depth_attention": {"stride": 8, "recent_window": 0}},
    "looped K4 b4 T2": {"looped": {"body_layers": 4, "loops": 4, "tail": 2}},
}


def one_b(layers: int) -> dict[str, int]:
    return {
        "d_model": 2048,
        "n_layers": layers,
        "n_heads": 16,
        "n_kv_heads": 16,
        "mlp_hidden_size": 8192,
        "sliding_window": 4096,
        "vocab_size": 100352,
    }


def compare_backends(size: dict[str, int], seq: int) -> bool:
    from olmo_core.nn.attention import flash_attn_api

    if not flash_attn_api.has_flash_attn_2():
        print("flash-attn 2 not installed: backend comparison skipped")
        return True
    ok = True
    small = dict(size, n_layers=8, sliding_window=min(size["sliding_window"], seq // 4))
    ids = torch.randint(0, size["vocab_size"], (1, seq), device="cuda")
    for name, arch in VARIANTS.items():
        out = {}
        for backend in ("torch", "flash_2"):
            model = build_model(small, arch, init_seed=0, attn_backend=backend, device="cuda")
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                out[backend] = model(ids).float()
            del model
        diff = (out["torch"] - out["flash_2"]).abs().max().item()
        scale = out["torch"].abs().max().item()
        good = diff <= 2e-2 * max(1.0, scale)
        ok &= good
        print(
            f"{name:<18} flash vs torch max|diff| {diff:.3e} (logit scale {scale:.2f}) {'OK' if good else 'FAIL'}"
        )
    return ok


def step_times(size: dict[str, int], seq: int, reps: int) -> None:
    ids = torch.randint(0, size["vocab_size"], (1, seq), device="cuda")
    rows = []
    for name, arch in VARIANTS.items():
        model = build_model(size, arch, init_seed=0, device="cuda").train()
        times = []
        for i in range(reps + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            end.record()
            torch.cuda.synchronize()
            model.zero_grad(set_to_none=True)
            if i >= 2:
                times.append(start.elapsed_time(end) / 1e3)
        rows.append((name, min(times), model.num_flops_per_token(seq)))
        del model
        torch.cuda.empty_cache()
    base_t, base_f = rows[0][1], rows[0][2]
    print(f"{'variant':<18}{'step s':>9}{'time x':>8}{'FLOPs x':>9}")
    for name, t, f in rows:
        print(f"{name:<18}{t:>9.4f}{t / base_t:>8.3f}{f / base_f:>9.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: CUDA is not available")
        return 0
    size = one_b(args.layers)
    ok = compare_backends(size, min(args.seq, 1024))
    step_times(size, args.seq, args.reps)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
