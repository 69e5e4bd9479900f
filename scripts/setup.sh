#!/usr/bin/env bash
# Create/refresh the project virtualenv (.venv) with everything olmoablate needs, CPU-only.
# Idempotent: a stamp of pyproject.toml skips the install when nothing changed.
# torch is pinned to the 2.13.0 CPU wheel first (ai2-olmo-core 3.0 needs torch >=2.10,<2.14;
# an unpinned torch would pull a multi-GB CUDA build). The dev extra brings pytest, ruff and
# import-linter (scripts/test.sh runs `lint-imports`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.olmoablate-installed
want=$(cat pyproject.toml scripts/setup.sh examples/*/pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log=.venv/setup.log
  echo "setup: installing into .venv (torch 2.13 CPU, ai2-olmo-core 3.0, ...; log: $log)"
  {
    # One resolver run for torch and the project. compat: the checkout goes on sys.path through
    # a plain .pth line; the default (strict) editable mode installs an import hook that costs
    # ~15 ms of every `olmoablate` start. --no-compile + compileall -j 0: pip byte-compiles the
    # ~1.7 GB of packages on one core; compileall does the same on every core (measured on 2
    # cores: 97 s -> 73 s for the whole set-up). The byte code matters: every training job
    # imports torch, OLMo-core and olmo-eval, 12 s instead of 5 s without it.
    # The example block package (examples/olmoablate-layerscale): installed like a user's
    # proposal, so its entry point is what the end-to-end plugin test discovers.
    python -m pip install --no-compile "torch==2.13.0" -e ".[dev,eval]" \
      -e examples/olmoablate-layerscale --config-settings editable_mode=compat &&
    # The checkout too: where PYTHONDONTWRITEBYTECODE is set (this project's CI machines) Python
    # never writes byte code itself, and `olmoablate --help` took 0.17 s instead of 0.12 s.
    { python -m compileall -q -j 0 olmoablate \
        "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ||
      echo "setup: some files did not byte-compile (they are compiled on import instead)"; }
  } > "$log" 2>&1 || { tail -n 30 "$log" >&2; echo "setup: pip install failed (full log: $log)" >&2; exit 1; }
  python -c "import torch, olmo_core, submitit, importlinter, grimp, olmoablate, olmoablate_layerscale" 2>/dev/null \
    || { echo "setup: install finished but imports fail (see $log)" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
