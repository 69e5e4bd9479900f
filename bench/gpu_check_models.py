"""The small-model steps of ``bench/gpu_check.py`` (1B width, 4 layers, one GPU): flash_2 vs
torch parity, the KV cache with sequence > sliding window, compiled vs eager with the job's model
callbacks attached and graph-break counts. Each returns ``(ok, one-line detail, figures)``."""

from __future__ import annotations

from typing import Any


def small_1b(n_layers: int = 4) -> dict[str, int]:
    return {
        "d_model": 2048,
        "n_layers": n_layers,
        "n_heads": 16,
        "n_kv_heads": 16,
        "mlp_hidden_size": 8192,
        "sliding_window": 256,
        "vocab_size": 100352,
    }


def small_archs() -> dict[str, dict[str, Any]]:
    return {
        "baseline": {},
        "sn_da": {"siamese_norm": {}, "depth_attention": {"stride": 2}},
        "looped": {"looped": {"body_layers": 4, "loops": 2, "tail": 1}},
    }


def parity(
    _: float, device: str = "cuda", dims: dict[str, int] | None = None
) -> tuple[bool, str, dict[str, Any]]:
    """flash_2 vs torch attention at sequence 1024 (window 256: SWA masking active)."""
    import torch
    from olmo_core.nn.attention import flash_attn_api

    from olmoablate.models.build import build_model

    if not flash_attn_api.has_flash_attn_2():
        return False, "flash-attn 2 is not installed: the GPU default (auto = flash_2) unshown", {}
    ids = torch.randint(0, (dims or small_1b())["vocab_size"], (1, 1024), device=device)
    out: dict[str, Any] = {}
    for name, arch in small_archs().items():
        res = {}
        for backend in ("torch", "flash_2"):
            model = build_model(
                dims or small_1b(), arch, init_seed=0, attn_backend=backend, device=device
            )
            with torch.autocast(device, dtype=torch.bfloat16):
                r = model(ids, labels=ids, return_logits=True)
            r.loss.backward()
            res[backend] = (r.logits.float().detach(), [p.grad.float() for p in model.parameters()])
            del model
        (lt, gt), (lf, gf) = res["torch"], res["flash_2"]
        dl = ((lt - lf).abs().max() / lt.abs().max().clamp_min(1)).item()
        dg = max(
            ((a - b).norm() / a.norm().clamp_min(1e-12)).item() for a, b in zip(gt, gf, strict=True)
        )
        out[name] = {"logits_rel": dl, "worst_grad_rel": dg, "ok": dl < 2e-2 and dg < 5e-2}
        torch.cuda.empty_cache()
    ok = all(v["ok"] for v in out.values())
    return (
        ok,
        ", ".join(
            f"{k} logits {v['logits_rel']:.1e} grads {v['worst_grad_rel']:.1e}"
            for k, v in out.items()
        ),
        out,
    )


def kv_cache(
    _: float, device: str = "cuda", dims: dict[str, int] | None = None
) -> tuple[bool, str, dict[str, Any]]:
    """Incremental decode == full forward, sequence 640 > window 256 (sliding-window masking)."""
    import torch

    from olmoablate.models.build import build_model
    from olmoablate.models.generate import IncrementalDecoder

    seq = 640
    ids = torch.randint(0, (dims or small_1b())["vocab_size"], (1, seq), device=device)
    out = {}
    for name, arch in small_archs().items():
        model = build_model(
            dims or small_1b(), arch, init_seed=0, attn_backend="torch", device=device
        )
        model = model.to(torch.bfloat16).eval()
        with torch.no_grad():
            full = model(ids).float()
            with IncrementalDecoder(model, 1, seq) as dec:
                parts = [dec.step(ids[:, :512])] + [
                    dec.step(ids[:, i : i + 1]) for i in range(512, seq)
                ]
            inc = torch.cat(parts, dim=1).float()
        out[name] = ((full - inc).abs().max() / full.abs().max().clamp_min(1)).item()
        del model
    ok = all(v < 3e-2 for v in out.values())
    return ok, ", ".join(f"{k} rel {v:.1e}" for k, v in out.items()), out


def compiled_vs_eager(
    _: float, device: str = "cuda", dims: dict[str, int] | None = None
) -> tuple[bool, str, dict[str, Any]]:
    """Per variant: compiled (dynamo + AOTAutograd, where graph breaks are decided) == eager
    with the job's model callbacks attached (compute-dtype probe, loop curriculum)."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from olmoablate.models.build import build_model
    from olmoablate.run.callbacks import LoopCurriculumCallback
    from olmoablate.run.guards import ComputeDtypeCallback

    class _Trainer:
        def __init__(self, model: Any) -> None:
            self.train_module = type("TM", (), {"model": model})()
            self.global_step = 0

        def record_metric(self, *a: Any, **k: Any) -> None:
            pass

    ids = torch.randint(0, (dims or small_1b())["vocab_size"], (1, 1024), device=device)
    out = {}
    for name, arch in small_archs().items():
        torch._dynamo.reset()
        counters.clear()
        losses = []
        for compiled in (False, True):
            model = build_model(
                dims or small_1b(), arch, init_seed=0, attn_backend="torch", device=device
            )
            if compiled:  # the job's path (apply_compile: blocks, LM head, recompile bound)
                real = torch.nn.Module.compile

                def aot_eager(self: Any, *a: Any, real: Any = real, **k: Any) -> None:
                    real(self, *a, **{**k, "backend": "aot_eager"})

                torch.nn.Module.compile = aot_eager  # type: ignore[method-assign]
                try:
                    model.apply_compile()
                finally:
                    torch.nn.Module.compile = real  # type: ignore[method-assign]
            cbs = [ComputeDtypeCallback(), LoopCurriculumCallback()]
            trainer = _Trainer(model)
            for cb in cbs:
                cb.trainer = trainer  # type: ignore[assignment]
                cb.pre_train()
            for s in (1, 2):
                trainer.global_step = s
                for cb in cbs:
                    cb.pre_step({})
                with torch.autocast(device, dtype=torch.bfloat16):
                    loss = model(ids, labels=ids).loss
                loss.backward()
                for cb in cbs:
                    cb.post_train_batch()
            losses.append(float(loss.detach()))
            del model
        breaks = sum(counters["graph_break"].values())
        graphs = int(counters["stats"]["unique_graphs"])
        same = abs(losses[0] - losses[1]) <= 2e-2 * abs(losses[0])
        out[name] = {
            "graph_breaks": breaks,
            "graphs": graphs,
            "loss_eager": losses[0],
            "loss_compiled": losses[1],
            "ok": same and breaks == 0,
        }
    ok = all(v["ok"] for v in out.values())
    return (
        ok,
        ", ".join(f"{k}: {v['graphs']} graphs, {v['graph_breaks']} breaks" for k, v in out.items()),
        out,
    )
