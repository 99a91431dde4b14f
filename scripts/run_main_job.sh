#!/usr/bin/env bash
# The main job: a real DCP training job on this machine's loopback. It starts
# the dcp_planner service and four dcp_worker processes (LibTorch + Gloo on
# the CPU), profiles the cluster and fits the cost model, trains the `tiny`
# model on a skewed variable-length workload with the planner's per-batch
# plans (one line per step: plan, predicted and measured step time, loss),
# then runs the same batches with the static `bucket` plans and prints the
# measured speedup and the cost model's predicted-vs-measured error.
# Extra arguments go to dcp_local_job (see `bazel-bin/launcher/dcp_local_job
# --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
bazel build //launcher:dcp_local_job //planner/cli:dcp
bazel-bin/launcher/dcp_local_job "$@"
