"""run: plan.json in, each run's files under ``results/<spec>/runs/<id>/`` out.

The second stage (docs/design.md). Two sides, one package:

* the launcher, torch-free (login node and the job wrapper on the compute node): ``launch``
  (the ``submit``/``status``/``cancel`` commands), ``submit`` (sending, budget, overrides),
  ``slurm`` (submitit against Slurm), ``localpool`` (the local executor), ``task`` (the
  callable submitit runs), ``state`` (run state: ledger, leases, reconcile, reasons, process
  identity), ``resume`` (what is resent or requeued, which checkpoint counts, the fallback),
  ``faults`` (one line per failure), ``files`` (the run's typed files), ``metricsfile`` and
  ``columnar`` (metrics.jsonl and its Arrow copy);
* the training job (torch, OLMo-core): ``job`` (:func:`olmoablate.run.job.run_job`), ``runplan``
  (one run entry, checked), ``trainer`` (OLMo-core configs), ``callbacks``, ``guards``,
  ``records`` (metrics.jsonl, fingerprints), ``eval`` (whole held-out sets), ``proof`` (what the
  job proves before step 1) and ``summary`` (summary.json's measured cost).

It imports plan and models (the job only), never report. Import-linter holds the launcher side
free of torch (``torch-only-in-the-job`` in pyproject.toml).
"""
