"""The device a rank computes on and the collective backend that goes with
it: one GPU per rank, chosen from the local rank (torchrun's LOCAL_RANK),
and NCCL for CUDA tensors, Gloo for CPU ones. Decided from the tensors'
device, never from torch.distributed's backend string (torch 2.11 reports
"undefined" for a world initialized without naming a backend).

Pure, except bind_rank_device, which sets the current CUDA device."""

import os
from typing import Callable, Mapping, Optional

import torch

LOCAL_RANK_VARIABLE = "LOCAL_RANK"


def local_rank(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """This process's rank on its node from $LOCAL_RANK (set by torchrun),
    or None when it is not set. ValueError for a value that is not a
    non-negative integer."""
    environ = os.environ if environ is None else environ
    value = environ.get(LOCAL_RANK_VARIABLE)
    if value is None or value == "":
        return None
    try:
        rank = int(value)
    except ValueError:
        rank = -1
    if rank < 0:
        raise ValueError(f"{LOCAL_RANK_VARIABLE}={value!r} is not a "
                         "non-negative integer; torchrun sets it to the "
                         "process's rank on its node (0, 1, ...)")
    return rank


def cuda_device_index(rank_on_node: int, device_count: int) -> int:
    """The GPU of the process with local rank `rank_on_node` among the
    `device_count` GPUs it sees: GPU `rank_on_node`, or GPU 0 when the
    process sees one GPU (CUDA_VISIBLE_DEVICES gives each process its own).
    """
    if device_count < 1:
        raise RuntimeError(
            "no CUDA device is visible to this process; run on a GPU node "
            "or keep the model on the CPU (Gloo)")
    if device_count == 1:
        return 0
    if rank_on_node >= device_count:
        raise ValueError(
            f"{LOCAL_RANK_VARIABLE}={rank_on_node} but this process sees "
            f"{device_count} GPUs (cuda:0 to cuda:{device_count - 1}); start "
            f"at most {device_count} ranks per node (torchrun "
            f"--nproc-per-node={device_count}) or give each process its own "
            "GPU with CUDA_VISIBLE_DEVICES")
    return rank_on_node


def local_device(environ: Optional[Mapping[str, str]] = None,
                 device_count: Optional[int] = None) -> torch.device:
    """The device this rank should put its model on before dcp_torch.init:
    cuda:<its GPU> (from $LOCAL_RANK, default 0) when CUDA is available,
    else the CPU."""
    if device_count is None:
        device_count = torch.cuda.device_count() \
            if torch.cuda.is_available() else 0
    if device_count == 0:
        return torch.device("cpu")
    return torch.device("cuda", cuda_device_index(local_rank(environ) or 0,
                                                  device_count))


def collective_backend(device: torch.device) -> str:
    """The c10d backend for tensors on `device`: "nccl" for CUDA, "gloo"
    otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def bind_rank_device(
        model_device: torch.device,
        environ: Optional[Mapping[str, str]] = None,
        device_count: Optional[int] = None,
        set_device: Optional[Callable[[torch.device], None]] = None,
) -> torch.device:
    """Makes the GPU of a model on CUDA this process's current CUDA device
    (torch.cuda.set_device), so that the NCCL communicators, barriers and
    all_gather_object calls of each rank run on its own GPU instead of all
    on GPU 0. Under torchrun ($LOCAL_RANK set) the model must already be on
    the local rank's GPU (ValueError otherwise, saying where to move it).
    A model on the CPU is returned as it is. Returns the device."""
    model_device = torch.device(model_device)
    if model_device.type != "cuda":
        return model_device
    if device_count is None:
        device_count = torch.cuda.device_count()
    rank_on_node = local_rank(environ)
    index = model_device.index if model_device.index is not None else 0
    if rank_on_node is not None:
        expected = cuda_device_index(rank_on_node, device_count)
        if index != expected:
            raise ValueError(
                f"the model's parameters are on cuda:{index} but this "
                f"rank's GPU is cuda:{expected} ({LOCAL_RANK_VARIABLE}="
                f"{rank_on_node}, {device_count} GPUs visible); move the "
                "model there before dcp_torch.init: "
                "model.to(dcp_torch.local_device())")
    device = torch.device("cuda", index)
    (set_device or torch.cuda.set_device)(device)
    return device
