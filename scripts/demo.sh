#!/usr/bin/env bash
# The main job (README's first command): the bundled demo spec end to end on CPU.
#   setup -> demo data (Python docs; the shipped 4,096-entry BPE; offline after set-up)
#   -> validate -> plan -> train every arm with OLMo-core through submitit's local executor
#   -> report with the gate verdict.
# Running it again resumes/skips finished runs and re-reports.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
bash scripts/prepare-data.sh --tokenizer bpe4096   # the demo's files only (dolma2: drop the flag)
echo "== validate";  olmoablate validate specs/demo.yaml
echo "== plan";      olmoablate plan specs/demo.yaml
echo "== submit (local executor)"
olmoablate submit specs/demo.yaml --executor local --parallel "${DEMO_PARALLEL:-2}"
echo "== report";    olmoablate report specs/demo.yaml
echo "demo finished in $(( $(date +%s) - start )) s; results in results/demo/ (report: results/demo/report.html)"
