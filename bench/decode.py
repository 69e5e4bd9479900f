"""CPU decode benchmark: per-token latency and KV-cache bytes per variant, as ratios to baseline.

Uses :func:`olmoablate.models.generate.IncrementalDecoder` (our per-virtual-layer KV cache). For
each variant: prefill a prompt, then decode ``--new`` tokens one at a time; the latency is this
process's CPU time per decoded token (minimum over ``--reps`` runs, interleaved across variants
so that machine noise hits all of them alike). ``paired x`` is the median over repetitions of
the variant's time divided by that of a second baseline model decoding alongside it, one token
each in turn (:func:`decode_pair`; the steadier figure on a shared machine; the baseline row is
the baseline paired with its copy, i.e. the noise floor). KV-cache bytes are the allocated
cache tensors for the whole sequence (prompt + new tokens), batch 1, fp32.

Usage: ``python bench/decode.py [--prompt 128] [--new 32] [--reps 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from olmoablate.models.build import build_model
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
def decode_pair(
    reference: torch.nn.Module, model: torch.nn.Module, prompt: torch.Tensor, n_new: int
) -> tuple[float, float, int]:
    """CPU seconds per decoded token of ``reference`` and ``model``, and ``model``'s cache bytes.

    The two decode side by side, one token each in turn, so that a change of machine load (a
    shared box's load moves within seconds) hits both alike: the ratio of their sums is the
    steady figure, which separate runs of a few hundred milliseconds each were not.
    """
    total = prompt.shape[1] + n_new
    with (
        IncrementalDecoder(reference, prompt.shape[0], total) as ref_dec,
        IncrementalDecoder(model, prompt.shape[0], total) as dec,
    ):
        nxt_ref = ref_dec.step(prompt)[:, -1:].argmax(-1)
        nxt = dec.step(prompt)[:, -1:].argmax(-1)
        t_ref = t_var = 0.0
        for _ in range(n_new):
            t0 = time.process_time()
            nxt_ref = ref_dec.step(nxt_ref)[:, -1:].argmax(-1)
            t1 = time.process_time()
            nxt = dec.step(nxt)[:, -1:].argmax(-1)
            t2 = time.process_time()
            t_ref += t1 - t0
            t_var += t2 - t1
        return t_ref / n_new, t_var / n_new, dec.cache_bytes()


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
    reference = build_model(SIZE, VARIANTS["baseline"]).eval()  # every variant's partner
    lat: dict[str, list[float]] = {name: [] for name in models}
    paired: dict[str, list[float]] = {name: [] for name in models}
    cache: dict[str, int] = {}
    for _ in range(args.reps):
        for name, model in models.items():
            t_ref, t, nbytes = decode_pair(reference, model, prompt, args.new)
            lat[name].append(t)
            paired[name].append(t / t_ref)
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
