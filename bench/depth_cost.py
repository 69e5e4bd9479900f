"""What the effective-depth diagnostic costs per eval point (docs/depth.md), on the demo's size.

For each bundled arm of specs/demo.yaml's tiny size (d_model 64, 8 layers, vocab 4,096) this
times, in one process and interleaved (round-robin, so machine noise hits both alike):

* the eval forward the LM evaluator runs anyway (``model(ids)`` + CE, no grad), and
* ``olmoablate.models.depth.depth_profiles`` on the same batch (one eager forward with a lens on
  every block: the model's own head per layer; Depth-Attention's weights recorded),

over ``--batches`` batches of 6 x 256 tokens, and prints the ratio (diagnostic / eval) and, from
the demo's token counts, the share one eval point with the diagnostic adds to a run's training
compute. Time is process CPU time with one intra-op thread (a shared 2-core box steals wall
time unevenly). Why it exists: the CPU demos score the diagnostic at the final eval point only
(``evaluation.depth: final``); this measures why.

Usage: ``python bench/depth_cost.py [--batches 8] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from olmoablate.models.build import build_model
from olmoablate.models.depth import depth_profiles

SIZE = {"d_model": 64, "n_layers": 8, "n_heads": 4, "n_kv_heads": 2, "mlp_hidden_size": 192,
        "sliding_window": 128, "vocab_size": 4096}  # fmt: skip
ARMS = {
    "baseline": {},
    "siamese_depth": {"siamese_norm": {"output_norms": False},
                      "depth_attention": {"stride": 2, "recent_window": 0}},
    "looped": {"looped": {"body_layers": 4, "loops": 2, "tail": 2, "input_injection": True,
                          "state_norm": False}},
}  # fmt: skip
SEQ, ROWS = 256, 6
#: specs/demo.yaml: 352 steps x 1,536 tokens trained; the held-out set (83,424 tokens) per eval.
TRAIN_TOKENS, HELDOUT_TOKENS = 352 * 1536, 83_424


def _eval(model: torch.nn.Module, ids: torch.Tensor) -> None:
    with torch.no_grad():
        logits = model(ids)
        F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def _depth(model: torch.nn.Module, ids: torch.Tensor) -> None:
    with torch.no_grad():
        depth_profiles(model, ids, None, ["held"] * ids.shape[0])


def _train_step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    model.train()
    logits = model(ids)
    F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)
    model.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 4096, (ROWS, SEQ), generator=gen) for _ in range(args.batches)]
    print(f"{'arm':14} {'eval s/batch':>12} {'depth s/batch':>13} {'depth/eval':>10} "
          f"{'train s/batch':>13} {'+train % per eval point':>24}")  # fmt: skip
    for arm, spec in ARMS.items():
        model = build_model(SIZE, spec, init_seed=0).eval()
        times: dict[str, list[float]] = {"eval": [], "depth": [], "train": []}
        for fn in (_eval, _depth, _train_step):  # warm-up
            fn(model, batches[0])
        for _ in range(args.reps):
            for ids in batches:
                for name, fn in (("eval", _eval), ("depth", _depth), ("train", _train_step)):
                    t0 = time.process_time()
                    fn(model, ids)
                    times[name].append(time.process_time() - t0)
        ev, dp, tr = (statistics.median(times[k]) for k in ("eval", "depth", "train"))
        per_eval_point = dp * HELDOUT_TOKENS / (ROWS * SEQ)
        train = tr * TRAIN_TOKENS / (ROWS * SEQ)
        print(f"{arm:14} {ev:12.4f} {dp:13.4f} {dp / ev:10.2f} {tr:13.4f} "
              f"{100 * per_eval_point / train:23.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
