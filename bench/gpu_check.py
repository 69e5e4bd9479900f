"""The first-GPU-run check: one single-GPU run of at most 8 minutes that can fail.

``python bench/gpu_check.py`` on a node with one CUDA GPU (H100/H200 class). Without CUDA it
prints one line and exits 2. Every step has a deadline and ends in one ``OK``/``FAIL`` line
(printed and flushed at once, so a killed run keeps what it showed); every result also goes to
``$OUT/gpu_check.json`` (``$OUT`` from the environment, default a fresh temporary folder),
rewritten after each step. Exit 0 only when every step passed.

Order (most evidence first):

1. environment: torch, CUDA, GPU, flash-attn, OLMo-core;
2. the OLMo 3 1B baseline through ``olmoablate plan`` + ``olmoablate submit --executor local``
   (~20 steps at sequence 8192): completed, bf16 params and compute, the attention backend
   ``auto`` chose, compiled, no graph break in the job's log, MFU >= :data:`MIN_MFU`, peak
   memory within +-25% of the plan;
3. SiameseNorm + Depth-Attention and Looped (b: 2 -> 4 inside the run) through the same
   submit: fingerprints equal to the baseline's, step-time and memory ratios vs the plan,
   ``(loops=n)`` held-out metrics; the looped run is stopped with SIGTERM after its curriculum
   change and resumed by a second submit, and its metrics/fingerprints must hold every step
   exactly once. When the baseline's start-up (compilation) leaves too little of the budget,
   the variants fall back to fewer layers (said in the output); the baseline stays full 1B;
4. small 1B-width models (4 layers): flash_2 vs torch parity of logits and gradients, the KV
   cache against a full forward with sequence > sliding window, compiled (dynamo + AOTAutograd)
   vs eager per variant with the job's own model callbacks attached and graph-break counts.

Checkpoints are deleted as soon as a run no longer needs them (a 1B checkpoint is ~18 GB).
The summary ends with what this single-GPU run does not test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_models import compiled_vs_eager, kv_cache, parity  # noqa: E402

TOTAL_S = 480  # the whole run, eight minutes
SEQ, WINDOW = 8192, 4096  # OLMo 3 pretraining context and sliding window
STEPS = 20
#: Pass line for the 1B baseline's MFU on one GPU. OLMo-core's ~55k tokens/s/GPU for its 1B at
#: 4,096 context is ~52% MFU on H100; one GPU at 8,192 with 2-sequence microbatches, FSDP on one
#: rank and CUDA-event timing: 30% is a line a healthy bf16 + flash + compiled run clears.
MIN_MFU = 0.30
MEMORY_TOLERANCE = 0.25
NOT_TESTED = (
    "multi-GPU (FSDP sharding across GPUs, world size > 1): not tested here",
    "NCCL collectives (one rank only; the gloo paths are tested on CPU): not tested here",
    "HSDP (needs >= 2 nodes): not tested here",
    "Slurm submission, requeue and multi-node rendezvous: not tested here",
)
VARIANTS: dict[str, dict[str, Any]] = {
    "sn_da": {"siamese_norm": {}, "depth_attention": {"stride": 8, "recent_window": 0}},
    "looped": {
        "looped": {
            "body_layers": 4,
            "loops": 4,
            "tail": 2,
            "curriculum": {"start": 2, "increment": 2, "interval_steps": 10},
        }
    },
}

#: Where the JSON, the spec, the token files and the results go (set by :func:`main`).
OUT = Path(os.environ.get("OUT") or tempfile.gettempdir()) / "olmoablate-gpucheck"
RESULTS: dict[str, Any] = {"total_budget_s": TOTAL_S, "steps": []}
T0 = time.monotonic()


def say(line: str) -> None:
    print(line, flush=True)


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gpu_check.json").write_text(json.dumps(RESULTS, indent=1, default=str))


def left() -> float:
    return TOTAL_S - (time.monotonic() - T0)


class DeadlineExceeded(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Any:
    """SIGALRM after ``seconds`` (in-process steps; subprocesses get their own timeout)."""

    def fire(signum: int, frame: Any) -> None:
        raise DeadlineExceeded(f"deadline of {seconds:.0f} s exceeded")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def step(
    name: str, budget_s: float, fn: Callable[[float], tuple[bool, str, dict[str, Any]]]
) -> bool:
    """Run one check within ``min(budget_s, what is left)``; one OK/FAIL line, JSON updated."""
    budget = min(budget_s, left() - 5)
    t = time.monotonic()
    if budget < 10:
        ok, detail, data = False, f"not started: {left():.0f} s of the 8-minute budget left", {}
    else:
        try:
            with deadline(budget):
                ok, detail, data = fn(budget)
        except Exception as err:  # noqa: BLE001 - every failure is one FAIL line
            lines = [x for x in str(err).splitlines() if x.strip()]
            ok, detail, data = False, f"{type(err).__name__}: {lines[0] if lines else ''}", {}
        finally:
            stop_children()
    took = time.monotonic() - t
    RESULTS["steps"].append(
        {"name": name, "ok": ok, "detail": detail, "seconds": round(took, 1), "data": data}
    )
    save()
    say(f"{'OK  ' if ok else 'FAIL'} {name} ({took:.0f} s): {detail}")
    return ok


# ----------------------------------------------------------------------------- environment


def environment(_: float) -> tuple[bool, str, dict[str, Any]]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import olmo_core

        info["olmo_core"] = olmo_core.__version__
    except Exception as err:  # noqa: BLE001
        info["olmo_core"] = f"unavailable ({err})"
    try:
        import flash_attn

        info["flash_attn"] = flash_attn.__version__
    except Exception:  # noqa: BLE001
        info["flash_attn"] = None
    props = torch.cuda.get_device_properties(0)
    info.update(
        gpu=props.name,
        gpu_memory_gb=round(props.total_memory / 2**30, 1),
        gpus_visible=torch.cuda.device_count(),
        bf16=torch.cuda.is_bf16_supported(),
        free_disk_gb=round(shutil.disk_usage(OUT).free / 2**30, 1),
    )
    RESULTS["environment"] = info
    return True, ", ".join(f"{k}={v}" for k, v in info.items()), info


# ----------------------------------------------------------------------------- submitted runs


def write_tokens(path: Path, n: int, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 100_000, n, dtype=np.uint32)
    ids[rng.random(n) < 1 / 2000] = 100257  # dolma2 EOS: documents of ~2,000 tokens
    ids.tofile(path)


def write_spec(layers: int | None) -> Path:
    """Both variants beside the baseline; one GPU, 2 sequences per step, metrics (and cancel
    checks) every 2 steps so a SIGTERM stops the 20-step run mid-way, evaluation at step 10 and
    at the end. ``layers``: the fallback, a 1B-width custom size with fewer layers."""
    data = OUT / "data"
    data.mkdir(parents=True, exist_ok=True)
    gbs = 2 * SEQ
    for fname, n, seed in (("train.bin", gbs * (STEPS + 4), 0), ("heldout.bin", 8 * SEQ, 1)):
        if not (data / fname).exists():
            write_tokens(data / fname, n, seed)
    name, size, custom = "gpucheck", "1B", ""
    if layers is not None:
        name, size = f"gpucheck_{layers}l", f"w2048_{layers}l"
        custom = (
            f"custom_sizes:\n  {size}: {{d_model: 2048, n_layers: {layers}, n_heads: 16, "
            f"mlp_hidden_size: 8192, sliding_window: {WINDOW}, vocab_size: 100352}}\n"
        )
    variants = "\n".join(f"  {k}: {json.dumps(v)}" for k, v in VARIANTS.items())
    spec = OUT / f"{name}.yaml"
    spec.write_text(
        f"""name: {name}
