"""LM evaluation of the *whole* held-out set: long documents cut into overlapping chunks, exact means.

Why: OLMo-core's ``NumpyPaddedFSLDataset`` makes one instance per document, cut to the sequence
length, so the demo scored 2.8% of its held-out tokens (all document openings), and an eval set
with fewer documents than one batch gave NaN. Its ``LMEvaluator`` also averages one zero per
instance (the last position, whose target is padding, is kept by the input-side label mask).

Here:

* :class:`WholeSetEvalDataset` cuts each document into chunks of at most ``sequence_length``
  tokens starting at 0, L-1, 2(L-1), ... (`olmoablate.plan.tokens.chunk_bounds`, the rule
  `validate` counts with), so every token but each document's first is predicted exactly once,
  with the most context a chunk allows; it pads its length with empty (fully masked) instances
  to a whole number of eval batches so no partial last batch is dropped.
* :class:`WholeSetLMEvaluator` averages only positions whose target is a real token, and records
  ``<set>/tokens`` (tokens scored at this eval point, summed over ranks) beside CE and PPL.
* The same evaluator also scores the effective-depth diagnostic (`olmoablate.models.depth`) on
  the same batches, for every arm alike: ``eval/depth/<set>/layer_<i> CE`` (``loop_<t> CE`` for
  Looped OLMo), ``eval/depth/<set>/da_weight_<j>`` / ``da_self_<l>`` (Depth-Attention) and
  ``eval/depth/<set>/first_within_0.05``. A diagnostic, not a gate input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from olmo_core.data import NumpyPaddedFSLDataset, NumpyPaddedFSLDatasetConfig
from olmo_core.data.data_loader import TextDataLoaderBase
from olmo_core.distributed.utils import all_reduce_value, get_world_size
from olmo_core.eval.lm_evaluator import LMEvaluator
from olmo_core.exceptions import OLMoConfigurationError
from olmo_core.io import is_url
from olmo_core.train.callbacks import EvaluatorCallback, LMEvaluatorCallbackConfig
from olmo_core.train.train_module import EvalBatchSizeUnit

from olmoablate.io import write_bytes_atomic
from olmoablate.models.depth import DepthProfile, depth_profiles
from olmoablate.plan.tokens import chunk_bounds

#: Bump when the chunking rule changes, so cached index files are not reused.
_INDEX_NAME = "whole-set-chunk-indices-v1"


class WholeSetEvalDataset(NumpyPaddedFSLDataset):
    """Padded FSL eval dataset over every chunk of every document."""

    def __init__(self, *paths: Any, pad_to_instances: int = 1, **kwargs: Any) -> None:
        super().__init__(*paths, **kwargs)
        self.pad_to_instances = max(1, int(pad_to_instances))

    def _get_instance_indices_path(self, source_path: Any) -> Path:
        return self._get_indices_path(_INDEX_NAME, source_path)

    def _write_instance_indices(self) -> None:
        for path in self.paths:
            target = self._get_instance_indices_path(path)
            if target.is_file():
                continue
            if is_url(path):
                raise OLMoConfigurationError(f"whole-set LM eval needs local token files: {path}")
            tokens = np.memmap(path, dtype=self.dtype, mode="r")
            bounds = chunk_bounds(tokens, self.eos_token_id, self.sequence_length)
            if not len(bounds):
                raise OLMoConfigurationError(f"eval token file {path} has no document to score")
            write_bytes_atomic(target, bounds.astype(self.indices_dtype).reshape(-1).tobytes())

    @property
    def real_instances(self) -> int:
        """Chunks that hold tokens (the rest of ``len(self)`` is batch padding)."""
        return super().__len__()

    def __len__(self) -> int:
        m = self.pad_to_instances
        return -(-self.real_instances // m) * m

    def __getitem__(self, index: int) -> dict[str, Any]:
        index = int(index)
        if index < self.real_instances:
            return super().__getitem__(index)
        item = super().__getitem__(0)  # same keys and metadata layout; nothing scored
        item["input_ids"] = torch.full_like(item["input_ids"], self.pad_token_id)
        item["label_mask"] = torch.zeros_like(item["label_mask"])
        return item


@dataclass(kw_only=True)
class WholeSetEvalDatasetConfig(NumpyPaddedFSLDatasetConfig):
    """Config of :class:`WholeSetEvalDataset`; ``pad_to_instances`` is set by the callback."""

    pad_to_instances: int = 1

    def build(self) -> WholeSetEvalDataset:
        self.validate()
        paths, metadata, label_masks = self._resolve_paths_metadata(
            allow_mix=False, label_mask_paths=self.label_mask_paths
        )
        dataset = WholeSetEvalDataset(
            *paths,
            pad_to_instances=self.pad_to_instances,
            sequence_length=self.sequence_length,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            vocab_size=self.tokenizer.vocab_size,
            dtype=self.get_dtype(),
            bos_token_id=self.tokenizer.bos_token_id,
            metadata=metadata,
            include_instance_metadata=self.include_instance_metadata,
            instance_filter_config=self.instance_filter_config,
            label_mask_paths=label_masks,
        )
        return self._finalize(dataset)  # type: ignore[return-value]


class WholeSetLMEvaluator(LMEvaluator):
    """OLMo-core's LM evaluator with target-side masking and a scored-token count per set.

    ``last_metrics`` keeps the latest :meth:`compute_metrics`, which the looped evaluator records
    under the ``(loops=b)`` names instead of scoring the set again (``compute_metrics`` itself
    cannot be called twice: OLMo-core's ``MeanMetric.compute`` all-reduces its sums in place).
    """

    last_metrics: dict[str, torch.Tensor] | None = None
    #: the model the depth diagnostic reads (set by the callback config); None: no diagnostic
    depth_model: torch.nn.Module | None = None
    #: records one metric (``trainer.record_metric``); set with ``depth_model``
    record: Any = None
    #: off during the looped evaluator's extra loop-count passes (the profile does not depend on
    #: the loop count in force: Looped OLMo's is per loop up to the spec's count)
    collect_depth: bool = True
    #: ``evaluation.depth``: "every" eval point, the "final" one only (``is_final()``), or "none"
    depth_at: str = "every"
    is_final: Any = None
    _depth: dict[str, DepthProfile] | None = None

    _ids: torch.Tensor | None = None

    def __iter__(self) -> Any:
        # OLMo-core's eval_batch pops ``input_ids`` from the batch before update_metrics sees it:
        # keep them for the depth diagnostic
        for batch in super().__iter__():
            self._ids = batch.get("input_ids")
            yield batch

    def reset_metrics(self) -> None:
        super().reset_metrics()
        self._depth = None

    def update_metrics(
        self, batch: dict[str, Any], ce_loss: torch.Tensor | None, logits: torch.Tensor | None
    ) -> None:
        if ce_loss is None:
            return
        mask = batch.get("label_mask")
        if mask is None:
            mask = torch.ones_like(batch["input_ids"], dtype=torch.bool)
        ids = batch.get("input_ids", self._ids)
        wanted = self.depth_at == "every" or (
            self.depth_at == "final" and self.is_final is not None and self.is_final()
        )
        if self.depth_model is not None and self.collect_depth and wanted and ids is not None:
            labels = [md["label"] for md in batch["metadata"]]
            got = depth_profiles(self.depth_model, ids.to(mask.device), mask, labels)
            self._depth = self._depth if self._depth is not None else {}
            for label, prof in got.items():
                self._depth.setdefault(label, DepthProfile()).add(prof)
        # ce_loss[:, t] is the loss of predicting token t+1: real iff token t+1 is a real token.
        target = F.pad(mask[:, 1:], (0, 1), value=False).to(ce_loss.device)
        for idx, metadata in enumerate(batch["metadata"]):
            self.metrics[metadata["label"]].update(ce_loss[idx].masked_select(target[idx]))

    def compute_metrics(self) -> dict[str, torch.Tensor]:
        scored = {
            label: all_reduce_value(m.weight.clone(), device=m.device, group=m.process_group)
            for label, m in self.metrics.items()
        }
        out = super().compute_metrics()
        for label, n in scored.items():
            out[f"{label}/tokens"] = n
        self.last_metrics = dict(out)
        self._record_depth()
        return out

    def _record_depth(self) -> None:
        """Record the depth metrics of this eval pass (summed over ranks) under ``eval/depth``."""
        profiles, self._depth = self._depth, None
        if profiles is None or self.record is None:
            return
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, profiles)
            profiles = {}
            for part in gathered:
                for label, prof in part.items():
                    profiles.setdefault(label, DepthProfile()).add(prof)
        for label, prof in sorted(profiles.items()):
            for name, value in prof.metrics(label).items():
                self.record(name, value)


@dataclass
class WholeSetLMEvaluatorCallbackConfig(LMEvaluatorCallbackConfig):
    """OLMo-core's LM evaluator callback over the whole-set dataset and evaluator; ``depth_at``:
    the spec's ``evaluation.depth`` (when the depth diagnostic is scored)."""

    depth_at: str = "every"

    def build(self, trainer: Any) -> Any:
        if not self.enabled:
            return None
        cfg = self.eval_dataset
        if not isinstance(cfg, WholeSetEvalDatasetConfig):
            raise OLMoConfigurationError("eval_dataset must be a WholeSetEvalDatasetConfig")
        seq = int(cfg.sequence_length)
        spec = trainer.train_module.eval_batch_spec
        if spec.max_sequence_length is not None and seq > spec.max_sequence_length:
            raise OLMoConfigurationError(
                f"eval sequence length {seq} exceeds the train module's {spec.max_sequence_length}"
            )
        world = get_world_size(trainer.dp_process_group)
        if spec.batch_size_unit == EvalBatchSizeUnit.tokens:
            global_tokens = spec.rank_batch_size * world
        else:
            global_tokens = spec.rank_batch_size * seq * world
        cfg.pad_to_instances = max(1, global_tokens // seq)
        dataset = cfg.build()
        if not isinstance(trainer.data_loader, TextDataLoaderBase):
            raise OLMoConfigurationError("the LM evaluator needs a text data loader")
        evaluator = WholeSetLMEvaluator.from_numpy_dataset(
            dataset,
            name="lm",
            global_batch_size=global_tokens,
            collator=trainer.data_loader.collator,
            device=trainer.device,
            dp_process_group=trainer.dp_process_group,
            deterministic=self.deterministic,
        )
        evaluator.depth_model = trainer.train_module.model
        evaluator.record = trainer.record_metric
        evaluator.depth_at = self.depth_at
        evaluator.is_final = lambda: (
            trainer.max_steps is not None and trainer.global_step >= trainer.max_steps
        )
        return EvaluatorCallback(
            evaluators=[evaluator],
            eval_interval=self.eval_interval,
            fixed_steps=self.fixed_steps,
            log_interval=self.log_interval,
            eval_on_startup=self.eval_on_startup,
            cancel_after_first_eval=self.cancel_after_first_eval,
            eval_duration=self.eval_duration,
            eval_on_finish=self.eval_on_finish,
        )
