#!/usr/bin/env bash
# The main job. Until the workers land (they will train the tiny model on CPU
# through a planner on loopback), it is the planner core on its own: plan
# every global batch of two skewed workloads on 4 x 8 H200 with dcp and the
# static baselines, and print the predicted step times (cost-model
# predictions, not measurements) and each plan's gap to the lower bound.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
bazel build //planner:dcp
dcp=bazel-bin/planner/dcp

echo
echo "== Long-tail text: llama3-8b on 4 x 8 H200, 20 global batches of 2M tokens =="
"${dcp}" simulate --model=llama3-8b --workload=longtail --nodes=4 \
  --gpus-per-node=8 --steps=20 --seed=1
echo
echo "== Video mix: video-dit-1b on 4 x 8 H200, 20 global batches of 2M tokens =="
"${dcp}" simulate --model=video-dit-1b --workload=video --nodes=4 \
  --gpus-per-node=8 --steps=20 --seed=1
echo
echo "== One plan of the long-tail workload =="
"${dcp}" plan --model=llama3-8b --workload=longtail --nodes=4 \
  --gpus-per-node=8 --seed=1 --step=4 --format=table
