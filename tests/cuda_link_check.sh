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

source tests/cuda_build_checks.sh

exit_without_cuda_toolkit cuda_link_check
bazel build --config=cuda "$@" //worker:dcp_worker
binary="$(bazel info --config=cuda "$@" bazel-bin 2>/dev/null)/worker/dcp_worker"
missing="$(cuda_build_lacks "${binary}" "c10d::ProcessGroupNCCL::ProcessGroupNCCL" \
  "c10::cuda::CUDACachingAllocator::")"
if [[ -n "${missing}" ]]; then
  echo "cuda_link_check: ${binary} is not the CUDA build: it lacks ${missing}" >&2
  exit 1
fi
echo "cuda_link_check: PASSED: ${binary} links libtorch_cuda.so and libc10_cuda.so" \
     "and refers to ProcessGroupNCCL and the CUDA caching allocator"
