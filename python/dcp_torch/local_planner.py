"""A dcp_planner process on loopback, for examples and tests: started on a
free port (--port-file), stopped with SIGTERM. Not thread-safe. And
spawn_gloo_ranks, which runs a training function on local Gloo ranks as
torchrun would."""

import json
import os
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable, Optional

from dcp_torch.spec import write_model_file


# A CPU core's figures (what dcp_local_job gives the planner on CPU): the
# predictions until a profile is fitted.
CPU_CLUSTER = {
    "usable_memory_fraction": 0.8, "peak_flops_per_second": 50e9,
    "gemm_flops_per_second": 20e9, "hbm_bytes_per_second": 10e9,
    "intra_node_bus_bytes_per_second": 2e9,
    "intra_node_latency_seconds": 50e-6,
    "inter_node_bus_bytes_per_second": 1e9,
    "inter_node_latency_seconds": 100e-6,
    "allreduce_intra_bus_bytes_per_second": 2e9,
}


class LocalPlanner:
    """Runs `binary` (default: $DCP_PLANNER_BINARY) for
    `spec` (a model_spec dict) on nodes x gpus_per_node ranks of
    `rank_memory_bytes` each, with CPU_CLUSTER's rates updated by `cluster`.
    Use as a context manager; `address` is HOST:PORT once started."""

    def __init__(self, spec, nodes, gpus_per_node, rank_memory_bytes,
                 cluster=None, binary=None, extra_flags=(),
                 start_timeout_seconds=60):
        self.binary = binary or os.environ.get("DCP_PLANNER_BINARY", "")
        if not self.binary or not os.access(self.binary, os.X_OK):
            raise FileNotFoundError(
                f"no dcp_planner at {self.binary or '$DCP_PLANNER_BINARY'}; "
                "build it with `bazel build //planner/service:dcp_planner` "
                "and pass its path (bazel-bin/planner/service/dcp_planner)")
        self._spec = spec
        self._cluster = dict(CPU_CLUSTER, num_nodes=nodes,
                             gpus_per_node=gpus_per_node,
                             gpu_memory_bytes=float(rank_memory_bytes),
                             **(cluster or {}))
        self._extra_flags = list(extra_flags)
        self._timeout = start_timeout_seconds
        self._dir = None
        self.process = None
        self.address = None

    def __enter__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="dcp_planner_")
        model_path = os.path.join(self._dir.name, "model.json")
        cluster_path = os.path.join(self._dir.name, "cluster.json")
        port_path = os.path.join(self._dir.name, "ports")
        write_model_file(self._spec, model_path)
        with open(cluster_path, "w", encoding="utf-8") as f:
            json.dump(self._cluster, f)
        self.log_path = os.path.join(self._dir.name, "planner.log")
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.process = subprocess.Popen(
            [self.binary, "--listen=127.0.0.1:0", "--metrics-listen=",
             f"--port-file={port_path}", f"--model={model_path}",
             f"--cluster={cluster_path}", "--drain-timeout=1s",
             *self._extra_flags],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self._timeout
        while not os.path.exists(port_path):
            exited = self.process.poll() is not None
            if exited or time.monotonic() > deadline:
                self._stop()
                # Read before the folder holding the log goes.
                self._log.close()
                with open(self.log_path, encoding="utf-8",
                          errors="replace") as f:
                    output = f.read().strip() or "(no output)"
                how = (f"exited with status {self.process.returncode}"
                       if exited else
                       f"did not listen within {self._timeout:g} s")
                self.__exit__(None, None, None)
                raise RuntimeError(
                    f"dcp_planner ({self.binary}) {how}; its output:\n"
                    f"{output}")
            time.sleep(0.02)  # polling a file another process writes
        ports = dict(line.split("=") for line in
                     open(port_path).read().split())
        self.address = f"127.0.0.1:{ports['grpc_port']}"
        return self

    def _stop(self):
        """Terminates the planner (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __exit__(self, *exc) -> bool:
        self._stop()
        if self._dir is not None:
            self._log.close()
            self._dir.cleanup()
            self._dir = None
        return False


def built_planner_binary(checkout: str) -> str:
    """The dcp_planner that `bazel build //planner/service:dcp_planner` made
    in the checkout at `checkout`: bazel-bin's, else bazel-out/k8-opt's
    (after a --config=cuda build bazel-bin is the CUDA build's, which holds
    no planner). The first path when neither exists."""
    candidates = [os.path.join(checkout, *parts, "planner", "service",
                               "dcp_planner")
                  for parts in (("bazel-bin",), ("bazel-out", "k8-opt", "bin"))]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return candidates[0]


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0,
    then closed): where to start a server, or an address nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _gloo_rank(rank: int, train: Callable[..., None], args: tuple,
               world_size: int, port: int,
               ranks_per_node: Optional[int]) -> None:
    env = dict(RANK=str(rank), WORLD_SIZE=str(world_size),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if ranks_per_node:
        env["DCP_NODE_NAME"] = f"node{rank // ranks_per_node}"
    os.environ.update(env)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    train(*args)
    dist.destroy_process_group()


def spawn_gloo_ranks(train: Callable[..., None], args: tuple[Any, ...],
                     world_size: int,
                     ranks_per_node: Optional[int] = None) -> None:
    """Calls train(*args) in `world_size` spawned processes on this machine,
    each one rank of a Gloo world on loopback with the environment torchrun
    gives it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; DCP_NODE_NAME
    node<rank // ranks_per_node> when given) and one torch thread, and
    returns when all have finished; a rank that fails raises here. `train`
    must be a module-level function (it is pickled)."""
    import torch.multiprocessing as mp
    mp.start_processes(_gloo_rank,
                       (train, args, world_size, free_loopback_port(),
                        ranks_per_node),
                       nprocs=world_size, start_method="spawn")
