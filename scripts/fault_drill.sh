#!/usr/bin/env bash
# Fault drill on loopback: a small reproducible DCP job (dcp_local_job: the
# real dcp_planner and two dcp_worker processes, no profiling, no online
# refit, so that plans and losses depend on the batches only) run once
# uninterrupted, then under four faults:
#   1. the planner is SIGKILLed after step 1 and restarted --planner-down-for
#      later (default 30s, a pod restart) on the same port and --state-dir;
#   2. a worker is SIGKILLed after step 2; the job is resumed from its
#      checkpoint (--checkpoint-every=1);
#   3. the checkpoint disk is full: the resumed run's checkpoint write is made
#      to fail with a file-size limit (ulimit -f: EFBIG, injected in place of
#      ENOSPC, which needs a small file system), after a first run wrote one;
#   4. the planner gets SIGTERM after step 1 (a drained shutdown) and is
#      restarted 5 s later.
# For each it prints what happened and whether the losses of the steps that
# ran match the uninterrupted run's (scripts/compare_losses.py). It exits 0
# only when every fault ends as it should (the resumed or restarted runs
# succeed, their losses match exactly); otherwise 1, naming the faults that
# did not. --inject-loss-difference alters the reference loss of step 3
# after the uninterrupted run, so that every comparison must fail: a check
# that the drill can fail.
#
# Usage: scripts/fault_drill.sh [--planner-down-for=30s] [--work-dir=DIR]
#                               [--no-build] [--inject-loss-difference]
set -uo pipefail
cd "$(dirname "$0")/.."

down_for=30s
work=""
build=true
inject_difference=false
for argument in "$@"; do
  case "$argument" in
    --planner-down-for=*) down_for="${argument#*=}" ;;
    --work-dir=*) work="${argument#*=}" ;;
    --no-build) build=false ;;
    --inject-loss-difference) inject_difference=true ;;
    -h | --help)
      sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "fault_drill.sh: unknown argument '$argument' (see --help)" >&2
      exit 2
      ;;
  esac
done

if $build; then
  bazel build //launcher:dcp_local_job >/dev/null 2>&1 ||
    { echo "fault_drill.sh: bazel build //launcher:dcp_local_job failed" >&2; exit 1; }
fi
job=bazel-bin/launcher/dcp_local_job
[[ -x "$job" ]] || { echo "fault_drill.sh: $job is not built" >&2; exit 1; }
work="${work:-$(mktemp -d /tmp/dcp_fault_drill.XXXXXX)}"
mkdir -p "$work"

common=(--nodes=1 --ranks-per-node=2
  "--workload=longtail:median=64,tail_fraction=0.05,tail_min=256,max=1024,min=16"
  --global-batch-tokens=2048 --profile=false --online-refit=false
  --compare-bucket=false --compare-peers= --timeout=5m)
results=()

# [steps=N] run NAME FLAGS...: runs the job (6 steps unless told) in
# $work/NAME, its output in $work/NAME.out; its exit code.
run() {
  local name=$1
  shift
  rm -rf "${work:?}/$name"
  "$job" "${common[@]}" "--steps=${steps:-6}" "--work-dir=$work/$name" "$@" \
    >"$work/$name.out" 2>&1
}

# compare NAME: whether NAME's steps have the uninterrupted run's losses
# (prints the verdict; exit 0 when they match).
compare() {
  python3 scripts/compare_losses.py "$work/baseline/dcp_summary.json" \
    "$work/$1/dcp_summary.json"
}

# conclude FAULT NAME SUMMARY OK: prints whether NAME's steps have the
# uninterrupted run's losses, adds "SUMMARY; <that verdict>" to the summary,
# and counts FAULT as failed unless OK is "true" and the losses match.
failed_faults=()
conclude() {
  local verdict same=false
  verdict=$(compare "$2") && same=true
  echo "  $verdict"
  results+=("$3; $verdict")
  [[ $4 == true && $same == true ]] || failed_faults+=("$1")
}

# show FILE PATTERN: the matching lines of FILE, indented.
show() { grep -E "$2" "$1" 2>/dev/null | sed 's/^/    /'; }

echo "fault drill in $work (dcp_local_job, 1 node x 2 ranks, 6 steps)"

echo
echo "== 0. uninterrupted run"
run baseline
code=$?
echo "  exit code $code"
compare baseline | sed 's/^/  /'
[[ $code == 0 ]] || { echo "the uninterrupted run failed; see $work/baseline.out"; exit 1; }
if $inject_difference; then
  python3 - "$work/baseline/dcp_summary.json" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
for step in summary["steps"]:
    if step["step"] == 3:
        step["loss"] += 1e-6
json.dump(summary, open(sys.argv[1], "w"))
EOF
  echo "  (--inject-loss-difference: the reference loss of step 3 moved by 1e-6)"
fi

echo
echo "== 1. planner SIGKILLed after step 1, restarted $down_for later"
run planner_kill --restart-planner-after-step=1 --planner-stop-signal=KILL \
  "--planner-down-for=$down_for"
