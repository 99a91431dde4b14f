#!/usr/bin/env bash
# Installs missing build dependencies, then builds and runs the tests.
# Extra arguments go to `bazel test`: flags (e.g. `--jobs=1`) and, optionally,
# target patterns; without a target pattern every test runs (`//...`) and
# then scripts/fault_drill.sh runs a small job under faults,
# tests/cuda_link_check.sh checks that the CUDA build of dcp_worker links
# and tests/device_check_pack_check.sh that the device check's bundle packs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh

args=("$@")
flags=()
has_target=false
for arg in "${args[@]+"${args[@]}"}"; do
  if [[ "${arg}" != -* ]]; then
    has_target=true
  else
    flags+=("${arg}")
  fi
done
if [[ "${has_target}" == false ]]; then
  args+=("//...")
fi

echo "run_all: bazel test ${args[*]}"
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
status=0
bazel test "${args[@]}" 2>&1 | tee "${log}" || status=$?
# One closing line with the counts of test targets, for CI.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "${log}" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)|FAILED TO BUILD' "${log}" || true)
if [[ "${status}" -ne 0 && "${failed}" -eq 0 ]]; then
  failed=1  # the build itself failed
fi
# check PASSED_LINE COMMAND...: one of the checks beyond bazel's tests, which
# counts as one: passed when COMMAND succeeds and, with a PASSED_LINE, prints a
# line starting with it (a check that skips itself counts as neither); failed
# when COMMAND fails.
check() {
  local passed_line=$1
  shift
  echo "run_all: $*"
  if "$@" 2>&1 | tee "${log}"; then
    if [[ -z "${passed_line}" ]] || grep -q "^${passed_line}" "${log}"; then
      passed=$((passed + 1))
    fi
  else
    status=1
    failed=$((failed + 1))
  fi
}
if [[ "${has_target}" == false ]]; then
  # The dcp-torch package's pytest suite (python/), against the dcp_planner
  # that `bazel test //...` built (before the CUDA build moves bazel-bin).
  check "" bash python/run_tests.sh
  # The fault drill: a small loopback job under four faults (planner killed,
  # worker killed, full checkpoint disk, planner drained), against the
  # dcp_local_job that `bazel test //...` built.
  check "fault_drill: PASSED" \
    bash scripts/fault_drill.sh --no-build --planner-down-for=5s
  check "cuda_link_check: PASSED" \
    bash tests/cuda_link_check.sh "${flags[@]+"${flags[@]}"}"
  check "device_check_pack_check: PASSED" \
    bash tests/device_check_pack_check.sh "${flags[@]+"${flags[@]}"}"
fi
echo "run_all: ${passed} passed, ${failed} failed"
exit "${status}"
