#!/usr/bin/env bash
# compare_losses.py, the fault drill's verdict: equal losses pass; a loss
# that differs in its last bit, a step the baseline lacks, an empty or
# missing summary fail.
set -uo pipefail
compare="$(dirname "$0")/compare_losses.py"
[[ -f "$compare" ]] || compare="scripts/compare_losses.py"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

summary() {  # summary FILE STEP:LOSS...
  local file=$1
  shift
  python3 - "$file" "$@" <<'PY'
import json, sys
steps = [{"step": int(a.split(":")[0]), "loss": float(a.split(":")[1])} for a in sys.argv[2:]]
json.dump({"steps": steps}, open(sys.argv[1], "w"))
PY
}

expect() {  # expect CODE DESCRIPTION RUN_FILE
  python3 "$compare" "$dir/base.json" "$3" >"$dir/out.txt"
  local code=$?
  if [[ $code != "$1" ]]; then
    echo "FAIL: $2: exit $code, expected $1: $(cat "$dir/out.txt")"
    failures=$((failures + 1))
  else
    echo "ok: $2: $(cat "$dir/out.txt")"
  fi
}

summary "$dir/base.json" 0:5.25 1:5.0 2:4.75 3:4.5
summary "$dir/same.json" 2:4.75 3:4.5
expect 0 "the same losses" "$dir/same.json"
summary "$dir/last_bit.json" 2:4.75 3:4.500000000000001
expect 1 "a loss one ulp away" "$dir/last_bit.json"
summary "$dir/extra.json" 3:4.5 4:4.25
expect 1 "a step the baseline lacks" "$dir/extra.json"
summary "$dir/empty.json"
expect 1 "no steps" "$dir/empty.json"
expect 1 "no summary" "$dir/missing.json"

if [[ $failures -ne 0 ]]; then
  echo "compare_losses_test: $failures FAILED"
  exit 1
fi
echo "compare_losses_test: PASSED"