sizes: [{size}]
{custom}variants:
{variants}
training:
  sequence_length: {SEQ}
  tokens: {gbs * STEPS}
  global_batch_size: {gbs}
  microbatch_size: {gbs}
  optimizer: {{lr: 4.0e-4}}
  schedule: {{name: constant, warmup_steps: 2}}
  precision: bf16
  data: {{paths: ["{data / "train.bin"}"]}}
  checkpoint_interval: 100000
evaluation:
  interval: 10
  lm_sets: {{held: ["{data / "heldout.bin"}"]}}
  max_eval_tokens: {4 * SEQ}
  loop_counts: [1, b, 8]
topology: {{nodes: 1, gpus_per_node: 1, data_parallel: fsdp, gpu_type: H100,
  gpu_peak_tflops: 989, metrics_interval: 2}}
"""
    )
    return spec


#: Every command started, so a step that hits its deadline leaves none running.
CHILDREN: list[subprocess.Popen] = []


def stop_children() -> None:
    """Ctrl-C to each live ``olmoablate`` command (submit then checkpoints and stops its jobs),
    then a kill after 30 s."""
    for proc in CHILDREN:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in CHILDREN:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    CHILDREN.clear()


def cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "olmoablate", *args],
        cwd=OUT,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    CHILDREN.append(proc)
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """Wait for ``proc``; past ``timeout`` it is stopped like Ctrl-C, then killed."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # submit: checkpoint and stop every run
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        raise DeadlineExceeded(
            f"{' '.join(map(str, proc.args[3:5]))} ran past {timeout:.0f} s"
        ) from None
    return proc.returncode, out


