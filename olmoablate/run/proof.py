"""What the job proves before the first step: the blocks' code is the code the plan recorded,
and the model it built costs what the plan says.

Why at job start: the plan's parameter and FLOP figures come from each block's analytic
formulas (:mod:`olmoablate.plan.accounting`), and the report compares arms with them; a
formula that disagrees with the module it describes would silently skew every comparison, and a
block edited between ``plan`` and a (re)start would train code the certificate does not cover.
Each check fails the run with one line naming the block(s) and the two numbers; parameters must
match exactly.

FLOPs are counted by torch's FLOP counter over one training step of a replica built under
``FakeTensorMode`` (shapes only: it costs the same on a login-sized CPU and for a 7B model). The
counter sees matrix products; the formula's part it cannot see (attention scores, computed by
SDPA kernels under a mask; the QK-/final-norm weights OLMo-core's 6 x params convention counts; a
block's declared elementwise terms) is :attr:`~olmoablate.plan.accounting.FlopsBreakdown.unseen`
and left out of the match.
"""

from __future__ import annotations

import copy
import logging
import time
from datetime import datetime, timezone
from typing import Any

from olmoablate.errors import UserError
from olmoablate.models.build import unique_param_count
from olmoablate.plan import accounting as acc
from olmoablate.plan.blocks import code_changes
from olmoablate.plan.planfile import RunEntry
from olmoablate.run.faults import chain, redo_advice
from olmoablate.run.files import ProofRecord
from olmoablate.run.runplan import RunContext

log = logging.getLogger(__name__)

#: Relative tolerance of the FLOP match (counted matrix-product FLOPs vs the formula's).
FLOPS_TOLERANCE = 0.01
#: Sequence length of the counted step (the per-token matrix-product FLOPs do not depend on it).
PROOF_SEQ_LEN = 16


def blocks_label(run: RunEntry) -> str:
    names = list(run.architecture.blocks)
    return "block " + " + ".join(names) if names else "baseline (OLMo 3)"


def check_code(run: RunEntry, *, resuming: bool, way_out: str | None = None) -> None:
    """Refuse to (re)start a run whose blocks' code changed since ``plan``; ``way_out``: the
    commands that recover it (:func:`olmoablate.run.faults.redo_advice`, with this store's
    paths)."""
    if run.code is None:
        return
    recorded = {k: v.model_dump() for k, v in run.code.items()}
    changes = code_changes(recorded, run.architecture.as_mapping())
    if changes:
        verb = "resume" if resuming else "start"
        fix = way_out or (
            f"`olmoablate plan SPEC --replan` then `olmoablate submit SPEC --redo {run.run_id}`"
        )
        raise UserError(
            f"run {run.run_id}: refusing to {verb}: {changes[0]}; to train the new code: {fix}"
        )


def check_params(run: RunEntry, model: Any) -> int:
    """Parameters of the built model == the plan's, exactly. Their difference is the fault of a
    block's parameter formula (``extra_params``/``extra_model_params``), not of the run entry:
    the line says so and names the block(s)."""
    built = unique_param_count(model)
    if built != run.unique_params:
        names = list(run.architecture.blocks)
        whose = (
            "the parameter formula (extra_params / extra_model_params) of block "
            + " + ".join(names)
            if names
            else "the baseline's (OLMo 3) parameter formula"
        )
        raise UserError(
            f"run {run.run_id}: {whose} says {run.unique_params:,} unique parameters, the built "
            f"model has {built:,} unique parameters ({run.unique_params - built:+,} in the formula)"
        )
    return built


def measured_flops_per_token(model_config: Any, seq_len: int = PROOF_SEQ_LEN) -> float:
    """Matrix-product training FLOPs per token of one step, counted on a fake-tensor replica."""
    import torch
    from olmo_core.nn.attention import AttentionBackendName
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from olmoablate.models import block_model

    config = copy.deepcopy(model_config)
    mixer = getattr(config.block, "sequence_mixer", None)
    if getattr(mixer, "backend", None) is not None:  # flash kernels need real CUDA tensors; the
        mixer.backend = AttentionBackendName.torch  # backend changes no counted matrix product
    block_model._COST_PROOF = True
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            replica = config.build(init_device="cpu")
            replica.train()
            ids = torch.zeros(1, seq_len, dtype=torch.long)
            with FlopCounterMode(display=False) as counter:
                out = replica(ids, labels=ids)
                out.loss.backward()
    finally:
        block_model._COST_PROOF = False
    return counter.get_total_flops() / seq_len


