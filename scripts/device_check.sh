#!/usr/bin/env bash
# The device check: profile, fit and predicted-vs-measured
# micro-batches of reduced-depth llama3-8b and video-dit-1b on one H200.
#
#   scripts/device_check.sh pack [--bundle=DIR] [--binary=PATH] [BAZEL_ARGS...]
#       Here (Bazel, the pinned torch wheel, the CUDA toolkit): builds
#       //worker/device_check:dcp_device_check with --config=cuda (or takes
#       --binary), and collects it with every shared library it needs besides
#       torch's, CUDA's and glibc's (gRPC, protobuf, Abseil, ...) into DIR
#       (default device_check_bundle/), with this script and a manifest.
#       Prints the bundle's size; fails above 64 MiB or when a library does
#       not resolve into the bundle.
#   scripts/device_check.sh run [--bundle=DIR | --binary=PATH] [--python=PY]
#                               [--time-limit=SECONDS] [CHECK_FLAGS...]
#       On the device (one GPU; torch==2.11.0 at `python3`; no Bazel, no
#       network): finds the device's torch libraries through PY (default
#       python3), checks glibc, the GPU and that every library resolves, then
#       runs the check (CHECK_FLAGS go to dcp_device_check, e.g.
#       --device=cpu, --sizes=tiny; see `run --help`) under a time limit
#       (default 360 s; its phase budgets add up to about 5 minutes),
#       writing the report, the rows and the progress log to $OUT (or
#       --out=DIR) as well.
#       With --binary it runs that binary as it is (no bundle, no Python):
#       the CPU pipeline here (`run --binary=bazel-bin/... --device=cpu`).
#
# Exit codes: 0 ok; 1 the check (or the pack) failed; 2 a usage error, or
# nothing to run on here (no GPU, no Python with torch, no bundle).
set -euo pipefail

readonly kBundleLimitBytes=$((64 * 1024 * 1024))
readonly kTorchVersion="2.11.0"
readonly kTarget="//worker/device_check:dcp_device_check"

script_path="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

usage() {
  sed -n '2,/^set -euo/p' "${script_path}" | sed '$d' | sed 's/^# \{0,1\}//'
}

usage_error() {
  echo "device_check.sh: $*" >&2
  exit 2
}

fail() {
  echo "device_check.sh: $*" >&2
  exit 1
}

# Libraries the device provides: torch's own (they come from its wheel),
# CUDA's and NVIDIA's (torch's wheel dependencies load them), and glibc's.
provided_by_device() {
  local name="$1"
  case "${name}" in
    libtorch*|libc10*|libcaffe2*|libshm*|libgomp*) return 0 ;;
    libcuda.*|libcudart*|libcublas*|libcudnn*|libcufft*|libcurand*) return 0 ;;
    libcusolver*|libcusparse*|libcupti*|libnccl*|libnvrtc*|libnvToolsExt*) return 0 ;;
    libnvJitLink*|libnvshmem*|libcufile*|libnvidia*|libnvperf*) return 0 ;;
    linux-vdso.so*|ld-linux*|libc.so.*|libm.so.*|libpthread.so.*) return 0 ;;
    libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|libanl.so.*) return 0 ;;
  esac
  return 1
}

# The C++ runtime: bundled apart (lib/gcc), used where the device's glibc allows.
is_gcc_runtime() {
  case "$1" in
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
  esac
  return 1
}

# "NAME PATH" per library `ldd` lists for $1 (PATH "not-found" when it does
# not resolve).
ldd_libraries() {
  ldd "$1" | awk '
    $2 == "=>" && $3 == "not" { print $1, "not-found"; next }
    $2 == "=>" { print $1, $3; next }
    $1 ~ /^\// { n = split($1, parts, "/"); print parts[n], $1 }'
}

# The newest GLIBC_x.y symbol version the given ELF files need.
glibc_needed() {
  local file
  for file in "$@"; do
    objdump -T "${file}" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' || true
  done | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -u | tail -n 1
}

