#!/usr/bin/env bash
# Installs missing build dependencies, then builds and runs the tests.
# Extra arguments go to `bazel test`: flags (e.g. `--jobs=1`) and, optionally,
# target patterns; without a target pattern every test runs (`//...`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh

args=("$@")
has_target=false
for arg in "${args[@]+"${args[@]}"}"; do
  [[ "${arg}" != -* ]] && has_target=true
done
if [[ "${has_target}" == false ]]; then
  args+=("//...")
fi

echo "run_all: bazel test ${args[*]}"
bazel test "${args[@]}"
