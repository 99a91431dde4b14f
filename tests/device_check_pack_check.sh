#!/usr/bin/env bash
# CI check of the device check's bundle (nothing runs it on a GPU here):
# `scripts/device_check.sh pack` builds dcp_device_check with --config=cuda
# and collects it with its libraries into a temporary folder (pack itself
# fails above 64 MiB or when a library does not resolve into the bundle);
# this checks that the bundle's binary is the CUDA build (it links
# libtorch_cuda.so and libc10_cuda.so and refers to the CUDA caching
# allocator, which measures peak memory, and to at::cuda's device
# properties, which choose the attention kernel; at world size 1 it makes no
# NCCL communicator, so ProcessGroupNCCL is not expected), carries none of torch's
# or CUDA's libraries, and, where the pinned torch venv imports torch, that
# `run` on this machine without a GPU exits 2 with its message. Extra
# arguments go to `bazel build`. Exits 0 with a note when there is no CUDA
# toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."

source tests/cuda_build_checks.sh

exit_without_cuda_toolkit device_check_pack_check
bundle="$(mktemp -d)/device_check_bundle"
trap 'rm -rf "$(dirname "${bundle}")"' EXIT
bash scripts/device_check.sh pack --bundle="${bundle}" "$@"

status=0
binary="${bundle}/bin/dcp_device_check"
missing="$(cuda_build_lacks "${binary}" 'c10::cuda::CUDACachingAllocator' \
  'at::cuda::getDeviceProperties')"
if [[ -n "${missing}" ]]; then
  echo "device_check_pack_check: ${binary} is not the CUDA build: it lacks ${missing}" >&2
  status=1
fi
libraries="$(find "${bundle}/lib" -type f)"
if grep -qE '/lib(torch|c10|cudart|cublas|cudnn|nccl)[^/]*$' <<<"${libraries}"; then
  echo "device_check_pack_check: the bundle carries torch's or CUDA's libraries" >&2
  status=1
fi
python="${DCP_TORCH_VENV:-/opt/dcp/torch-venv}/bin/python"
if [[ -x "${python}" ]] &&
   "${python}" -c 'import sys, torch; sys.exit(torch.cuda.is_available())' 2>/dev/null; then
  code=0
  bash "${bundle}/device_check.sh" run --python="${python}" 2>"${bundle}.stderr" || code=$?
  if [[ "${code}" -ne 2 ]] || ! grep -q "no CUDA GPU is visible" "${bundle}.stderr"; then
    echo "device_check_pack_check: run without a GPU exited ${code}, not 2 with its message:" >&2
    cat "${bundle}.stderr" >&2
    status=1
  fi
fi
if [[ "${status}" -eq 0 ]]; then
  echo "device_check_pack_check: PASSED: the CUDA bundle is $(du -sh "${bundle}" | cut -f1)," \
       "carries no torch or CUDA library, and refuses to run without a GPU"
fi
exit "${status}"
