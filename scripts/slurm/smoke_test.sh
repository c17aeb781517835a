#!/usr/bin/env bash
# Smoke test of the local Slurm cluster started by cluster.sh:
# sbatch, job array, scancel, scontrol requeue, sacct (+ submitit if installed).
#   bash scripts/slurm/smoke_test.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/slurm-smoke.XXXXXX)
cd "$WORK"
JOBS=()
cleanup() { ((${#JOBS[@]})) && scancel "${JOBS[@]}" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
fail() { echo "FAIL: $*" >&2; exit 1; }
sacct_state() { sacct -n -X -P -j "$1" -o State 2>/dev/null | head -n1; }
# wait_for SECONDS CMD... : poll until CMD succeeds
wait_for() {
  local t=$1; shift; local end=$((SECONDS + t))
  until "$@"; do ((SECONDS < end)) || return 1; sleep 0.2; done
}
is_state() { [[ $(sacct_state "$1") == $2* ]]; }
sq_state() { [[ $(squeue -h -j "$1" -o %T 2>/dev/null) == "$2" ]]; }
array_done() { [[ $(sacct -n -X -P -j "$1" -o State | grep -c '^COMPLETED$') == 3 ]]; }

t=$(now); j=$(sbatch --parsable --wrap 'sleep 1; echo hi'); JOBS+=("$j")
wait_for 60 is_state "$j" COMPLETED || fail "job $j: $(sacct_state "$j")"
grep -qx hi "slurm-$j.out" || fail "job $j output: $(cat "slurm-$j.out")"
echo "OK sbatch: job $j COMPLETED in sacct after $(since "$t")s"

t=$(now); a=$(sbatch --parsable --array=0-2%2 --wrap 'sleep 2'); JOBS+=("$a")
wait_for 60 array_done "$a" || { sacct -X -j "$a"; fail "array $a"; }
echo "OK array: 3 tasks of $a COMPLETED after $(since "$t")s"

j=$(sbatch --parsable --wrap 'sleep 100'); JOBS+=("$j")
wait_for 60 sq_state "$j" RUNNING || fail "job $j never RUNNING"
t=$(now); scancel "$j"
wait_for 15 is_state "$j" CANCELLED || fail "job $j after scancel: $(sacct_state "$j")"
echo "OK scancel: job $j CANCELLED in sacct after $(since "$t")s"

j=$(sbatch --parsable --wrap 'sleep 100'); JOBS+=("$j")
wait_for 60 sq_state "$j" RUNNING || fail "job $j never RUNNING"
t=$(now); scontrol requeue "$j"
wait_for 15 sq_state "$j" PENDING || fail "job $j not PENDING after requeue"
p=$(since "$t")
wait_for 60 sq_state "$j" RUNNING || fail "job $j not RUNNING again after requeue"
scontrol show job "$j" | grep -q 'Restarts=1' || fail "job $j Restarts != 1"
echo "OK requeue: job $j PENDING after ${p}s, RUNNING again after $(since "$t")s"
scancel "$j"

if python3 -c 'import submitit' 2>/dev/null; then
  python3 "$HERE/check_submitit.py" "$WORK/submitit"
else
  echo "SKIP submitit checks (pip install submitit)"
fi
echo "slurm smoke test: all OK"
