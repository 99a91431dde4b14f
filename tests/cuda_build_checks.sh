# Shared by the CI checks of the CUDA build (cuda_link_check.sh and
# device_check_pack_check.sh): sourced, not run.

# exit_without_cuda_toolkit CHECK: exits 0 with a note naming CHECK when there
# is no CUDA toolkit at $CUDA_HOME (default /usr/local/cuda).
exit_without_cuda_toolkit() {
  local cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  if [[ ! -e "${cuda_home}/include/cuda_runtime_api.h" ]]; then
    echo "$1: skipped: no CUDA toolkit at ${cuda_home} (set CUDA_HOME)"
    exit 0
  fi
}

# cuda_build_lacks BINARY SYMBOL...: prints what BINARY lacks of a CUDA build
# of LibTorch code, space-separated: libtorch_cuda.so and libc10_cuda.so among
# the libraries it needs, and each SYMBOL among its dynamic symbols (imported
# or, for data, defined by copy relocation). Prints nothing when it has all.
cuda_build_lacks() {
  local binary=$1
  shift
  local needed symbols library symbol missing=()
  # Read whole first: `grep -q` closing a pipe early fails it under pipefail.
  needed="$(readelf -d "${binary}")"
  symbols="$(nm -D --demangle "${binary}")"
  for library in libtorch_cuda.so libc10_cuda.so; do
    grep -qF "Shared library: [${library}]" <<<"${needed}" || missing+=("${library}")
  done
  for symbol in "$@"; do
    grep -qF "${symbol}" <<<"${symbols}" || missing+=("${symbol}")
  done
  echo "${missing[*]+"${missing[*]}"}"
}
