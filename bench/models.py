"""CPU micro-benchmark of the bundled variants: step time and activation memory vs the baseline.

For each variant at one small size this measures, in the same process and interleaved with the
baseline (round-robin, so machine noise hits every variant alike):

* forward + backward time of one training micro-batch (labels given, ``model.train()``; no
  optimizer step). Each repetition times the baseline and then the variant back to back; the
  reported time ratio is the median of these paired ratios (a shared machine's load changes
  between minutes, so unpaired minima or medians drift by 10-20%); ``step s`` is the variant's
  fastest step. Time is this process's CPU time
  (``time.process_time``) with one intra-op thread by default: on a shared 2-core machine
  other jobs steal wall-clock time unevenly, while CPU time only counts the work done;
* activation memory = bytes of the tensors autograd saves for backward during that step,
  counted once per storage through ``torch.autograd.graph.saved_tensors_hooks``. This is the
  memory that grows with depth/loops; it is exact and deterministic on CPU, unlike RSS;
* the analytic training-FLOPs ratio from the models' own ``num_flops_per_token``.

With ``--compile`` the timed variants are measured a second time after ``apply_compile()``
(OLMo-core's per-block ``torch.compile``, inductor on CPU), after two warm-up steps in which every
graph compiles; ratios are again to the compiled baseline of the same run. Activation memory
under compile is the bytes AOTAutograd saves for backward (the same hooks see them).

Usage: ``python bench/models.py [--reps 5] [--threads 1] [--compile] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from olmoablate.models.build import build_model

SIZE = {
    "d_model": 256,
    "n_layers": 8,
    "n_heads": 4,
    "n_kv_heads": 4,
    "mlp_hidden_size": 768,
    "sliding_window": 64,
    "vocab_size": 1024,
}
BATCH, SEQ = 2, 256

#: Timed variants (all variants get the deterministic memory measurement).
TIMED = (
    "baseline",
    "siamese_norm",
    "depth_attention",
    "sn+da",
    "looped K4 b4 T2",
    "looped K4 b8 T2",
)

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "siamese_norm": {"siamese_norm": {}},
    "depth_attention": {"depth_attention": {"stride": 8, "recent_window": 0}},
    "sn+da": {"siamese_norm": {}, "depth_attention": {"stride": 8, "recent_window": 0}},
    "sn+da(stride2)": {"siamese_norm": {}, "depth_attention": {"stride": 2}},
    "looped K4 b2 T2": {"looped": {"body_layers": 4, "loops": 2, "tail": 2}},
    "looped K4 b4 T2": {"looped": {"body_layers": 4, "loops": 4, "tail": 2}},
    "looped K4 b8 T2": {"looped": {"body_layers": 4, "loops": 8, "tail": 2}},
    "looped K4 b4 T4": {"looped": {"body_layers": 4, "loops": 4, "tail": 4}},
    "looped K4 b8 T1": {"looped": {"body_layers": 4, "loops": 8, "tail": 1}},
}


def saved_bytes(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes autograd keeps for backward in one training step (each storage counted once)."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(ids, labels=ids)
    out.loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(n for ptr, n in storages.items() if ptr not in params)


def step(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """CPU seconds of this process for one forward+backward (see the module docstring)."""
    t0 = time.process_time()
    out = model(ids, labels=ids)
    out.loss.backward()
    elapsed = time.process_time() - t0
    model.zero_grad(set_to_none=True)
    return elapsed


def measure(
    models: dict[str, torch.nn.Module], ids: torch.Tensor, reps: int, warmup: int
) -> tuple[dict[str, float], dict[str, float], dict[str, int | None]]:
    """(fastest step, median paired time ratio, saved-activation bytes) per variant."""
    times: dict[str, list[float]] = {name: [] for name in TIMED}
    ratios: dict[str, list[float]] = {name: [] for name in TIMED}
    for _ in range(warmup):  # mask caches, allocator; compiled: every graph compiles here
        for name in TIMED:
            step(models[name], ids)
    for _ in range(reps):
        for name in TIMED:
            # paired measurement: the baseline right before the variant sees the same load
            t_base = step(models["baseline"], ids)
            t_var = step(models[name], ids)
            times[name].append(t_var)
            ratios[name].append(t_var / t_base)
    mem: dict[str, int | None] = {}
    for name, m in models.items():
        try:
            mem[name] = saved_bytes(m, ids)
        except Exception:  # noqa: BLE001 - a backend that does not support the hooks
            mem[name] = None
    best = {name: min(v) for name, v in times.items()}
    return best, {name: statistics.median(v) for name, v in ratios.items()}, mem


def table(
    label: str,
    models: dict[str, torch.nn.Module],
    flops: dict[str, int],
    result: tuple[dict[str, float], dict[str, float], dict[str, int | None]],
) -> list[dict[str, Any]]:
    best, ratio, mem = result
    print(f"\n{label}")
    print(
        f"{'variant':<18}{'step s':>9}{'time x':>8}{'FLOPs x':>9}{'t/F':>7}{'act MiB':>9}{'mem x':>7}"
    )
    rows = []
    nan = float("nan")
    base_mem = mem.get("baseline")
    for name in models:
        t = best.get(name, nan)
        r = ratio.get(name, nan)
        fr = flops[name] / flops["baseline"]
        mb = mem.get(name)
        mr = mb / base_mem if (mb is not None and base_mem) else nan
        rows.append(
            {
                "mode": label,
                "variant": name,
                "step_s": None if t != t else t,
                "time_ratio": None if r != r else r,
                "flops_ratio": fr,
                "activation_bytes": mb,
                "memory_ratio": None if mr != mr else mr,
                "flops_per_token": flops[name],
                "params": sum(p.numel() for p in models[name].parameters()),
            }
        )
        mib = mb / 2**20 if mb is not None else nan
        print(f"{name:<18}{t:>9.4f}{r:>8.3f}{fr:>9.3f}{r / fr:>7.3f}{mib:>9.1f}{mr:>7.3f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--d-model", type=int, default=SIZE["d_model"])
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile'd models (inductor; the timed variants only)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    SIZE.update(d_model=args.d_model, mlp_hidden_size=3 * args.d_model)
    torch.manual_seed(0)
    ids = torch.randint(0, SIZE["vocab_size"], (BATCH, SEQ))

    models = {name: build_model(SIZE, arch).train() for name, arch in VARIANTS.items()}
    flops = {name: m.num_flops_per_token(SEQ) for name, m in models.items()}
    print(
        f"size d={SIZE['d_model']} L={SIZE['n_layers']} heads={SIZE['n_heads']} "
        f"window={SIZE['sliding_window']} vocab={SIZE['vocab_size']}; batch {BATCH}x{SEQ}; "
        f"{args.threads} thread(s); {args.reps} reps; CPU time; torch {torch.__version__}"
    )
    rows = table("eager", models, flops, measure(models, ids, args.reps, warmup=1))
    if args.compile:
        import torch._dynamo as dynamo

        from olmoablate.models.transformer import compile_graph_bound

        compiled = {}
        for name in TIMED:
            m = build_model(SIZE, VARIANTS[name]).train()
            m.apply_compile()  # type: ignore[operator]
            limit = dynamo.config.recompile_limit
            dynamo.config.recompile_limit = max(limit, compile_graph_bound(m))
            compiled[name] = m
        t0 = time.perf_counter()
        result = measure(compiled, ids, args.reps, warmup=2)
        print(f"(compiling and timing took {time.perf_counter() - t0:.0f} s wall)")
        rows += table("compiled", compiled, {n: flops[n] for n in TIMED}, result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"size": SIZE, "batch": BATCH, "seq": SEQ, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
