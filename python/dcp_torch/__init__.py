"""dcp-torch: DCP's per-batch plans for any PyTorch training loop.

    rt = dcp_torch.init(model, blocks=model.layers)      # register, profile
    for step in rt.steps(sampler, fetch=dataset.__getitem__):
        for mb in step:                                  # this rank's share
            with mb:                                     # SP group, recompute
                loss = mb.token_loss_sum(per_token_loss(model, mb.inputs))
                (loss * step.loss_scale).backward()
        step.sync_gradients(); optimizer.step(); optimizer.zero_grad()
        step.report()

In the model, call dcp_torch.attention(q, k, v, causal=...) where it
computes attention. runtime.py, step.py and micro_batch.py document every
call. A Hugging Face transformers model: dcp_torch.prepare_hf_model(model)
and dcp_torch.causal_lm_loss (transformers_support.py).
"""

from dcp_torch.checkpointing import apply_checkpointing
from dcp_torch.context import packed
from dcp_torch.devices import local_device
from dcp_torch.errors import EmptyBatchError, RankDivergedError
from dcp_torch.fingerprint import batch_fingerprint
from dcp_torch.micro_batch import IgnoredLabelsError, MicroBatch
from dcp_torch.planner_client import (PlannerClient, PlannerError,
                                      PlannerUnreachableError, RetryPolicy)
from dcp_torch.profiler import ProfileOptions
from dcp_torch.runtime import Runtime, init
from dcp_torch.spec import ModelSpec, model_spec, write_model_file
from dcp_torch.spec_from_module import model_spec_from_module
from dcp_torch.step import Step, plan_layouts
from dcp_torch.transformers_support import (PreparedModel,
                                            TransformersSetupError,
                                            causal_lm_loss, causal_lm_sample,
                                            prepare_hf_model)
from dcp_torch.ulysses import HeadsNotDivisibleError, attention

__all__ = [
    "EmptyBatchError", "HeadsNotDivisibleError", "IgnoredLabelsError",
    "MicroBatch", "ModelSpec", "PreparedModel", "TransformersSetupError",
    "PlannerClient", "PlannerError", "PlannerUnreachableError",
    "ProfileOptions", "RankDivergedError", "RetryPolicy", "Runtime", "Step",
    "apply_checkpointing", "attention", "batch_fingerprint",
    "causal_lm_loss", "causal_lm_sample", "init", "prepare_hf_model",
    "local_device", "model_spec", "model_spec_from_module", "packed",
    "plan_layouts", "write_model_file",
]
