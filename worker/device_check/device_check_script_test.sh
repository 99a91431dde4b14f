#!/usr/bin/env bash
# scripts/device_check.sh with the CPU build of dcp_device_check:
#  1. `run --binary=... --device=cpu` end to end (tiny sizes): exit 0, every
#     (model, tokens, recomputed layers) row in the table and the TSV, each
#     printed error equal to |predicted - measured| / measured of the printed
#     values, and the median and worst lines equal to those of the rows;
#  2. the no-GPU paths exit 2 with their messages: the binary built without
#     CUDA, a Python whose torch sees no GPU, no Python, no bundle;
#  3. `pack --binary=...` makes a bundle under 64 MiB whose libraries resolve
#     into it, with nothing of torch's or CUDA's in it.
set -euo pipefail

runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE:-dcp}"
script="${runfiles}/scripts/device_check.sh"
binary="${runfiles}/worker/device_check/dcp_device_check"
tmp="${TEST_TMPDIR}"
failures=0

check() {  # check DESCRIPTION COMMAND...
  local description="$1"
  shift
  if "$@"; then
    echo "ok: ${description}"
  else
    echo "FAILED: ${description}" >&2
    failures=$((failures + 1))
  fi
}

contains() { grep -qF -- "$2" "$1"; }

# --- 1. The CPU pipeline end to end -----------------------------------------
out="${tmp}/out"
status=0
bash "${script}" run --binary="${binary}" --device=cpu --tokens=32,96 \
  --recompute=0,2 --out="${out}" >"${tmp}/run.stdout" 2>"${tmp}/run.stderr" || status=$?
if [[ "${status}" -ne 0 ]]; then
  echo "run --device=cpu exited ${status}; stderr:" >&2
  cat "${tmp}/run.stderr" >&2
  exit 1
fi
report="${out}/device_check.md"
check "the report is written to --out" test -s "${report}"
check "the report on stdout is the file's" cmp -s "${report}" "${tmp}/run.stdout"
check "the progress log is written to --out" contains "${out}/device_check.log" "running micro-batches of tiny"
check "one rank runs no collectives" contains "${out}/device_check.log" "no collectives at world size 1: one rank needs no backend"
check "the tiny GPT was fitted" contains "${report}" "fit of tiny:"
check "the tiny DiT was fitted" contains "${report}" "fit of tiny-dit:"
check "GEMMs were profiled" grep -qE '^  gemm +[0-9]+ tokens: ' "${report}"
check "attention backward was profiled" grep -qE '^  attention_backward +128 tokens: ' "${report}"
for op in all_reduce reduce_scatter all_gather all_to_all; do
  check "${op} is not timed at world size 1" bash -c "! grep -qE '^  ${op} +[0-9]+ bytes: ' '${report}'"
done

# Every row: | model | layers | tokens | k | pred s | meas s | err | pred B | meas B | err |
rows="${tmp}/rows"
grep -E '^\| tiny' "${report}" >"${rows}" || true
check "8 rows (2 models x 2 lengths x 2 recompute settings)" test "$(wc -l <"${rows}")" -eq 8
for model in tiny tiny-dit; do
  for tokens in 32 96; do
    for k in 0 2; do
      check "row ${model} ${tokens} tokens ${k} recomputed" \
        grep -qE "^\| ${model} \| 2 \| ${tokens} \| ${k} \| " "${rows}"
    done
  done
done
check "the TSV has a header and 8 rows" test "$(wc -l <"${out}/device_check.tsv")" -eq 9

# Recomputes each error from the printed values; prints the errors (in %)
# of column $1 (time: 8, peak: 11) one per line, or fails.
recomputed_errors() {
  awk -F'|' -v predicted="$(($1 - 2))" -v measured="$(($1 - 1))" -v error="$1" '
    function trim(s) { gsub(/^ +| +$/, "", s); return s }
    {
      p = trim($predicted) + 0; m = trim($measured) + 0; e = trim($error)
      if (e == "n/a") { bad = "no error printed: " $0; exit 1 }
      sub(/%$/, "", e)
      if (!(m > 0)) { bad = "measured value not positive: " $0; exit 1 }
      want = (p > m ? p - m : m - p) / m * 100
      if (want - e > 0.0051 || e - want > 0.0051) {
        bad = sprintf("printed %s%%, recomputed %.4f%%: %s", e, want, $0); exit 1
      }
      print e
    }
    END { if (bad != "") { print bad > "/dev/stderr"; exit 1 } }' "${rows}"
}

# The nearest-rank median (the ceil(n/2)-th smallest) and the largest.
summary_of() {
  sort -g | awk '{ v[NR] = $1 } END { printf "median %.2f%%, worst %.2f%%", v[int((NR + 1) / 2)], v[NR] }'
}

for column_and_name in "8 time" "11 peak"; do
  read -r column name <<<"${column_and_name}"
  if errors="$(recomputed_errors "${column}")"; then
    echo "ok: every ${name} error is |predicted - measured| / measured"
    expected="${name} error over 8 rows: $(summary_of <<<"${errors}")"
    check "the ${name} summary reads '${expected}'" contains "${report}" "${expected}"
  else
    echo "FAILED: ${name} errors do not match the printed values" >&2
    failures=$((failures + 1))
  fi
