#!/usr/bin/env bash
# The test command (README's second command; .ci/run calls exactly this):
# installs what it needs, starts the local 2-node Slurm dev cluster (root only), validates the shipped
# specs, checks ruff and the import layering (lint-imports, contracts in pyproject.toml), runs the
# whole pytest suite on two workers, and stops the cluster again.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# shellcheck disable=SC1091
. .venv/bin/activate
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# Headless Chromium checks that report.html really renders its plots (Debian package).
if [ "$(id -u)" = "0" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "test: installing chromium (report screenshot test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    > .venv/chromium-install.log 2>&1 || echo "test: chromium install failed (see .venv/chromium-install.log)" >&2
fi

cluster_started=0
if [ "$(id -u)" = "0" ]; then
  # Two nodes, each a slurmd in its own network namespace: the multi-node tests need them.
  if bash scripts/slurm-dev-cluster.sh start --nodes 2; then
    cluster_started=1
  else
    echo "test: the local Slurm cluster did not start; Slurm tests will fail under CI=true" >&2
  fi
fi
cleanup() { [ "$cluster_started" = 1 ] && bash scripts/slurm-dev-cluster.sh stop >/dev/null 2>&1; }
trap cleanup EXIT

echo "== olmoablate validate --strict --skip-paths specs/ (as the CI template)"
olmoablate validate --strict --skip-paths specs/ || exit 1
echo "== ruff"
ruff check olmoablate tests bench scripts || exit 1
echo "== lint-imports (pipeline report -> run -> models -> plan -> base; login-node commands light; no cycles)"
lint-imports --no-cache || exit 1
# Two workers (pytest-xdist) on the 2-core box; the Slurm tests share the one cluster, so they run
# in order on one worker (xdist_group "slurm", tests/conftest.py) while the other takes the rest.
echo "== pytest (2 workers)"
python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-2}" --dist loadgroup --durations=30 "$@"
rc=$?
[ $rc -eq 5 ] && { echo "test: pytest collected no tests" >&2; exit 1; }
exit $rc