def make_plan(layers: int | None) -> tuple[Path, dict[str, str]]:
    """`olmoablate plan` of :func:`write_spec`; (results folder, arm -> run id)."""
    spec = write_spec(layers)
    rc, out = finish(cli(["plan", str(spec), "--results-root", str(OUT / "results")]), 90)
    if rc != 0:
        raise RuntimeError(f"plan failed: {out.strip().splitlines()[-1:]}")
    results = OUT / "results" / spec.stem
    plan = json.loads((results / "plan.json").read_text())
    return results, {r["arm"]: r["run_id"] for r in plan["runs"]}


def submit(results: Path, run_ids: list[str]) -> subprocess.Popen:
    args = ["submit", str(results), "--executor", "local", "--no-progress"]
    for rid in run_ids:
        args += ["--run", rid]
    return cli(args, {"TORCH_LOGS": "graph_breaks"})


def submitted(results: Path, run_ids: list[str], timeout: float) -> None:
    rc, out = finish(submit(results, run_ids), timeout)
    (results / f"submit-{int(time.time())}.log").write_text(out)
    if rc != 0:
        raise RuntimeError(f"submit exit {rc}: {out.strip().splitlines()[-1:]}")


def run_files(results: Path, rid: str) -> dict[str, Any]:
    rd = results / "runs" / rid
    summary = json.loads((rd / "summary.json").read_text())
    plan = json.loads((results / "plan.json").read_text())
    entry = next(r for r in plan["runs"] if r["run_id"] == rid)
    rows = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    fps = [json.loads(x) for x in (rd / "fingerprints.jsonl").read_text().splitlines()]
    # the job logs of this spec (submitit's *.out/*.err, our submit-*.log): TORCH_LOGS output
    logs = "".join(
        p.read_text(errors="replace")
        for pattern in ("*.log", "*.out", "*.err")
        for p in results.rglob(pattern)
        if p.is_file()
    )
    shutil.rmtree(rd / "checkpoints", ignore_errors=True)  # ~18 GB at 1B: not needed any more
    topo = entry["topology"]
    tflops = topo["gpu_peak_tflops"] * 1e12 * topo["assumed_mfu"]
    planned_step = entry["train_flops_per_token"] * entry["training"]["global_batch_size"] / tflops
    return {
        "summary": summary,
        "entry": entry,
        "rows": rows,
        "fingerprints": fps,
        "graph_breaks": logs.count("Graph break"),
        "planned_step_s": planned_step,
    }


