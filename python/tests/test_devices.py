"""One device per rank and the collective backend from the tensors' device:
the GPU each local rank binds (pure, with a recording set_device), and a
world initialized without naming a backend (torch reports "undefined")
still registering Gloo and building Gloo SP groups."""

import pytest
import torch
import torch.distributed as dist

import dcp_torch
from dcp_torch import devices
from dcp_torch.local_planner import LocalPlanner
from dcp_torch.planner_client import PlannerClient
import dist_util
from test_gradient_equivalence import LLAMA_SPEC, build


@pytest.mark.parametrize("rank_on_node", range(8))
def test_each_local_rank_binds_its_own_gpu(rank_on_node):
    chosen = []
    device = devices.bind_rank_device(
        torch.device("cuda", rank_on_node),
        environ={"LOCAL_RANK": str(rank_on_node)}, device_count=8,
        set_device=chosen.append)
    assert device == torch.device("cuda", rank_on_node)
    assert chosen == [torch.device("cuda", rank_on_node)]


def test_the_local_device_follows_local_rank():
    assert devices.local_device({"LOCAL_RANK": "3"}, device_count=8) == \
        torch.device("cuda", 3)
    assert devices.local_device({}, device_count=8) == torch.device("cuda", 0)
    # One GPU visible per process (CUDA_VISIBLE_DEVICES): always cuda:0.
    assert devices.local_device({"LOCAL_RANK": "5"}, device_count=1) == \
        torch.device("cuda", 0)
    assert devices.local_device({"LOCAL_RANK": "5"}, device_count=0) == \
        torch.device("cpu")
    assert dcp_torch.local_device is devices.local_device


def test_a_model_left_on_gpu_0_by_a_later_local_rank_is_refused():
    chosen = []
    with pytest.raises(ValueError) as error:
        devices.bind_rank_device(torch.device("cuda", 0),
                                 environ={"LOCAL_RANK": "2"}, device_count=4,
                                 set_device=chosen.append)
    assert "on cuda:0 but this rank's GPU is cuda:2 (LOCAL_RANK=2" in \
        str(error.value)
    assert "model.to(dcp_torch.local_device())" in str(error.value)
    assert chosen == []


def test_more_local_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(ValueError, match="LOCAL_RANK=4 but this process sees "
                       "4 GPUs.*--nproc-per-node=4"):
        devices.cuda_device_index(4, 4)
    with pytest.raises(ValueError, match="LOCAL_RANK='x' is not"):
        devices.local_rank({"LOCAL_RANK": "x"})


def test_without_local_rank_the_models_gpu_is_bound():
    chosen = []
    assert devices.bind_rank_device(torch.device("cuda", 1), environ={},
                                    device_count=2,
                                    set_device=chosen.append) == \
        torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 1)]


def test_a_cpu_model_binds_no_gpu():
    chosen = []
    assert devices.bind_rank_device(torch.device("cpu"),
                                    environ={"LOCAL_RANK": "1"},
                                    set_device=chosen.append) == \
        torch.device("cpu")
    assert chosen == []


def test_the_backend_follows_the_device():
    assert devices.collective_backend(torch.device("cuda", 3)) == "nccl"
    assert devices.collective_backend("cpu") == "gloo"


@pytest.fixture(scope="module")
def ranks2_default_backend():
    """Two processes whose world names no backend (init_process_group())."""
    pool = dist_util.RankPool(2, backend=None)
    yield pool
    pool.close()


def register_and_build_a_group(rank, world_size, address):
    reported = dist.get_backend()
    model = build("llama", dcp_torch.attention)
    runtime = dcp_torch.init(model, model.layers, address, spec=LLAMA_SPEC,
                             worker_id=f"default-backend-rank{rank}",
                             profile=False, log=lambda message: None)
    try:
        # A group over both ranks, built as a plan's SP group would be.
        group = runtime.sp_groups._create_c10d((0, 1), rank, "probe#0")
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, group=group)
        return reported, runtime.sp_groups.backend, value.item()
    finally:
        runtime.close()


def test_a_world_without_a_named_backend_runs_gloo(ranks2_default_backend):
    with LocalPlanner(LLAMA_SPEC, 1, 2, 1e9) as planner:
        results = ranks2_default_backend.run(register_and_build_a_group,
                                             planner.address)
        workers = PlannerClient(planner.address).list_workers()
    for reported, backend, total in results:
        assert reported == "undefined"  # what torch 2.11 says of it
        assert backend == "gloo"
        assert total == 3.0
    assert {w.backend for w in workers.workers} == {"gloo"}
