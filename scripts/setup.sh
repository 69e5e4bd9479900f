#!/usr/bin/env bash
# Create/refresh the project virtualenv (.venv) with everything olmoablate needs, CPU-only.
# Idempotent: a stamp of pyproject.toml skips the install when nothing changed.
# torch is pinned to the 2.13.0 CPU wheel first (ai2-olmo-core 3.0 needs torch >=2.10,<2.14;
# an unpinned torch would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.olmoablate-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  python -m pip install -q "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
  python -m pip install -q -e ".[dev,eval]" 2>&1 | grep -v "^WARNING: Location" || true
  python -c "import torch, olmo_core, submitit, olmoablate" 2>/dev/null \
    || { echo "setup: install failed (see pip output above)" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
