#!/usr/bin/env bash
# Installs LibTorch: the pinned PyPI torch wheel
# (third_party/libtorch/requirements.txt) in a virtual environment at
# $DCP_TORCH_VENV (default /opt/dcp/torch-venv); the build finds it at
# $DCP_TORCH_VENV/libtorch, a link to the wheel's `torch` folder
# (third_party/libtorch/libtorch.bzl). Only the wheel is installed (--no-deps):
# C++ needs none of its Python dependencies. The CUDA runtime libraries its
# libtorch_cpu.so needs (libcudart.so.13, libcupti.so.13) come from the CUDA
# toolkit at $CUDA_HOME (default /usr/local/cuda); where the toolkit lacks
# them, the pinned wheels of third_party/libtorch/cuda_runtime_requirements.txt
# are installed next to torch instead (on libtorch_cpu.so's rpath).
# With DCP_TORCH_CUDA=1 (the GPU image), all of torch's pinned CUDA libraries
# (third_party/libtorch/cuda_requirements.txt) are installed next to it and
# their include/ and lib/ folders linked together in $DCP_TORCH_VENV/cuda, a
# CUDA_HOME for `bazel build --config=cuda` on a machine without the toolkit.
# Idempotent: the environment is rebuilt only when what it should hold
# changes. Prints the size of the download and how long it took.
set -euo pipefail

venv="${DCP_TORCH_VENV:-/opt/dcp/torch-venv}"
libtorch_dir="$(cd "$(dirname "$0")/.." && pwd)/third_party/libtorch"
requirement_files=("${libtorch_dir}/requirements.txt")
cuda_lib="${CUDA_HOME:-/usr/local/cuda}/lib64"
if [[ "${DCP_TORCH_CUDA:-0}" == 1 ]]; then
  requirement_files+=("${libtorch_dir}/cuda_requirements.txt")
elif [[ ! -e "${cuda_lib}/libcudart.so.13" || ! -e "${cuda_lib}/libcupti.so.13" ]]; then
  echo "install_torch: ${cuda_lib} lacks libcudart.so.13 or libcupti.so.13; they come from PyPI"
  requirement_files+=("${libtorch_dir}/cuda_runtime_requirements.txt")
fi
stamp="$(echo "${requirement_files[@]##*/}" | cat - "${libtorch_dir}"/*requirements.txt |
         sha256sum | cut -d' ' -f1)"
if [[ -x "${venv}/bin/python3" && -e "${venv}/libtorch/lib/libtorch_cpu.so" &&
      "$(cat "${venv}/requirements.sha256" 2>/dev/null)" == "${stamp}" ]]; then
  echo "install_torch: LibTorch in ${venv}/libtorch is up to date"
  exit 0
fi

sudo=()
if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
fi
requirements=()
for file in "${requirement_files[@]}"; do
  requirements+=(-r "${file}")
done
echo "install_torch: installing $(cat "${requirement_files[@]}" | grep -v '^[#-]' | xargs) into ${venv}"
"${sudo[@]}" rm -rf "${venv}"
"${sudo[@]}" /usr/bin/python3 -m venv "${venv}"
download="$(mktemp -d)"
trap 'rm -rf "${download}"' EXIT
start="$(date +%s)"
"${venv}/bin/python3" -m pip download -q --disable-pip-version-check --no-input --no-deps \
  --only-binary=:all: -d "${download}" "${requirements[@]}"
echo "install_torch: downloaded $(du -sm "${download}" | cut -f1) MiB in" \
     "$(($(date +%s) - start)) s: $(cd "${download}" && echo *)"
"${sudo[@]}" "${venv}/bin/python3" -m pip install -q --disable-pip-version-check --no-input \
  --no-deps --no-index "${download}"/*.whl
torch_dir="$(echo "${venv}"/lib/python3*/site-packages/torch)"
if [[ ! -e "${torch_dir}/lib/libtorch_cpu.so" ]]; then
  echo "install_torch: ${torch_dir}/lib/libtorch_cpu.so is missing after the install" >&2
  exit 1
fi
"${sudo[@]}" ln -sfn "${torch_dir}" "${venv}/libtorch"
if [[ "${DCP_TORCH_CUDA:-0}" == 1 ]]; then
  "${sudo[@]}" mkdir -p "${venv}/cuda/include" "${venv}/cuda/lib64"
  for entry in "${torch_dir}"/../nvidia/*/include/*; do
    "${sudo[@]}" ln -sfn "$(realpath "${entry}")" "${venv}/cuda/include/$(basename "${entry}")"
  done
  for entry in "${torch_dir}"/../nvidia/*/lib/*; do
    "${sudo[@]}" ln -sfn "$(realpath "${entry}")" "${venv}/cuda/lib64/$(basename "${entry}")"
  done
  echo "install_torch: CUDA_HOME for --config=cuda: ${venv}/cuda"
fi
echo "${stamp}" | "${sudo[@]}" tee "${venv}/requirements.sha256" >/dev/null
echo "install_torch: LibTorch is ${venv}/libtorch ($(du -sm "${torch_dir}" | cut -f1) MiB" \
     "installed, $(($(date +%s) - start)) s in all)"