# 0 when version $1 >= $2 (x.y).
version_at_least() {
  [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -t. -k1,1n -k2,2n | head -n 1)" == "$2" ]]
}

cmd_pack() {
  local bundle="" binary=""
  local bazel_args=()
  local arg
  for arg in "$@"; do
    case "${arg}" in
      --bundle=*) bundle="${arg#--bundle=}" ;;
      --binary=*) binary="${arg#--binary=}" ;;
      -h|--help) usage; exit 0 ;;
      *) bazel_args+=("${arg}") ;;
    esac
  done
  local repo
  repo="$(cd "$(dirname "${script_path}")/.." && pwd)"
  [[ -n "${bundle}" ]] || bundle="${repo}/device_check_bundle"
  if [[ -z "${binary}" ]]; then
    command -v bazel >/dev/null || usage_error "pack builds with Bazel, which is not installed here; pass --binary=PATH to collect a built binary"
    (cd "${repo}" && bazel build --config=cuda "${bazel_args[@]}" "${kTarget}")
    binary="$(cd "${repo}" && bazel info --config=cuda "${bazel_args[@]}" bazel-bin 2>/dev/null)/worker/device_check/dcp_device_check"
  elif [[ "${#bazel_args[@]}" -gt 0 ]]; then
    usage_error "pack: unexpected arguments with --binary: ${bazel_args[*]}"
  fi
  [[ -x "${binary}" ]] || usage_error "pack: no executable at ${binary}"

  rm -rf "${bundle}"
  mkdir -p "${bundle}/bin" "${bundle}/lib"
  cp "${binary}" "${bundle}/bin/dcp_device_check"
  chmod u+w "${bundle}/bin/dcp_device_check"
  strip --strip-unneeded "${bundle}/bin/dcp_device_check" 2>/dev/null || true
  cp "${script_path}" "${bundle}/device_check.sh"

  local name path missing="" provided=""
  while read -r name path; do
    if provided_by_device "${name}"; then
      provided+=" ${name}"
      continue
    fi
    if [[ "${path}" == "not-found" ]]; then
      missing+=" ${name}"
      continue
    fi
    local into="${bundle}/lib"
    is_gcc_runtime "${name}" && into="${bundle}/lib/gcc"
    mkdir -p "${into}"
    cp -L "${path}" "${into}/${name}"
    chmod u+w "${into}/${name}"
  done < <(ldd_libraries "${binary}")
  [[ -z "${missing}" ]] || fail "pack: ${binary} needs libraries that do not resolve here:${missing}"

  # With the bundle first on the path, every library must come from the
  # bundle or from what the device provides.
  local stray=""
  while read -r name path; do
    provided_by_device "${name}" && continue
    [[ "${path}" == "${bundle}/lib/${name}" || "${path}" == "${bundle}/lib/gcc/${name}" ]] ||
      stray+=" ${name}=${path}"
  done < <(LD_LIBRARY_PATH="${bundle}/lib:${bundle}/lib/gcc" ldd_libraries "${bundle}/bin/dcp_device_check")
  [[ -z "${stray}" ]] || fail "pack: libraries outside the bundle:${stray}"

  # The bundle's libstdc++ and libgcc_s need this machine's glibc; where the
  # device's is older, run uses the device's own C++ runtime instead.
  local glibc glibc_gcc glibc_gcc_max=""
  glibc="$(glibc_needed "${bundle}/bin/dcp_device_check" "${bundle}"/lib/*.so*)"
  glibc_gcc="$(glibc_needed "${bundle}"/lib/gcc/*)"
  version_at_least "${glibc}" "${glibc_gcc:-0.0}" || glibc_gcc_max="${glibc_gcc}"
  {
    echo "binary=dcp_device_check"
    echo "built_from=$(git -C "${repo}" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "torch_version=${kTorchVersion}"
    echo "glibc_needed=${glibc}"
    echo "glibc_needed_by_gcc_runtime=${glibc_gcc_max:-${glibc}}"
    echo "from_device:${provided}"
  } > "${bundle}/manifest.txt"

  local bytes
  bytes="$(du -sb "${bundle}" | cut -f1)"
  echo "device_check.sh pack: ${bundle}: $(find "${bundle}/lib" -type f | wc -l) libraries," \
       "$(awk -v b="${bytes}" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
       "(${bytes} bytes; limit 64 MiB); needs glibc >= ${glibc} (${glibc_gcc_max:-${glibc}} for its own" \
       "libstdc++) and torch ${kTorchVersion} on the device"
  [[ "${bytes}" -le "${kBundleLimitBytes}" ]] || fail "pack: the bundle is over 64 MiB"
}

