"""Which attention kernel runs a micro-batch's packed sequences. Pure: the
choice depends only on the device type, dtype and head shapes, so it is
tested for every shape the planner plans without a GPU.

 - VARLEN: one torch.nn.attention.varlen.varlen_attn call (FlashAttention's
   variable-length kernel) over the whole packed stream with its cu_seqlens
   and grouped-query heads as they are: CUDA, fp16 or bf16, head_dim a
   multiple of 8 up to 256, where torch has varlen_attn (2.9+).
 - SDPA_GQA: scaled_dot_product_attention per sequence on 4-D [1, H, L, D]
   tensors with enable_gqa (the key/value heads not repeated). 4-D inputs
   reach the fused kernels (CPU flash; CUDA flash or cuDNN for fp16/bf16);
   3-D ones only ever get the MATH kernel, whose L x L scores run a long
   sequence out of GPU memory.
 - SDPA_REPEATED_KV: the same with the key/value heads repeated, for CUDA
   fp32, which FlashAttention lacks and the memory-efficient kernel takes
   (head_dim a multiple of 4).
 - CORE: the user's own core(q, k, v, causal) per sequence on [heads, L, D]
   (key/value heads repeated), as given to dcp_torch.attention."""

import enum
from typing import Optional

import torch

# FlashAttention's limits (torch's sdp_utils: check_head_dim_size_flash,
# check_dtypes_flash_attention on sm80 and newer).
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256
FLASH_HEAD_DIM_MULTIPLE = 8
# The memory-efficient kernel's alignment of fp32 head dims on sm80+.
MEM_EFFICIENT_FP32_HEAD_DIM_MULTIPLE = 4


class AttentionKernel(enum.Enum):
    """How dcp_torch.attention computes a micro-batch; see the module."""
    VARLEN = "varlen"
    SDPA_GQA = "sdpa_gqa"
    SDPA_REPEATED_KV = "sdpa_repeated_kv"
    CORE = "core"


def varlen_available() -> bool:
    """Whether this torch has torch.nn.attention.varlen.varlen_attn."""
    try:
        from torch.nn.attention import varlen  # noqa: F401
    except ImportError:
        return False
    return hasattr(varlen, "varlen_attn")


def flash_eligible(dtype: torch.dtype, head_dim: int) -> bool:
    """FlashAttention takes this dtype and head dimension."""
    return (dtype in FLASH_DTYPES and 0 < head_dim <= FLASH_MAX_HEAD_DIM
            and head_dim % FLASH_HEAD_DIM_MULTIPLE == 0)


def choose_kernel(device_type: str, dtype: torch.dtype, head_dim: int,
                  query_heads: int, kv_heads: int, has_core: bool = False,
                  has_varlen: Optional[bool] = None) -> AttentionKernel:
    """The kernel for q [T, query_heads, head_dim] and k, v [T, kv_heads,
    head_dim] on a device of `device_type` ("cuda", "cpu", ...).
    `has_core`: the user gave their own core (always used). `has_varlen`:
    whether varlen_attn exists (default: this torch's). ValueError when
    kv_heads does not divide query_heads."""
    if kv_heads <= 0 or query_heads % kv_heads:
        raise ValueError(f"{kv_heads} key/value heads do not divide "
                         f"{query_heads} query heads")
    if has_core:
        return AttentionKernel.CORE
    if device_type != "cuda":
        return AttentionKernel.SDPA_GQA  # CPU: flash over 4-D, per sequence
    if has_varlen is None:
        has_varlen = varlen_available()
    if flash_eligible(dtype, head_dim):
        return AttentionKernel.VARLEN if has_varlen \
            else AttentionKernel.SDPA_GQA
    return AttentionKernel.SDPA_REPEATED_KV


def fused_on_cuda(kernel: AttentionKernel, dtype: torch.dtype,
                  head_dim: int) -> bool:
    """Whether `kernel` runs a fused (not MATH) kernel on an sm80+ GPU for
    this dtype and head dimension, by torch's documented limits: VARLEN is
    FlashAttention itself; SDPA_GQA on fp16/bf16 within flash's limits gets
    flash (or cuDNN); SDPA_REPEATED_KV gets the memory-efficient kernel for
    fp32/fp16/bf16 whose head_dim is aligned."""
    if kernel is AttentionKernel.VARLEN or kernel is AttentionKernel.SDPA_GQA:
        return flash_eligible(dtype, head_dim)
    if kernel is AttentionKernel.SDPA_REPEATED_KV:
        multiple = MEM_EFFICIENT_FP32_HEAD_DIM_MULTIPLE \
            if dtype == torch.float32 else FLASH_HEAD_DIM_MULTIPLE
        return dtype in (torch.float32,) + FLASH_DTYPES and \
            head_dim % multiple == 0
    return False
