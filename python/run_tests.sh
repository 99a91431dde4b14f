#!/usr/bin/env bash
# The dcp-torch test suite (python/tests), run by tests/run_all.sh: generates
# the stubs from proto/dcp/v1 into the source tree (python/build_stubs.py, as
# `pip install ./python` does into the wheel; git ignores them), then runs
# pytest with the Python of $DCP_TORCH_VENV (default /opt/dcp/torch-venv,
# which scripts/install_deps.sh fills) against the real dcp_planner
# ($DCP_PLANNER_BINARY, default bazel-bin/planner/service/dcp_planner, else
# bazel-out/k8-opt's).
# Arguments go to pytest (e.g. -k gradient, -s).
set -euo pipefail
cd "$(dirname "$0")"
venv="${DCP_TORCH_VENV:-/opt/dcp/torch-venv}"
if ! "${venv}/bin/python3" -c "import torch, grpc_tools, pytest" 2>/dev/null; then
  echo "run_tests: ${venv} lacks torch, grpcio-tools or pytest; run scripts/install_deps.sh" >&2
  exit 1
fi
# bazel-bin is the last build's configuration: after a --config=cuda build
# the CPU planner is still in bazel-out/k8-opt.
planner="${DCP_PLANNER_BINARY:-../bazel-bin/planner/service/dcp_planner}"
if [[ -z "${DCP_PLANNER_BINARY:-}" && ! -x "${planner}" ]]; then
  planner="../bazel-out/k8-opt/bin/planner/service/dcp_planner"
fi
if [[ ! -x "${planner}" ]]; then
  echo "run_tests: no dcp_planner at ${planner}; build it with" \
       "\`bazel build //planner/service:dcp_planner\` or set DCP_PLANNER_BINARY" >&2
  exit 1
fi
"${venv}/bin/python3" build_stubs.py
DCP_PLANNER_BINARY="$(realpath "${planner}")" PYTHONPATH="$(pwd)" \
  exec "${venv}/bin/python3" -m pytest -q -p no:cacheprovider \
  -W ignore::UserWarning tests "$@"
