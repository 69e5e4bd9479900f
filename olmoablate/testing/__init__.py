"""Test support for olmoablate: what the test suite and the benchmarks build their inputs with.

Owns:

* :mod:`.synthetic` and :mod:`.synthetic_plan` -- the one synthetic-results builder (contract
  ``Plan`` objects and per-run files in the training job's format, with known truth);
* :mod:`.plans` -- the tiny CPU plans and raw token files the training and launch tests run;
  :mod:`.pair` -- the tiny baseline/variant pair and reading its runs back;
* :mod:`.cli` -- the real command line in a fresh process (``run_cli``);
  :mod:`.slurm` -- helpers of the launcher tests against the local Slurm cluster;
* :mod:`.blocks` -- deliberately wrong blocks a spec names as ``olmoablate.testing.blocks:ATTR``;
  :mod:`.gpu_env_target` -- a job target that records each task's device environment;
* :mod:`.results_check` -- ``olmoablate.results`` frames checked against report's files;
  :mod:`.plan_formats` -- plan.json as earlier releases wrote it;
* :mod:`.paths` -- the tiny spec shipped as package data (``specs/minimal.yaml``) and the checkout.

Who may import it: ``tests/``, ``bench/`` and ``scripts/`` (and a block package's own tests).
No module of the product does -- import-linter's ``testing-not-in-product`` contract and the top
layer of ``layers`` (pyproject.toml) check it -- so nothing here runs when real results are
planned, trained or reported. Importing this package imports nothing: each module pulls its
own dependencies (numpy, pandas, torch for :mod:`.blocks`) only when it is imported.
"""