done
# The CPU meter measured every micro-batch's peak.
check "every row has a measured peak" bash -c "! grep -q 'n/a' '${rows}'"

# --- 2. No GPU: exit 2 with a clear message ----------------------------------
expect_usage_error() {  # DESCRIPTION MESSAGE COMMAND...
  local description="$1" message="$2"
  shift 2
  local code=0
  "$@" >"${tmp}/err.stdout" 2>"${tmp}/err.stderr" || code=$?
  if [[ "${code}" -eq 2 ]] && grep -qF -- "${message}" "${tmp}/err.stderr" &&
     ! grep -qiE 'terminate called|Traceback|core dumped' "${tmp}/err.stderr"; then
    echo "ok: ${description}"
  else
    echo "FAILED: ${description}: exit ${code}, stderr:" >&2
    cat "${tmp}/err.stderr" >&2
    failures=$((failures + 1))
  fi
}

expect_usage_error "the CPU build refuses --device=cuda" \
  "this dcp_device_check was built without CUDA" \
  bash "${script}" run --binary="${binary}"
expect_usage_error "the binary itself names --device=cpu as the way out" \
  "check the CPU pipeline with --device=cpu" "${binary}"

fake_bundle="${tmp}/fake_bundle"
mkdir -p "${fake_bundle}/bin"
cp "${binary}" "${fake_bundle}/bin/dcp_device_check"
echo "glibc_needed=2.17" >"${fake_bundle}/manifest.txt"
# A Python whose torch sees no GPU (what torch prints on a CPU machine).
cat >"${tmp}/python_without_gpu" <<EOF
#!/usr/bin/env bash
cat >/dev/null
echo torch_version=2.11.0+cu130
echo lib_dir=${tmp}/no_such_torch/lib
echo loaded_dirs=
echo cuda_available=0
EOF
chmod +x "${tmp}/python_without_gpu"
expect_usage_error "no visible GPU" "no CUDA GPU is visible" \
  bash "${script}" run --bundle="${fake_bundle}" --python="${tmp}/python_without_gpu"
expect_usage_error "no Python" "no Python at" \
  bash "${script}" run --bundle="${fake_bundle}" --python="${tmp}/no_such_python"
expect_usage_error "no bundle" "no bundle at" \
  bash "${script}" run --bundle="${tmp}/no_such_bundle"
# The real torch wheel, where it is installed with its Python dependencies.
torch_python=/opt/dcp/torch-venv/bin/python
if [[ -x "${torch_python}" ]] &&
   "${torch_python}" -c 'import sys, torch; sys.exit(torch.cuda.is_available())' 2>/dev/null; then
  expect_usage_error "no visible GPU, asked of the real torch" "no CUDA GPU is visible" \
    bash "${script}" run --bundle="${fake_bundle}" --python="${torch_python}"
fi

# --- 3. pack collects a bundle that resolves into itself --------------------
bundle="${tmp}/bundle"
status=0
bash "${script}" pack --binary="${binary}" --bundle="${bundle}" >"${tmp}/pack.stdout" 2>&1 || status=$?
cat "${tmp}/pack.stdout"
check "pack exits 0" test "${status}" -eq 0
check "pack prints the bundle's size" grep -qE 'MiB \([0-9]+ bytes; limit 64 MiB\)' "${tmp}/pack.stdout"
check "the bundle is at most 64 MiB" test "$(du -sb "${bundle}" | cut -f1)" -le $((64 * 1024 * 1024))
check "the bundle has the binary, the script and a manifest" \
  test -x "${bundle}/bin/dcp_device_check" -a -f "${bundle}/device_check.sh" -a -f "${bundle}/manifest.txt"
check "the bundle carries Abseil" bash -c "ls '${bundle}/lib' | grep -q '^libabsl_'"
check "the bundle carries the C++ runtime apart" test -f "${bundle}/lib/gcc/libstdc++.so.6"
check "the manifest names the glibc it needs" grep -qE '^glibc_needed=2\.[0-9]+$' "${bundle}/manifest.txt"
check "the bundle carries none of torch's or CUDA's libraries" \
  bash -c "! ls '${bundle}/lib' | grep -qE '^lib(torch|c10|cudart|cuda\\.|nccl|cublas)'"
unresolved="$(LD_LIBRARY_PATH="${bundle}/lib:${bundle}/lib/gcc" ldd "${bundle}/bin/dcp_device_check" |
  awk '$2 == "=>" && $3 !~ "^'"${bundle}"'/lib/" { print $1 }' |
  grep -vE '^(lib(torch|c10|gomp|cuda|cudart|cupti|nccl|cublas|nvrtc|nvJitLink|c|m|pthread|dl|rt|resolv|util|anl)[._]|linux-vdso|ld-linux)' || true)"
check "every other library resolves into the bundle (${unresolved:-none outside})" test -z "${unresolved}"

if [[ "${failures}" -gt 0 ]]; then
  echo "${failures} check(s) failed" >&2
  exit 1
fi
echo "PASSED"
