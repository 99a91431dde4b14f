#!/usr/bin/env bash
# dcp-node-launcher: the entrypoint of a DCP worker pod (one pod per node).
#
# Starts one dcp_worker process per rank of this node, all with the same node
# name, then waits. SIGTERM/SIGINT is forwarded to every rank (they finish the
# current step, stop together at the step boundary and checkpoint). When a
# rank fails, the others get SIGTERM, then SIGKILL after
# DCP_FAILURE_GRACE_SECONDS, and the launcher exits with the failed rank's
# code (2, a usage error, fails the whole Job: see worker-job.yaml).
#
# Exit codes: 0 every rank finished its steps; the first failing rank's code;
# 128+N when stopped by signal N (a stopped run is not a completed one, so
# the Job replaces the pod and the ranks resume from the checkpoint).
#
# Flags of every rank, in order (a later flag wins): --worker-id, --node-name,
# --store-host, --store-port, --metrics-listen from the environment below;
# the lines of $DCP_WORKER_ARGS_FILE; this script's arguments.
#
# Environment:
#   DCP_RANKS_PER_NODE     ranks (dcp_worker processes) of this node (required)
#   DCP_PLANNER_ADDRESS    the planner's HOST:PORT (read by dcp_worker itself)
#   DCP_WORKER_BINARY      default /usr/local/bin/dcp_worker
#   DCP_NODE_NAME          default: the host name (the pod's)
#   DCP_STORE_HOST         how other pods reach this one's c10d store; default
#                          <host name>.<DCP_STORE_DOMAIN> (or the host name)
#   DCP_STORE_PORT_BASE    rank i's store port is base + i; 0 (the default):
#                          each rank picks a free port
#   DCP_METRICS_HOST       default 0.0.0.0
#   DCP_METRICS_PORT_BASE  rank i serves /metrics on base + i (default 9500);
#                          0: free ports (each rank logs its port); empty: none
#   DCP_WORKER_ARGS_FILE   file with one dcp_worker flag per line (blank lines
#                          and lines starting with # are skipped); optional
#   DCP_FAILURE_GRACE_SECONDS  default 30
set -uo pipefail

log() { echo "dcp-node-launcher: $*" >&2; }

usage_error() {
  log "$*"
  exit 2
}

ranks="${DCP_RANKS_PER_NODE:-}"
[[ "${ranks}" =~ ^[1-9][0-9]*$ ]] ||
  usage_error "DCP_RANKS_PER_NODE='${ranks}': set it to the ranks of this node (e.g. 8, one per GPU)"
worker_binary="${DCP_WORKER_BINARY:-/usr/local/bin/dcp_worker}"
[[ -x "${worker_binary}" ]] ||
  usage_error "DCP_WORKER_BINARY='${worker_binary}' is not an executable file"
host="${HOSTNAME:-$(uname -n)}"
node="${DCP_NODE_NAME:-${host}}"
store_host="${DCP_STORE_HOST:-${host}${DCP_STORE_DOMAIN:+.${DCP_STORE_DOMAIN}}}"
store_base="${DCP_STORE_PORT_BASE:-0}"
[[ "${store_base}" =~ ^[0-9]+$ ]] ||
  usage_error "DCP_STORE_PORT_BASE='${store_base}': expected a port number (0: free ports)"
metrics_host="${DCP_METRICS_HOST:-0.0.0.0}"
metrics_base="${DCP_METRICS_PORT_BASE-9500}"
[[ -z "${metrics_base}" || "${metrics_base}" =~ ^[0-9]+$ ]] ||
  usage_error "DCP_METRICS_PORT_BASE='${metrics_base}': expected a port number (0: free ports; empty: no metrics)"
grace="${DCP_FAILURE_GRACE_SECONDS:-30}"
[[ "${grace}" =~ ^[0-9]+$ ]] ||
  usage_error "DCP_FAILURE_GRACE_SECONDS='${grace}': expected whole seconds"

file_args=()
if [[ -n "${DCP_WORKER_ARGS_FILE:-}" ]]; then
  [[ -r "${DCP_WORKER_ARGS_FILE}" ]] ||
    usage_error "DCP_WORKER_ARGS_FILE='${DCP_WORKER_ARGS_FILE}' cannot be read"
  while IFS= read -r line || [[ -n "${line}" ]]; do
    line="${line#"${line%%[![:space:]]*}"}"   # leading whitespace
    line="${line%"${line##*[![:space:]]}"}"   # trailing whitespace
    [[ -z "${line}" || "${line}" == \#* ]] && continue
    file_args+=("${line}")
  done <"${DCP_WORKER_ARGS_FILE}"
fi

pids=()
signalled=0
# shellcheck disable=SC2317  # called from the traps below
forward() {
  signalled="$1"
  log "received signal $1; asking the ${#pids[@]} ranks to stop at the step boundary"
  kill -TERM "${pids[@]}" 2>/dev/null
}
trap 'forward 15' TERM
trap 'forward 2' INT

for ((i = 0; i < ranks; i++)); do
  rank_args=(
    "--worker-id=${node}-${i}"
    "--node-name=${node}"
    "--store-host=${store_host}"
    "--store-port=$((store_base == 0 ? 0 : store_base + i))"
  )
  if [[ -n "${metrics_base}" ]]; then
    rank_args+=("--metrics-listen=${metrics_host}:$((metrics_base == 0 ? 0 : metrics_base + i))")
  fi
  "${worker_binary}" "${rank_args[@]}" "${file_args[@]}" "$@" &
  pids+=("$!")
done
log "node ${node}: started ${ranks} ranks (pids ${pids[*]}), store host ${store_host}"

status=0
killer=""
running=("${pids[@]}")
while ((${#running[@]} > 0)); do
  finished=""
  wait -n -p finished "${running[@]}"
  code=$?
  # Interrupted by a trapped signal: no rank finished; wait again.
  [[ -z "${finished:-}" ]] && continue
  still_running=()
  for pid in "${running[@]}"; do
    [[ "${pid}" != "${finished}" ]] && still_running+=("${pid}")
  done
  running=("${still_running[@]+"${still_running[@]}"}")
  if ((code != 0 && status == 0)); then
    status="${code}"
    log "rank process ${finished} exited with code ${code}; stopping the other ranks"
    kill -TERM "${pids[@]}" 2>/dev/null
    # SIGKILL after the grace period, unless every rank is gone by then.
    (
      sleep "${grace}" &
      sleeper=$!
      trap 'kill "${sleeper}" 2>/dev/null; exit 0' TERM
      wait "${sleeper}" && kill -KILL "${pids[@]}" 2>/dev/null
    ) &
    killer=$!
  fi
done
[[ -n "${killer}" ]] && kill "${killer}" 2>/dev/null

if ((status != 0)); then
  exit "${status}"
fi
if ((signalled != 0)); then
  log "every rank stopped on request"
  exit $((128 + signalled))
fi
log "every rank finished"
exit 0
