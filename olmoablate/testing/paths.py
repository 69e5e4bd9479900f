"""Where the test support's files are: the tiny spec it ships, and the checkout it runs from.

``MINIMAL_SPEC`` is package data (it travels with ``olmoablate.testing``, so a block package's own
tests can plan it too). ``REPO`` and ``TESTS`` name the source checkout this ``olmoablate`` was
imported from: only meaningful in a checkout (the test suite, ``bench/``), never in an install.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The tiny valid spec (one 64-wide size, one depth-attention variant, CPU topology) that the
#: launcher, Slurm and CLI tests plan through the real `plan` command and edit per test.
MINIMAL_SPEC = HERE / "specs" / "minimal.yaml"
#: The checkout root (the folder holding ``olmoablate/``, ``tests/``, ``specs/``).
REPO = HERE.parents[1]
#: The test suite's own data (``tests/fixtures/results_v*``, ``tests/specs/bad``).
TESTS = REPO / "tests"
