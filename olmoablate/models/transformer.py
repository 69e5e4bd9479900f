"""``AblationTransformer``: OLMo-core's ``Transformer`` with SiameseNorm / Depth-Attention / Looped.

One subclass handles every variant combination so that the forward pass stays in one readable
place; the per-variant maths lives in :mod:`.siamese` and :mod:`.depth_attention`. The baseline is
never built through this class: ``build_model_config({})`` returns OLMo-core's own config.

Looped (K body blocks = ``self.blocks``, b loops, tail T = min(tail, b), P = embeddings)::

    H_0 = 0 (input_injection) or P (plain weight tying)
    H_{t+1} = F(H_t + P)  or  F(H_t);   optionally H_{t+1} = RMSNorm_state(H_{t+1})
    iterations t < b - T run under torch.no_grad(); the state is detached before the last T
    training loss = (1/T) Σ_{last T} CE(LMHead(H_t))  (the LM head's norm is the "Norm" here)
    eval (model.eval()) loss and all returned logits = the final loop's
    Depth-Attention inside the loop: unrolled index t * K + j

Training FLOPs per token (``num_flops_per_token``): OLMo-core's count of each block and of the LM
head, composed over the layer applications exactly as the plan composes its own
(:func:`olmoablate.plan.accounting.unrolled_flops`), plus Depth-Attention's term; the state norm is
not counted, like OLMo-core's block norms.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import torch
from olmo_core.nn.layer_norm import LayerNormConfig
from olmo_core.nn.lm_head import LMOutputWithLoss
from olmo_core.nn.transformer.model import Transformer
from olmo_core.utils import mark_dynamic, move_to_device

from olmoablate.models.block_model import model_part
from olmoablate.models.depth_attention import DepthState, read_later
from olmoablate.plan.accounting import unrolled, unrolled_flops
from olmoablate.plan.arch import Architecture, parse_architecture
from olmoablate.plan.blocks import LayerApp


class AblationTransformer(Transformer):
    """An OLMo 3 ``Transformer`` with the architecture changes described by ``arch``."""

    def __init__(self, *, arch: dict[str, Any], **kwargs: Any) -> None:
        settings = parse_architecture(arch)
        super().__init__(**kwargs)
        self.arch = settings
        lm_head_cfg = kwargs["lm_head"]
        layer_norm = cast(LayerNormConfig, lm_head_cfg.layer_norm)
        init_device = kwargs.get("init_device", "cpu")
        if settings.siamese_norm is not None:
            self.x_final_norm = layer_norm.build(self.d_model, init_device=init_device)
            self.y_final_norm = layer_norm.build(self.d_model, init_device=init_device)
        self.state_norm = None
        if settings.looped is not None and settings.looped.state_norm:
            self.state_norm = layer_norm.build(self.d_model, init_device=init_device)
        # the loop count of the first training step until the trainer sets one
        self.current_loops = settings.looped.loops_at_step(1) if settings.looped else 1
        self._h_norms: list[torch.Tensor] = []
        #: set to a dict by the depth diagnostic (``olmoablate.models.depth``): every
        #: Depth-Attention layer of a forward then records {unrolled index: (S_l, α)} here,
        #: α: (|S_l| + 1, B, T) averaged over KV heads, own layer first. None: nothing recorded.
        self.depth_weights: dict[int, tuple[tuple[int, ...], torch.Tensor]] | None = None
        # Transformer.__init__ cached these before the modules above existed.
        for name in ("num_params", "num_non_embedding_params"):
            self.__dict__.pop(name, None)
            getattr(self, name)  # re-cache (pipeline parallelism may remove params later)

    def set_train_step(self, step: int) -> int:
        """Apply the loop curriculum; returns the loop count b now in force.

        ``step`` is OLMo-core's 1-based ``trainer.global_step`` of the step about to be trained
        (the first step is 1), the convention of :meth:`olmoablate.plan.arch.Looped.loops_at_step`,
        which defines b for the model, the callback and the FLOPs accounting alike.
        """
        if self.arch.looped is not None:
            self.current_loops = self.arch.looped.loops_at_step(step)
        return self.current_loops

    @property
    def last_h_norms(self) -> list[float]:
        """Mean per-token L2 norm of H after each loop of the last forward (looped only)."""
        return [float(h) for h in self._h_norms]

    @property
    def last_h_norm_tensors(self) -> list[torch.Tensor]:
        """:attr:`last_h_norms` as 0-d tensors on the model's device: no host sync (the trainer
        moves recorded metrics to the host once per metrics interval, for every arm alike)."""
        return list(self._h_norms)

    def forward_all_loops(self, input_ids: torch.Tensor, n_loops: int) -> list[torch.Tensor]:
        """Logits after every loop 1..n_loops (for per-loop evaluation)."""
        outs = self._looped_states(self._embed(input_ids, None), n_loops, n_loops, {}, {})
        assert self.lm_head is not None
        return [cast(torch.Tensor, self.lm_head(h)) for h in outs]

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        *,
        input_embeddings: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        ignore_index: int = -100,
        loss_reduction: Literal["mean", "sum", "none"] = "mean",
        z_loss_multiplier: float | None = None,
        loss_div_factor: torch.Tensor | float | None = None,
        return_logits: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        n_loops: int | None = None,
        **kwargs: Any,
    ) -> torch.Tensor | LMOutputWithLoss:
        """Like ``Transformer.forward``; ``n_loops`` overrides the loop count (looped only)."""
        input_ids, labels, all_kw, per_kw, head_kw = self._prepare_inputs(
            input_ids,
            labels,
            ignore_index=ignore_index,
            loss_reduction=loss_reduction,
            z_loss_multiplier=z_loss_multiplier,
            loss_div_factor=loss_div_factor,
            return_logits=return_logits,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        all_kw.pop("loss_div_factor", None)
        p = self._embed(input_ids, input_embeddings)
        assert self.lm_head is not None

        if self.arch.looped is not None:
            b = self.current_loops if n_loops is None else n_loops
            if b < 1:
                raise ValueError(f"n_loops must be >= 1, got {b}")
            tail = min(self.arch.looped.tail, b)
            n_out = tail if (labels is not None and self.training) else 1
            outs = self._looped_states(p, b, n_out, all_kw, per_kw, grad_tail=tail)
            if labels is None:
                return self.lm_head(outs[-1], **head_kw)
            return self._mean_head_loss(outs, labels, head_kw)

        da = self.arch.depth_attention
        state = DepthState(da, len(self.blocks)) if da else None
        # two distinct tensors: a compiled block guards against aliased inputs (one more graph)
        h: Any = (p, p.clone()) if self.arch.siamese_norm is not None else p
        for key, block in self.blocks.items():
            idx = int(key)
            kw = {**all_kw, **per_kw.get(idx, {})}
            self._mark_dynamic(*(h if isinstance(h, tuple) else (h,)))
            h = self._run_block(block, h, kw, state, idx)
        if self.arch.siamese_norm is not None:
            h = self._merge_streams(h[0], h[1])
        if labels is not None:
            head_kw["labels"] = labels
        return self.lm_head(h, **head_kw)

    def _run_block(
        self, block: torch.nn.Module, h: Any, kw: dict[str, Any], state: DepthState | None, u: int
    ) -> Any:
        """One block at unrolled depth ``u``; Depth-Attention's store is read and written here,
        outside the (compiled) block, which only sees its sources' tensors (a DepthSlot)."""
        if state is None:
            return block(h, **kw)
        slot = state.slot(u)
        slot.record = self.depth_weights is not None
        self._mark_dynamic(*slot.source_keys, *slot.source_values)
        h = block(h, depth=slot, **kw)
        state.store(u, slot)
        if self.depth_weights is not None and slot.weights is not None:
            self.depth_weights[u] = (state.sources(u), slot.weights)
        return h

    def _merge_streams(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """SiameseNorm's final merge RMSNorm_fx(X) + RMSNorm_fy(Y) (compiled with the blocks)."""
        return self.x_final_norm(xs) + self.y_final_norm(ys)

    def _mark_dynamic(self, *tensors: torch.Tensor) -> None:
        """As OLMo-core's forward: batch/sequence sizes are dynamic for compiled blocks."""
        if self.compile_enabled:
            for t in tensors:
                mark_dynamic(t, (0, 1), strict=False)

    def _embed(
        self, input_ids: torch.Tensor, input_embeddings: torch.Tensor | None
    ) -> torch.Tensor:
        if input_embeddings is not None:
            return move_to_device(input_embeddings, self.device)
        h = self.embeddings(input_ids)
        if self.embed_scale is not None:
            h = h * self.embed_scale
        if self.embedding_norm is not None:
            h = self.embedding_norm(h)
        return h

    def _looped_states(
        self,
        p: torch.Tensor,
        n_loops: int,
        n_out: int,
        all_kw: dict[str, Any],
        per_kw: dict[int, dict[str, Any]],
        grad_tail: int | None = None,
    ) -> list[torch.Tensor]:
        """Run b loops; return the last ``n_out`` states. The first b - grad_tail run no-grad."""
        looped = self.arch.looped
        assert looped is not None
        k = len(self.blocks)
        grad_tail = n_loops if grad_tail is None else grad_tail
        da = self.arch.depth_attention
        state = DepthState(da, n_loops * k) if da else None
        h = torch.zeros_like(p) if looped.input_injection else p
        outs: list[torch.Tensor] = []
        self._h_norms = []
        for t in range(n_loops):
            no_grad = t < n_loops - grad_tail
            with torch.set_grad_enabled(torch.is_grad_enabled() and not no_grad):
                if t > 0 and t == n_loops - grad_tail:
                    h = h.detach()  # truncated backprop: nothing flows into earlier loops
                h = h + p if looped.input_injection else h
                for key, block in self.blocks.items():
                    j = int(key)
                    kw = {**all_kw, **per_kw.get(j, {})}
                    self._mark_dynamic(h)
                    h = self._run_block(block, h, kw, state, t * k + j)
                if self.state_norm is not None:
                    h = self.state_norm(h)
            self._h_norms.append(h.detach().float().norm(dim=-1).mean())
            if t >= n_loops - n_out:
                outs.append(h)
        return outs

    def _mean_head_loss(
        self, outs: list[torch.Tensor], labels: torch.Tensor, head_kw: dict[str, Any]
    ) -> LMOutputWithLoss:
        """Average the LM-head losses of several loop outputs in OLMo-core's output structure."""
        assert self.lm_head is not None
        results = [cast(LMOutputWithLoss, self.lm_head(h, labels=labels, **head_kw)) for h in outs]
        n = len(results)
        loss = sum(r.loss for r in results) / n
        ce = sum(r.ce_loss for r in results) / n
        z = None if results[0].z_loss is None else sum(r.z_loss for r in results) / n  # type: ignore[misc]
        return LMOutputWithLoss(logits=results[-1].logits, loss=loss, ce_loss=ce, z_loss=z)

    def apply_compile(self) -> None:
        """OLMo-core's per-block ``torch.compile`` plus the glue between blocks, with a
        recompile limit that fits this architecture's distinct block graphs (see
        :meth:`compile_graph_bound`; dynamo's default of 8 per code object would silently run
        the remaining layers eagerly)."""
        import torch._dynamo

        super().apply_compile()
        for key, opts in self.arch.blocks.items():
            model_part(key).apply_compile(self, opts)
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(int(limit), compile_graph_bound(self))

    def _attention_dims(self) -> tuple[int, int, int]:
        att = next(iter(self.blocks.values())).attention
        return int(att.n_heads), int(att.n_kv_heads), int(att.head_dim)

    def num_flops_per_token(self, seq_len: int) -> int:
        """OLMo-core's count of each block and of the LM head, composed over this forward's
        layer applications at the current loop count, plus Depth-Attention's mixing: the plan's
        own composition and formula (:func:`~olmoablate.plan.accounting.unrolled_flops`,
        :meth:`olmoablate.plan.arch.DepthAttention.layer_flops`)."""
        layer = [int(blk.num_flops_per_token(seq_len)) for blk in self.blocks.values()]  # type: ignore[operator]
        head = 0 if self.lm_head is None else int(self.lm_head.num_flops_per_token(seq_len))
        da = self.arch.depth_attention
        h_q, h_kv, d_h = self._attention_dims()

        def extra(app: LayerApp) -> int:
            return 0 if da is None else da.layer_flops(app.depth, h_q, h_kv, d_h)

        phase = self.current_loops if self.arch.looped is not None else None
        return unrolled_flops(unrolled(self.arch, len(layer), phase), layer, head, extra)


def block_signatures(model: torch.nn.Module, n_loops: int | None = None) -> set[tuple[Any, ...]]:
    """The distinct block calls of one forward as torch.compile sees them.

    A compiled block specializes on its attention kind (window), on the number of
    Depth-Attention sources it receives (a tuple length), on whether a later layer reads its
    (k, ṽ) (``DepthSlot.keep``) and, for looped models, on whether it runs in the no-grad prefix.
    Everything else (the layer index, 1/c_l, the loop index) is kept out of the graph, so this
    set - not the number of layers or loops - is what the compiled model needs graphs for.
    ``n_loops``: the largest loop count to cover (default: ``looped.loops``); with a loop
    curriculum every count 1..n_loops is covered. Works for OLMo-core's plain ``Transformer``
    (the baseline) too.
    """
    arch = getattr(model, "arch", Architecture())  # a plain OLMo-core Transformer: the baseline
    da = arch.depth_attention
    blocks = list(model.blocks.values())  # type: ignore[union-attr]
    k = len(blocks)
    looped = arch.looped
    b_max = (n_loops or looped.loops) if looped is not None else 1
    counts = range(1, b_max + 1) if looped is not None and looped.curriculum else [b_max]
    sigs: set[tuple[Any, ...]] = set()
    for b in counts:
        read = read_later(da, b * k) if da is not None else frozenset()
        for u in range(b * k):
            window = getattr(blocks[u % k].attention, "window_size", None)
            n_src = len(da.sources(u)) if da is not None else 0
            prefix = looped is not None and u < (b - min(looped.tail, b)) * k
            sigs.add((window, n_src, u in read, prefix))
    return sigs


def compile_graph_bound(model: torch.nn.Module) -> int:
    """Upper bound on the compiled graphs of one block code object over a whole run.

    Per signature: training (grad) and evaluation (no-grad) graphs, each possibly once more
    after the first call fills OLMo-core's RoPE buffer cache or turns shapes dynamic; plus the
    LM head's. The tests check that a run with a loop curriculum stays within it and that
    steady-state steps compile nothing.
    """
    return 4 * len(block_signatures(model)) + 4
