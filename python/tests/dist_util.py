"""A pool of N Gloo processes on loopback that runs test functions, so that
the distributed tests pay for starting processes (and importing torch) once
per session. Each process keeps its world process group between tasks."""

import queue
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dcp_torch.local_planner import free_loopback_port


def _serve(rank, world_size, port, tasks, results, backend):
    torch.set_num_threads(1)
    # A TCPStore, as under torchrun. (With a FileStore, creating a group
    # among all ranks after one among some of them times out in torch 2.11.)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size)
    while True:
        task = tasks.get()
        if task is None:
            break
        fn, args = task
        try:
            results.put((rank, True, fn(rank, world_size, *args)))
        except BaseException:  # reported to the test, which fails
            results.put((rank, False, traceback.format_exc()))
    dist.destroy_process_group()


class RankPool:
    """`run(fn, *args)` calls fn(rank, world_size, *args) (a module-level
    function) on every rank and returns their results in rank order; a
    failure on any rank raises with its traceback. `backend` goes to
    init_process_group (None: torch's default, as a script that names none
    gets under torchrun)."""

    def __init__(self, world_size, task_timeout_seconds=240, backend="gloo"):
        self.world_size = world_size
        self._timeout = task_timeout_seconds
        context = mp.get_context("spawn")
        self._tasks = [context.Queue() for _ in range(world_size)]
        self._results = context.Queue()
        port = free_loopback_port()
        self._processes = [
            context.Process(target=_serve,
                            args=(r, world_size, port, self._tasks[r],
                                  self._results, backend), daemon=True)
            for r in range(world_size)]
        for process in self._processes:
            process.start()

    def run(self, fn, *args):
        for task_queue in self._tasks:
            task_queue.put((fn, args))
        outcomes = {}
        try:
            while len(outcomes) < self.world_size:
                rank, ok, value = self._results.get(timeout=self._timeout)
                outcomes[rank] = (ok, value)
        except queue.Empty:
            self.close(force=True)
            raise RuntimeError(f"ranks {sorted(set(range(self.world_size)) - set(outcomes))} "
                               f"did not finish {fn.__name__} in "
                               f"{self._timeout} s") from None
        failures = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(outcomes.items())
                    if not ok]
        if failures:
            raise RuntimeError("\n".join(failures))
        return [outcomes[r][1] for r in range(self.world_size)]

    def close(self, force=False):
        for process, task_queue in zip(self._processes, self._tasks):
            if force:
                process.terminate()
            elif process.is_alive():
                task_queue.put(None)
        for process in self._processes:
            process.join(timeout=30)