def run_checks(r: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """What every GPU run must show; returns (failures, figures)."""
    s, ex = r["summary"], r["summary"].get("execution") or {}
    steps = [row["step"] for row in r["rows"]]
    planned_mem = r["entry"]["peak_memory_gb"]
    mem_ratio = (s.get("peak_memory_gb") or 0) / planned_mem if planned_mem else None
    step_ratio = (s.get("mean_step_time_s") or 0) / r["planned_step_s"]
    compiled = (ex.get("compile") or {}).get("compiled")
    fails = [
        msg
        for bad, msg in (
            (s.get("state") != "completed", f"state {s.get('state')}"),
            (ex.get("param_dtype") != "bfloat16", f"param_dtype {ex.get('param_dtype')}"),
            (ex.get("compute_dtype") != "bfloat16", f"compute_dtype {ex.get('compute_dtype')}"),
            (ex.get("world_size") != 1, f"world_size {ex.get('world_size')}"),
            (not compiled, "not compiled"),
            (r["graph_breaks"] > 0, f"{r['graph_breaks']} graph break(s) in the job log"),
            (steps != sorted(set(steps)), "metrics.jsonl has duplicated/unordered steps"),
            (
                mem_ratio is None or abs(mem_ratio - 1) > MEMORY_TOLERANCE,
                f"peak memory {s.get('peak_memory_gb')} GB vs plan {planned_mem} GB",
            ),
        )
        if bad
    ]
    figures = {
        "backend": ex.get("attention_backend"),
        "mfu": s.get("mfu"),
        "tokens_per_s": s.get("tokens_per_s"),
        "step_time_s": s.get("mean_step_time_s"),
        "step_time_vs_plan": round(step_ratio, 3),
        "memory_vs_plan": round(mem_ratio, 3) if mem_ratio else None,
    }
    return fails, figures


STATE: dict[str, Any] = {}


def baseline_run(budget: float) -> tuple[bool, str, dict[str, Any]]:
    t = time.monotonic()
    results, rid = make_plan(None)
    submitted(results, [rid["baseline"]], budget - 30)
    r = run_files(results, rid["baseline"])
    STATE.update(baseline=r, results=results, rid=rid, baseline_wall_s=time.monotonic() - t)
    fails, fig = run_checks(r)
    mfu = fig["mfu"] or 0.0
    if mfu < MIN_MFU:
        fails.append(f"MFU {mfu:.1%} < {MIN_MFU:.0%}")
    if fig["backend"] != "FlashAttention2Backend":
        fails.append(f"backend {fig['backend']} (auto should pick flash_2 here)")
    detail = (
        f"MFU {mfu:.1%}, {fig['tokens_per_s'] or 0:,.0f} tok/s, backend {fig['backend']}, step "
        f"{fig['step_time_s'] or 0:.3f} s ({fig['step_time_vs_plan']}x plan), memory "
        f"{fig['memory_vs_plan']}x plan"
    )
    return not fails, detail + ("; " + "; ".join(fails) if fails else ""), fig


def variant_runs(budget: float) -> tuple[bool, str, dict[str, Any]]:
    base = STATE.get("baseline")
    if base is None:
        return False, "no baseline run to compare with", {}
    t_end = time.monotonic() + budget - 20
    # The baseline's start-up (mostly compiling its two block graphs) predicts the variants':
    # both at full 1B plus the looped resume need about 3x it; else fewer layers, said here.
    layers = None if 3 * STATE["baseline_wall_s"] < budget - 30 else 8
    results, rid = STATE["results"], STATE["rid"]
    if layers is not None:
        say(f"     the compile budget does not fit full-1B variants: variants at {layers} layers")
        results, rid = make_plan(layers)
    looped, others = rid["looped"], [rid[a] for a in rid if a not in ("baseline", "looped")]
    # Looped: stopped (submit's Ctrl-C path: SIGTERM to the job) after its curriculum change
    # (b 2 -> 4 after step 10), then resumed by a second submit that also trains the others.
    proc = submit(results, [looped])
    status = results / "runs" / looped / "status.json"
    while time.monotonic() < t_end and proc.poll() is None:
        try:
            if json.loads(status.read_text()).get("step", 0) >= 12:
                proc.send_signal(signal.SIGINT)
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    finish(proc, t_end - time.monotonic())
    stopped_at = json.loads(status.read_text()).get("step") if status.exists() else None
    submitted(results, [looped, *others], t_end - time.monotonic())
    fails: list[str] = []
    figs: dict[str, Any] = {"variant_layers": layers, "looped_stopped_at_step": stopped_at}
    base_fp = [f["sha256"] for f in base["fingerprints"]]
    for arm, run_id in rid.items():
        if arm == "baseline":
            continue
        r = run_files(results, run_id)
        f, fig = run_checks(r)
        fails += [f"{arm}: {x}" for x in f]
        if [x["sha256"] for x in r["fingerprints"]] != base_fp:
            fails.append(f"{arm}: fingerprints differ from the baseline's")
        steps = [row["step"] for row in r["rows"]]
        fp_steps = [x["step"] for x in r["fingerprints"]]
        if steps != list(range(1, STEPS + 1)) or fp_steps != steps:
            fails.append(f"{arm}: metrics/fingerprint steps are not 1..{STEPS} exactly once")
        if arm == "looped":
            loops = {row.get("train/loops") for row in r["rows"]}
            if not {2.0, 4.0} <= loops:
                fails.append(f"looped: loop counts seen {sorted(x for x in loops if x)}")
            if not any(k.endswith("CE loss (loops=8)") for k in r["rows"][-1]):
                fails.append("looped: no (loops=n) held-out metrics in the last row")
            if not (isinstance(stopped_at, int) and 10 < stopped_at < STEPS):
                fails.append(f"looped: the SIGTERM did not stop it mid-run (step {stopped_at})")
        if layers is None:
            fig["step_time_vs_baseline"] = round(
                (r["summary"]["mean_step_time_s"] or 0) / base["summary"]["mean_step_time_s"], 3
            )
            fig["planned_flops_vs_baseline"] = round(
                r["entry"]["train_flops_per_token"] / base["entry"]["train_flops_per_token"], 3
            )
        figs[arm] = fig
    detail = "; ".join(
        f"{a}: step {v['step_time_vs_plan']}x plan, memory {v['memory_vs_plan']}x plan"
        for a, v in figs.items()
        if isinstance(v, dict)
    )
    return not fails, detail + ("; " + "; ".join(fails) if fails else ""), figs


def main() -> int:
    import torch

    global OUT
    OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(tempfile.mkdtemp())
    if not torch.cuda.is_available():
        RESULTS.update(ok=False, environment={"torch": torch.__version__, "cuda": None})
        save()
        print(
            f"gpu_check: CUDA is not available (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda}): nothing checked, exit 2",
            flush=True,
        )
        return 2
    say(f"gpu_check: results in {OUT / 'gpu_check.json'}; budget {TOTAL_S} s")
    ok = step("environment", 20, environment)
    ok &= step("1B baseline via submit --executor local", 210, baseline_run)
    ok &= step("SiameseNorm+DA and Looped via submit (SIGTERM + resume)", 160, variant_runs)
    ok &= step("flash_2 vs torch parity (1B width, 4 layers)", 30, parity)
    ok &= step("KV cache, sequence 640 > window 256", 20, kv_cache)
    ok &= step("compiled vs eager with the job's callbacks", 40, compiled_vs_eager)
    for ckpt in list((OUT / "results").glob("*/runs/*/checkpoints")):
        shutil.rmtree(ckpt, ignore_errors=True)  # a failed run's too: logs stay for reading
    for line in NOT_TESTED:
        say(f"NOTE {line}")
    RESULTS.update(ok=ok, not_tested=list(NOT_TESTED), wall_s=round(time.monotonic() - T0, 1))
    save()
    say(f"{'ALL OK' if ok else 'SOME CHECKS FAILED'} in {time.monotonic() - T0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