code=$?
echo "  exit code $code"
show "$work/planner_kill.out" "planner drill|FAILED|done in"
echo "  the workers' own words:"
show "$work/planner_kill/dcp-w0.log" "waiting for it|answered again|error"
show "$work/planner_kill/dcp-w1.log" "waiting for it|answered again|error"
conclude "1 (planner SIGKILL)" planner_kill \
  "1. planner SIGKILL, down $down_for: exit $code" "$([[ $code == 0 ]] && echo true)"

echo
echo "== 2. worker w1 SIGKILLed after step 2, then resumed from its checkpoint"
rm -rf "$work/worker_kill" "$work/worker_kill_checkpoints"
"$job" "${common[@]}" --steps=6 "--work-dir=$work/worker_kill" \
  "--checkpoint-dir=$work/worker_kill_checkpoints" --checkpoint-every=1 \
  >"$work/worker_kill.out" 2>&1 &
launcher=$!
until grep -q "^step 2:" "$work/worker_kill.out" 2>/dev/null || ! kill -0 "$launcher" 2>/dev/null; do
  sleep 0.1
done
# This drill's own w1: its command line names this drill's work directory.
victim=$(pgrep -f -- "--worker-id=w1 .*--summary-file=$work/worker_kill/dcp_summary.json" | head -1)
if [[ -n "$victim" ]]; then
  kill -KILL "$victim"
  echo "  sent SIGKILL to w1 (pid $victim) after step 2"
fi
wait "$launcher"
code=$?
echo "  the job: exit code $code"
show "$work/worker_kill.out" "^step |FAILED" | head -6
resumed_from=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["next_step"])' \
  "$work/worker_kill/dcp_summary.json" 2>/dev/null || echo "?")
run worker_kill_resumed "--checkpoint-dir=$work/worker_kill_checkpoints" --resume
resumed_code=$?
echo "  resumed (exit code $resumed_code):"
show "$work/worker_kill_resumed.out" "resumed from"
# The killed job fails; its resumption succeeds with the same losses.
conclude "2 (worker SIGKILL)" worker_kill_resumed \
  "2. worker SIGKILL after step 2: job exit $code; resumed at step $resumed_from, exit $resumed_code" \
  "$([[ -n $victim && $code != 0 && $resumed_code == 0 ]] && echo true)"

echo
echo "== 3. full checkpoint disk (injected: ulimit -f, EFBIG) after a good checkpoint"
checkpoints="$work/full_disk_checkpoints"
rm -rf "$checkpoints"
steps=2 run full_disk_first "--checkpoint-dir=$checkpoints"
first_code=$?
size=$(stat -c %s "$checkpoints/checkpoint.pt" 2>/dev/null || echo 0)
echo "  first run (steps 0..1, exit code $first_code) wrote $checkpoints/checkpoint.pt ($size bytes)"
limit_kib=$((size / 2048))
# Files may grow to half a checkpoint; SIGXFSZ ignored, so writes past it
# fail with EFBIG instead of killing the writer.
(
  trap '' XFSZ
  ulimit -f "$limit_kib"
  run full_disk "--checkpoint-dir=$checkpoints" --resume --checkpoint-every=1
)
code=$?
echo "  resumed run under a ${limit_kib} KiB file-size limit: exit code $code"
show "$work/full_disk.out" "^step |FAILED" | cut -c1-400
echo "  every rank's error:"
show "$work/full_disk/dcp-w0.log" "error:" | cut -c1-400
show "$work/full_disk/dcp-w1.log" "error:" | cut -c1-400
echo "  files left in $checkpoints: $(ls "$checkpoints" | tr '\n' ' ')"
run full_disk_after "--checkpoint-dir=$checkpoints" --resume
after_code=$?
echo "  resumed without the limit (exit code $after_code):"
show "$work/full_disk_after.out" "resumed from"
# The run under the limit fails; the previous checkpoint resumes.
conclude "3 (full checkpoint disk)" full_disk_after \
  "3. full checkpoint disk: exit $code with the error on every rank; previous checkpoint intact (resumed, exit $after_code)" \
  "$([[ $first_code == 0 && $code != 0 && $after_code == 0 ]] && echo true)"

echo
echo "== 4. planner SIGTERM after step 1 (--drain-timeout=2s), restarted 5 s later"
run planner_term --restart-planner-after-step=1 --planner-stop-signal=TERM \
  --planner-down-for=5s
code=$?
echo "  exit code $code"
show "$work/planner_term.out" "planner drill|FAILED|done in"
conclude "4 (planner SIGTERM)" planner_term "4. planner SIGTERM, down 5s: exit $code" \
  "$([[ $code == 0 ]] && echo true)"

echo
echo "== fault drill summary (logs in $work)"
for line in "${results[@]}"; do echo "  $line"; done
if [[ ${#failed_faults[@]} -ne 0 ]]; then
  echo "fault_drill: FAILED: fault(s) ${failed_faults[*]} did not end as they should"
  exit 1
fi
echo "fault_drill: PASSED"
