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
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log=.venv/setup.log
  echo "setup: installing into .venv (torch 2.13 CPU, ai2-olmo-core 3.0, ...; log: $log)"
  {
    python -m pip install "torch==2.13.0" &&
    # compat: the checkout goes on sys.path through a plain .pth line; the default (strict)
    # editable mode installs an import hook that costs ~15 ms of every `olmoablate` start.
    python -m pip install -e ".[dev,eval]" --config-settings editable_mode=compat
  } > "$log" 2>&1 || { tail -n 30 "$log" >&2; echo "setup: pip install failed (full log: $log)" >&2; exit 1; }
  python -c "import torch, olmo_core, submitit, importlinter, grimp, olmoablate" 2>/dev/null \
    || { echo "setup: install finished but imports fail (see $log)" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
