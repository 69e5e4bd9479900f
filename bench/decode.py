"""CPU decode benchmark: per-token latency and KV-cache bytes per variant, as ratios to baseline.

Uses :func:`olmoablate.models.generate.IncrementalDecoder` (our per-virtual-layer KV cache). For
each variant: prefill a prompt, then decode ``--new`` tokens one at a time; the latency is this
process's CPU time per decoded token (minimum over ``--reps`` runs, interleaved across variants
so that machine noise hits all of them alike). ``paired x`` is the median over repetitions of
the variant's time divided by a baseline run right before it (the steadier figure on a shared
machine, as in ``bench/models.py``). KV-cache bytes are the allocated cache tensors for
the whole sequence (prompt + new tokens), batch 1, fp32.

Usage: ``python bench/decode.py [--prompt 128] [--new 32] [--reps 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from olmoablate.models import build_model
from olmoablate.models.generate import IncrementalDecoder

SIZE = {
    "d_model": 256,
    "n_layers": 8,
    "n_heads": 4,
    "n_kv_heads": 4,
    "mlp_hidden_size": 768,
    "sliding_window": 64,
    "vocab_size": 1024,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "siamese_norm": {"siamese_norm": {}},
    "depth_attention": {"depth_attention": {"stride": 8, "recent_window": 0}},
    "sn+da": {"siamese_norm": {}, "depth_attention": {"stride": 8, "recent_window": 0}},
    "looped K4 b2": {"looped": {"body_layers": 4, "loops": 2, "tail": 2}},
    "looped K4 b4": {"looped": {"body_layers": 4, "loops": 4, "tail": 2}},
    "looped K4 b8": {"looped": {"body_layers": 4, "loops": 8, "tail": 2}},
}


@torch.no_grad()
def decode_time(model: torch.nn.Module, prompt: torch.Tensor, n_new: int) -> tuple[float, int]:
    """CPU seconds per decoded token and the cache size in bytes."""
    with IncrementalDecoder(model, prompt.shape[0], prompt.shape[1] + n_new) as dec:
        nxt = dec.step(prompt)[:, -1:].argmax(-1)
        t0 = time.process_time()
        for _ in range(n_new):
            nxt = dec.step(nxt)[:, -1:].argmax(-1)
        per_token = (time.process_time() - t0) / n_new
        return per_token, dec.cache_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    prompt = torch.randint(0, SIZE["vocab_size"], (1, args.prompt))
    models = {name: build_model(SIZE, arch).eval() for name, arch in VARIANTS.items()}
    lat: dict[str, list[float]] = {name: [] for name in models}
    paired: dict[str, list[float]] = {name: [] for name in models}
    cache: dict[str, int] = {}
    for _ in range(args.reps):
        for name, model in models.items():
            t_base, _ = decode_time(models["baseline"], prompt, args.new)
            t, nbytes = decode_time(model, prompt, args.new)
            lat[name].append(t)
            lat["baseline"].append(t_base)
            paired[name].append(t / t_base)
            cache[name] = nbytes
    print(
        f"size d={SIZE['d_model']} L={SIZE['n_layers']} window={SIZE['sliding_window']}; "
        f"prompt {args.prompt} + {args.new} new tokens; batch 1; {args.threads} thread(s); "
        f"CPU time, min of {args.reps} (paired: median of {args.reps} paired ratios)"
    )
    print(
        f"{'variant':<16}{'ms/token':>10}{'latency x':>11}{'paired x':>10}{'KV MiB':>9}{'KV x':>7}"
    )
    base_t, base_b = min(lat["baseline"]), cache["baseline"]
    rows = []
    for name in models:
        t = min(lat[name])
        pr = statistics.median(paired[name])
        rows.append(
            {
                "variant": name,
                "ms_per_token": 1e3 * t,
                "latency_ratio": t / base_t,
                "paired_ratio": pr,
                "kv_cache_bytes": cache[name],
                "kv_ratio": cache[name] / base_b,
            }
        )
        print(
            f"{name:<16}{1e3 * t:>10.2f}{t / base_t:>11.3f}{pr:>10.3f}{cache[name] / 2**20:>9.2f}"
            f"{cache[name] / base_b:>7.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"size": SIZE, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