#: Fake-tensor errors of a forward that branches on values or makes value-dependent shapes.
DATA_DEPENDENT = ("DataDependentOutputException", "DynamicOutputShapeException")


def data_dependent_line(run: RunEntry, err: BaseException) -> str | None:
    """The one line for a forward the fake-tensor proof cannot run (else None).

    Why a line of its own: torch's message names only an aten op (``_local_scalar_dense``), not
    that the FLOP/param proof raised it, why it runs on values-free tensors, or the way out.
    """
    hit = next((e for e in chain(err) if type(e).__name__ in DATA_DEPENDENT), None)
    if hit is None:
        return None
    op = getattr(getattr(hit, "func", None), "__name__", None) or str(getattr(hit, "func", ""))
    return (
        f"run {run.run_id}: {blocks_label(run)}: the FLOP/param proof runs the forward on fake "
        f"(meta) tensors, which have shapes but no values, and Python control flow on tensor "
        f"values ({type(hit).__name__} in {op or 'an aten op'}) is not allowed there: compute "
        "without branching (torch.where, torch.nan_to_num), or skip a pure check with `if not "
        "in_cost_proof() and ...` (olmoablate.models.block_model; docs/blocks.md)"
    )


def check_flops(run: RunEntry, model_config: Any) -> tuple[float, int]:
    seq = min(PROOF_SEQ_LEN, run.training.sequence_length)
    phase = acc.phase_at(run.architecture, 1)
    split = acc.flops_breakdown(run.size_dims, run.architecture, seq, phase)
    want = split.total - split.unseen
    try:
        got = measured_flops_per_token(model_config, seq)
    except Exception as err:
        line = data_dependent_line(run, err)
        if line is None:
            raise
        raise UserError(line) from err
    if abs(got - want) > FLOPS_TOLERANCE * want:
        raise UserError(
            f"run {run.run_id}: {blocks_label(run)}: counted {got:,.0f} matrix-product training "
            f"FLOPs per token at seq {seq}, the blocks' formula says {want:,} (tolerance "
            f"{FLOPS_TOLERANCE:.0%})"
        )
    return got, want


def at_start(ctx: RunContext, model: Any, model_config: Any, attempt: int = 1) -> ProofRecord:
    """Every check, before the first step of every (re)start; records them in proof.json."""
    from olmo_core.distributed.utils import get_rank

    run = ctx.run
    t0 = time.process_time()
    ckpts = ctx.run_dir.checkpoints
    check_code(
        run,
        resuming=ckpts.is_dir() and any(ckpts.glob("step*")),
        way_out=redo_advice(ctx.run_dir.path.parent.parent, run.run_id),
    )
    proved = prove(run, model, model_config)
    log.info(
        f"{run.run_id}: proved {blocks_label(run)}: {proved['unique_params']:,} unique params, "
        f"{proved['counted_flops_per_token']:,.0f} counted matrix-product FLOPs/token (formula "
        f"{proved['formula_flops_per_token']:,}; {time.process_time() - t0:.2f} s CPU)"
    )
    record = ProofRecord(
        run_id=run.run_id,
        code={k: v.sha256 for k, v in (run.code or {}).items()},
        unique_params=proved["unique_params"],
        counted_flops_per_token=float(proved["counted_flops_per_token"]),
        formula_flops_per_token=proved["formula_flops_per_token"],
        flops_tolerance=FLOPS_TOLERANCE,
        seq_len=min(PROOF_SEQ_LEN, run.training.sequence_length),
        attempt=attempt,
        checked=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if get_rank() == 0:
        record.write(ctx.run_dir.proof)
    return record


def prove(run: RunEntry, model: Any, model_config: Any) -> dict[str, Any]:
    params = check_params(run, model)
    got, want = check_flops(run, model_config)
    return {
        "unique_params": params,
        "counted_flops_per_token": got,
        "formula_flops_per_token": want,
    }
