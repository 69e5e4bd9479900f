"""olmoablate.train: the training job (OLMo-core Trainer + olmoablate callbacks).

Public entry point: :func:`olmoablate.train.job.run_job` ``(plan_path, run_id) -> status dict``,
also ``python -m olmoablate.train.job PLAN RUN_ID`` under torchrun/srun. Submodules:
``plan`` (load + check a run entry, torch-free), ``config`` (run entry -> OLMo-core configs),
``callbacks`` (metrics/fingerprints/status/stability/curriculum/signals/wandb), ``decode``
(decode figures of a finished run), ``job``.
Nothing is imported here so that importing the package stays free of torch.
"""
