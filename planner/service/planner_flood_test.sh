#!/usr/bin/env bash
# planner_flood at a test's scale: eight 400K-sample batches sent at once to a
# dcp_planner with --memory-budget=384Mi. It must refuse some of them
# (RESOURCE_EXHAUSTED), plan the rest, and keep its peak resident memory
# (VmHWM, as the kernel counts it) within the budget: planner_flood exits 0
# only then.
set -euo pipefail
out="${TEST_TMPDIR:-/tmp}/planner_flood.out"
code=0
planner/service/planner_flood --planner-binary=planner/service/dcp_planner \
  --memory-budget=384Mi --batches=8 --samples=400K --concurrency=8 \
  --nodes=4 --gpus-per-node=8 >"${out}" 2>&1 || code=$?
cat "${out}"
fail() { echo "planner_flood_test: FAILED: $*" >&2; exit 1; }
[[ "${code}" -eq 0 ]] || fail "planner_flood exited ${code}"
grep -q "WITHIN the budget" "${out}" || fail "no WITHIN line"
grep -q "SubmitBatches: [0-9]* code 8" "${out}" ||
  fail "the flood was not large enough to be refused (no RESOURCE_EXHAUSTED)"
grep -q "GetPlan: [1-9][0-9]* OK" "${out}" || fail "no accepted step was planned"
echo "planner_flood_test: PASSED"
