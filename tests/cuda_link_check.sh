#!/usr/bin/env bash
# CI check that the CUDA build of dcp_worker compiles and links (nothing runs
# it: these machines have the CUDA toolkit but no GPU). Builds
# //worker:dcp_worker with --config=cuda (its own output folder,
# bazel-out/k8-optcuda) against the pinned torch wheel and the CUDA toolkit at
# $CUDA_HOME (default /usr/local/cuda), then checks that the binary links
# libtorch_cuda.so and libc10_cuda.so and that its NCCL process groups and
# CUDA allocator statistics were compiled in (it refers to their symbols).
# Extra arguments go to `bazel build`. Exits 0 with a note when there is no
# CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [[ ! -e "${cuda_home}/include/cuda_runtime_api.h" ]]; then
  echo "cuda_link_check: skipped: no CUDA toolkit at ${cuda_home} (set CUDA_HOME)"
  exit 0
fi
bazel build --config=cuda "$@" //worker:dcp_worker
binary="$(bazel info --config=cuda "$@" bazel-bin 2>/dev/null)/worker/dcp_worker"
needed="$(readelf -d "${binary}")"
# Dynamic symbols, imported or (data, by copy relocation) defined.
dynamic_symbols="$(nm -D --demangle "${binary}")"
status=0
for library in libtorch_cuda.so libc10_cuda.so; do
  if ! grep -q "Shared library: \[${library}\]" <<<"${needed}"; then
    echo "cuda_link_check: ${binary} does not link ${library}" >&2
    status=1
  fi
done
for symbol in "c10d::ProcessGroupNCCL::ProcessGroupNCCL" \
              "c10::cuda::CUDACachingAllocator::"; do
  if ! grep -qF "${symbol}" <<<"${dynamic_symbols}"; then
    echo "cuda_link_check: ${binary} does not refer to ${symbol}: was it built without CUDA?" >&2
    status=1
  fi
done
if [[ "${status}" -eq 0 ]]; then
  echo "cuda_link_check: PASSED: ${binary} links libtorch_cuda.so and libc10_cuda.so" \
       "and refers to ProcessGroupNCCL and the CUDA caching allocator"
fi
exit "${status}"