# Prints KEY=VALUE lines about $1's torch (import_error=... when it has none).
probe_torch() {
  "$1" - <<'PY'
import os, sys
try:
    import torch
except Exception as error:  # noqa: BLE001 - any failure means no usable torch
    print("import_error=" + repr(error).replace("\n", " "))
    sys.exit(0)
print("torch_version=" + torch.__version__)
print("lib_dir=" + os.path.join(os.path.dirname(torch.__file__), "lib"))
dirs = []
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split()
        path = fields[-1] if len(fields) >= 6 else ""
        directory = os.path.dirname(path)
        if ".so" in path and "-packages/" in path and directory not in dirs:
            dirs.append(directory)
print("loaded_dirs=" + ":".join(dirs))
available = torch.cuda.is_available()
print("cuda_available=" + ("1" if available else "0"))
if available:
    properties = torch.cuda.get_device_properties(0)
    print("gpu=%s, %.0f GiB" % (properties.name, properties.total_memory / 2**30))
PY
}

cmd_run() {
  local bundle="" binary="" python="python3" time_limit=360 device="cuda"
  local out="${OUT:-}"
  local check_args=()
  local arg
  for arg in "$@"; do
    case "${arg}" in
      --bundle=*) bundle="${arg#--bundle=}" ;;
      --binary=*) binary="${arg#--binary=}" ;;
      --python=*) python="${arg#--python=}" ;;
      --time-limit=*) time_limit="${arg#--time-limit=}" ;;
      --out=*) out="${arg#--out=}" ;;
      --device=*) device="${arg#--device=}"; check_args+=("${arg}") ;;
      *) check_args+=("${arg}") ;;
    esac
  done
  [[ "${time_limit}" =~ ^[1-9][0-9]*$ ]] || usage_error "run: --time-limit=${time_limit}: must be a positive number of seconds"
  [[ -z "${bundle}" || -z "${binary}" ]] || usage_error "run: give --bundle or --binary, not both"

  local library_path="${LD_LIBRARY_PATH:-}"
  if [[ -z "${binary}" ]]; then
    if [[ -z "${bundle}" ]]; then
      local here
      here="$(dirname "${script_path}")"
      if [[ -x "${here}/bin/dcp_device_check" ]]; then
        bundle="${here}"
      else
        bundle="$(cd "${here}/.." && pwd)/device_check_bundle"
      fi
    fi
    binary="${bundle}/bin/dcp_device_check"
    [[ -x "${binary}" && -f "${bundle}/manifest.txt" ]] || usage_error "run: no bundle at ${bundle}: run \`scripts/device_check.sh pack\` on the build machine and copy its folder here (or pass --bundle=DIR)"

    command -v "${python}" >/dev/null 2>&1 || usage_error "run: no Python at '${python}': the device check takes torch's libraries from a Python with torch==${kTorchVersion} (pass --python=PATH)"
    local probe
    probe="$(probe_torch "${python}")" || usage_error "run: ${python} failed to run"
    local import_error
    import_error="$(sed -n 's/^import_error=//p' <<<"${probe}")"
    [[ -z "${import_error}" ]] || usage_error "run: ${python} cannot import torch (${import_error}): install torch==${kTorchVersion} there or pass --python=PATH"
    local torch_version
    torch_version="$(sed -n 's/^torch_version=//p' <<<"${probe}")"
    [[ "${torch_version%%+*}" == "${kTorchVersion}" ]] || usage_error "run: ${python} has torch ${torch_version}, but the bundle was built against torch ${kTorchVersion}; use a Python with torch==${kTorchVersion}"
    if [[ "${device}" == "cuda" ]] && ! grep -qx 'cuda_available=1' <<<"${probe}"; then
      usage_error "run: no CUDA GPU is visible (torch.cuda.is_available() is False in ${python}${CUDA_VISIBLE_DEVICES+; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES}}): this check needs one GPU (an H200); \`run --device=cpu\` checks the pipeline on the CPU"
    fi
    echo "device_check.sh: torch ${torch_version}; $(sed -n 's/^gpu=//p' <<<"${probe}")" >&2

    local glibc_needed glibc_gcc glibc_here gcc_runtime="${bundle}/lib/gcc"
    glibc_needed="$(sed -n 's/^glibc_needed=//p' "${bundle}/manifest.txt")"
    glibc_gcc="$(sed -n 's/^glibc_needed_by_gcc_runtime=//p' "${bundle}/manifest.txt")"
    glibc_here="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')"
    if [[ -n "${glibc_needed}" && -n "${glibc_here}" ]]; then
      version_at_least "${glibc_here}" "${glibc_needed}" ||
        usage_error "run: this machine has glibc ${glibc_here}, the bundle needs ${glibc_needed}: pack it on a machine with an older glibc"
      if [[ -n "${glibc_gcc}" ]] && ! version_at_least "${glibc_here}" "${glibc_gcc}"; then
        echo "device_check.sh: glibc ${glibc_here} is older than the bundled libstdc++ needs (${glibc_gcc}); using this machine's C++ runtime" >&2
        gcc_runtime=""
      fi
    fi
    library_path="${bundle}/lib${gcc_runtime:+:${gcc_runtime}}:$(sed -n 's/^lib_dir=//p' <<<"${probe}"):$(sed -n 's/^loaded_dirs=//p' <<<"${probe}")${library_path:+:${library_path}}"
    local unresolved ldd_output
    ldd_output="$(LD_LIBRARY_PATH="${library_path}" ldd "${binary}" 2>&1 || true)"
    unresolved="$(LD_LIBRARY_PATH="${library_path}" ldd_libraries "${binary}" | awk '$2 == "not-found" { printf " %s", $1 }')"
    [[ -z "${unresolved}" ]] || fail "run: ${binary} needs libraries that do not resolve here:${unresolved}"
    if grep -q "version .* not found" <<<"${ldd_output}"; then
      fail "run: a library is older than the bundle needs: $(grep -m 3 "version .* not found" <<<"${ldd_output}" | tr '\n' ' ')"
    fi
  fi
  [[ -x "${binary}" ]] || usage_error "run: no executable at ${binary}"

  if [[ -n "${out}" ]]; then
    mkdir -p "${out}"
    check_args+=("--out=${out}")
  fi
  local status=0 log=/dev/null
  [[ -z "${out}" ]] || log="${out}/device_check.log"
  LD_LIBRARY_PATH="${library_path}" timeout --kill-after=30 "${time_limit}" \
    "${binary}" "${check_args[@]}" 2> >(tee "${log}" >&2) || status=$?
  if [[ "${status}" -eq 124 || "${status}" -eq 137 ]]; then
    fail "run: the check passed its time limit of ${time_limit} s (--time-limit); lower its phase budgets (dcp_device_check --help)"
  fi
  return "${status}"
}

main() {
  [[ $# -gt 0 ]] || { usage >&2; exit 2; }
  local command="$1"
  shift
  case "${command}" in
    pack) cmd_pack "$@" ;;
    run) cmd_run "$@" ;;
    -h|--help|help) usage ;;
    *) usage_error "unknown command '${command}': use pack or run (see --help)" ;;
  esac
}

main "$@"
