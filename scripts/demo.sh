#!/usr/bin/env bash
# The main job (README's first command): the bundled demo spec end to end on CPU.
#   setup -> demo data (Python docs; the shipped 4,096-entry BPE; offline after set-up)
#   -> validate -> plan -> train every arm with OLMo-core through submitit's local executor
#   -> report with the gate verdict.
# Running it again resumes/skips finished runs and re-reports.
#
#   bash scripts/demo.sh                                  # specs/demo.yaml
#   bash scripts/demo.sh --spec specs/ladder_demo.yaml    # the CPU scaling ladder, same steps
#
# --spec takes any spec on the demo's BPE data; the results go to $OLMOABLATE_RESULTS_ROOT
# (default results/) under the spec's name.
set -euo pipefail
SPEC=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --spec) [[ $# -ge 2 ]] || { echo "demo.sh: --spec needs a file" >&2; exit 2; }; SPEC=$2; shift 2 ;;
    --spec=*) SPEC=${1#--spec=}; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (usage: bash scripts/demo.sh [--spec FILE])" >&2; exit 2 ;;
  esac
done
# A relative --spec is the caller's (from the repository root it is the same path).
if [[ -n "$SPEC" && "$SPEC" != /* && -e "$SPEC" ]]; then
  SPEC="$(cd "$(dirname "$SPEC")" && pwd)/$(basename "$SPEC")"
fi
cd "$(dirname "$0")/.."
SPEC=${SPEC:-specs/demo.yaml}
[[ -f "$SPEC" ]] || { echo "demo.sh: no spec file $SPEC" >&2; exit 2; }
NAME=$(sed -n 's/^name:[[:space:]]*\([A-Za-z0-9_.-]*\).*/\1/p' "$SPEC" | head -n 1)
RESULTS="${OLMOABLATE_RESULTS_ROOT:-results}/${NAME:-?}"
start=$(date +%s)
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
bash scripts/prepare-data.sh --tokenizer bpe4096   # the demo's files only (dolma2: drop the flag)
echo "== validate";  olmoablate validate "$SPEC"
echo "== plan";      olmoablate plan "$SPEC"
echo "== submit (local executor)"
olmoablate submit "$SPEC" --executor local --parallel "${DEMO_PARALLEL:-2}"
echo "== report";    olmoablate report "$SPEC"
echo "demo finished in $(( $(date +%s) - start )) s; results in $RESULTS/ (report: $RESULTS/report.html)"
