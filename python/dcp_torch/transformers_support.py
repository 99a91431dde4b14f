"""Hugging Face transformers models under dcp_torch: one call prepares the
model, one helper computes its loss, and every way we know of getting
silently wrong gradients is an error that names the fix.

    blocks = dcp_torch.prepare_hf_model(model).blocks   # once, before init
    rt = dcp_torch.init(model, blocks)
    for step in rt.steps(sampler, fetch=lambda i: dcp_torch.causal_lm_sample(
            tokens_of(i))):                     # labels shifted, loss_mask
        for mb in step:
            with mb:
                logits = model(input_ids=mb.inputs["input_ids"],
                               position_ids=mb.inputs["position_ids"]).logits
                loss = dcp_torch.causal_lm_loss(logits, mb.inputs["labels"], mb)
                (loss * step.loss_scale).backward()
        step.sync_gradients(); optimizer.step(); optimizer.zero_grad()
        step.report()

prepare_hf_model registers `dcp_attention_forward` in transformers'
AttentionInterface as "dcp" (it runs dcp_torch.attention over the packed
tokens of the micro-batch), switches the model to it, turns the KV cache off
and hooks the model's forward. Inside a micro-batch (`with mb:` or
`dcp_torch.packed`) the hook raises TransformersSetupError, before the model
runs, when:

  (a) the KV cache is on (`use_cache=True`, config.use_cache, or
      past_key_values): a checkpointed layer replayed in the backward pass
      would append its keys and values to the cache a second time;
  (b) position_ids are missing or are not the micro-batch's
      (mb.inputs["position_ids"]): HF's default arange is right only for one
      sequence on one rank, since each rank holds a slice of the packed
      stream;
  (c) attention is not routed to dcp_torch.attention (the implementation was
      changed back, or no layer called it during the forward);
  (e) the model is given `labels` or `num_items_in_batch`: HF's loss shifts
      labels inside this rank's chunk (across packed sequences and SP
      chunks), computes in fp32 and divides by a count that ignores
      step.loss_scale and the SP padding.

and (d), labels of -100 that count in the loss because fetch gave no
loss_mask, is an IgnoredLabelsError where the micro-batch is built (and in
causal_lm_loss). dcp_torch.init refuses an HF model that was not prepared.
Nothing here imports transformers before prepare_hf_model is called.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from dcp_torch import context
from dcp_torch.micro_batch import IgnoredLabelsError, MicroBatch
from dcp_torch.ulysses import attention as dcp_attention

ATTENTION_NAME = "dcp"
IGNORE_INDEX = -100

# The attention calls of the guarded forward now running (None outside one).
_forward_calls: contextvars.ContextVar[Optional[list]] = \
    contextvars.ContextVar("dcp_torch_hf_forward_calls", default=None)


class TransformersSetupError(ValueError):
    """A transformers model is called in a way that would give wrong
    gradients under dcp_torch; the message names the fix."""


def dcp_attention_forward(module: nn.Module, query: torch.Tensor,
                          key: torch.Tensor, value: torch.Tensor,
                          attention_mask: Optional[torch.Tensor],
                          dropout: float = 0.0,
                          scaling: Optional[float] = None,
                          is_causal: Optional[bool] = None,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature around dcp_torch.attention:
    query [1, H, T, D], key and value [1, Hkv, T, D] (the micro-batch's T
    packed tokens of this rank) -> ([1, T, H, D], None). Sequences are
    masked by the micro-batch's boundaries (causally unless the module says
    is_causal=False); a `scaling` other than 1/sqrt(D) scales the query."""
    calls = _forward_calls.get()
    if calls is not None:
        calls.append(module)
    if query.shape[0] != 1:
        raise TransformersSetupError(
            f"the model got a batch of {query.shape[0]} rows; dcp_torch packs "
            "a micro-batch's sequences into one row: pass "
            "mb.inputs['input_ids'] (shape [T] or [1, T])")
    if attention_mask is not None:
        raise TransformersSetupError(
            "an attention_mask reached the dcp attention; dcp_torch masks by "
            "the micro-batch's sequence boundaries: call the model without "
            "attention_mask")
    if dropout and module.training:
        raise NotImplementedError(
            f"attention dropout {dropout} is not supported by dcp_torch."
            "attention; set the config's attention_dropout to 0")
    for name in ("sliding_window", "softcap"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(
                f"{name}={kwargs[name]} is not supported by dcp_torch.attention")
    causal = is_causal if is_causal is not None else \
        getattr(module, "is_causal", True)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, H, D]
    head_dim = q.shape[-1]
    if scaling is not None and not math.isclose(
            scaling * math.sqrt(head_dim), 1.0, rel_tol=1e-12):
        q = q * (scaling * math.sqrt(head_dim))
    return dcp_attention(q, k, v, causal=bool(causal)).unsqueeze(0), None


@dataclasses.dataclass
class PreparedModel:
    """What prepare_hf_model returns: the model, its decoder layers (the
    `blocks` for dcp_torch.init) and the forward hooks; remove() takes the
    hooks off (the attention stays routed, the cache off)."""
    model: nn.Module
    blocks: list
    _handles: list = dataclasses.field(default_factory=list)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.model._dcp_torch_prepared = False


def prepare_hf_model(model: nn.Module, blocks: Optional[list] = None
                     ) -> PreparedModel:
    """Routes a transformers PreTrainedModel's attention to
    dcp_torch.attention, turns its KV cache off and checks each forward
    inside a micro-batch (see the module docstring for the errors). Call it
    once, before dcp_torch.init. `blocks`: the decoder layers (default: the
    ModuleList named `layers` of model.get_decoder() or model.model).

    TransformersSetupError when the model's class cannot switch its
    attention implementation (it does not use transformers'
    AttentionInterface)."""
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION_NAME, dcp_attention_forward)
    model.set_attn_implementation(ATTENTION_NAME)
    wrong = [name for name, config in _configs(model)
             if getattr(config, "_attn_implementation", None) != ATTENTION_NAME]
    if wrong:
        raise TransformersSetupError(
            f"{type(model).__name__} kept another attention implementation "
            f"(configs {wrong}): its attention layers do not dispatch through "
            "transformers' AttentionInterface, so dcp_torch cannot route "
            "them; call dcp_torch.attention in the model's own attention")
    for _, config in _configs(model):
        if hasattr(config, "use_cache"):
            config.use_cache = False
    generation = getattr(model, "generation_config", None)
    if generation is not None and hasattr(generation, "use_cache"):
        generation.use_cache = False
    if blocks is None:
        blocks = _decoder_layers(model)
    prepared = PreparedModel(model, list(blocks))
    prepared._handles.append(model.register_forward_pre_hook(
        _check_call, with_kwargs=True))
    prepared._handles.append(model.register_forward_hook(
        _check_routed, with_kwargs=True, always_call=True))
    model._dcp_torch_prepared = True
    return prepared


def check_prepared(model: nn.Module) -> None:
    """dcp_torch.init's check: an HF model (one with a config naming an
    attention implementation) must have gone through prepare_hf_model."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        return
    if not getattr(model, "_dcp_torch_prepared", False):
        raise TransformersSetupError(
            f"{type(model).__name__} is a transformers model whose attention "
            f"is {config._attn_implementation!r}: call "
            "dcp_torch.prepare_hf_model(model) before dcp_torch.init, which "
            "routes it to dcp_torch.attention and turns the KV cache off")


def causal_lm_sample(input_ids: torch.Tensor,
                     labels: Optional[torch.Tensor] = None,
                     ignore_index: int = IGNORE_INDEX) -> dict:
    """One sequence as fetch should return it for causal_lm_loss:
    input_ids [L]; labels shifted per sequence (labels[i] is the target of
    token i, i.e. HF's labels[i + 1]; the last token has none) and
    loss_mask (labels != ignore_index), which makes step.loss_scale count
    only the tokens with a target. `labels`: HF-style, aligned with
    input_ids, ignore_index where no loss (default: input_ids)."""
    input_ids = torch.as_tensor(input_ids)
    labels = input_ids if labels is None else torch.as_tensor(labels)
    if labels.shape != input_ids.shape or input_ids.dim() != 1:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and labels "
                         f"{tuple(labels.shape)}: give one sequence, [L] each")
    shifted = torch.cat([labels[1:], labels.new_full((1,), ignore_index)])
    return {"input_ids": input_ids, "labels": shifted,
            "loss_mask": shifted != ignore_index}


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor,
                   mb: MicroBatch, ignore_index: int = IGNORE_INDEX
                   ) -> torch.Tensor:
    """The sum of the next-token cross entropy over this rank's tokens that
    count: not SP padding, not loss_mask = 0, not `ignore_index`. logits
    [T, V] or [1, T, V] (computed in their own dtype), labels [T] shifted as
    causal_lm_sample gives them (mb.inputs["labels"]). Multiply by
    step.loss_scale (1 / the counted tokens of the global batch) for the
    mean per token, as dcp_torch scales every loss.

    IgnoredLabelsError when a label is ignore_index but the token counts in
    step.loss_scale (fetch gave no loss_mask); ValueError when the labels
    look unshifted (equal to input_ids) or their shape is wrong."""
    if logits.dim() == 3:
        if logits.shape[0] != 1:
            raise ValueError(f"logits {tuple(logits.shape)}: one packed row")
        logits = logits[0]
    labels = labels.reshape(-1)
    if logits.dim() != 2 or logits.shape[0] != labels.shape[0]:
        raise ValueError(f"logits {tuple(logits.shape)} and labels "
                         f"{tuple(labels.shape)}: one row per token of "
                         "this rank's share of the micro-batch")
    weight = mb.token_weight
    counted = weight > 0
    ignored = int(((labels == ignore_index) & counted).sum())
    if ignored:
        raise IgnoredLabelsError(_ignored_message(ignored))
    input_ids = mb.inputs.get("input_ids")
    if (input_ids is not None and input_ids.shape == labels.shape
            and int(counted.sum()) >= 8
            and torch.equal(labels[counted], input_ids[counted])):
        raise ValueError(
            "labels equal input_ids at every counted token: they are HF-style "
            "(unshifted); have fetch return dcp_torch.causal_lm_sample("
            "input_ids, labels), which shifts them within each sequence")
    per_token = F.cross_entropy(logits, labels.to(logits.device),
                                ignore_index=ignore_index, reduction="none")
    return mb.token_loss_sum(per_token)


def _ignored_message(count: int) -> str:
    return (f"{count} tokens have label {IGNORE_INDEX} but count in the loss "
            "(step.loss_scale divides by them): have fetch also return "
            "\"loss_mask\": labels != -100 (dcp_torch.causal_lm_sample does)")


# --- the forward hooks ------------------------------------------------------


def _check_call(model: nn.Module, args: tuple, kwargs: dict):
    packing = context.current()
    if packing is None:
        return None
    _forward_calls.set(None)
    for name, config in _configs(model):
        impl = getattr(config, "_attn_implementation", None)
        if impl != ATTENTION_NAME:
            raise TransformersSetupError(
                f"the model's attention is {impl!r} (config {name}), not "
                f"{ATTENTION_NAME!r}: it would attend across the micro-batch's "
                "packed sequences and ignore the SP group; keep "
                f"model.set_attn_implementation({ATTENTION_NAME!r}) "
                "(dcp_torch.prepare_hf_model sets it)")
    use_cache = kwargs.get("use_cache")
    if use_cache is None:
        use_cache = getattr(model.config, "use_cache", False)
    if use_cache or kwargs.get("past_key_values") is not None:
        raise TransformersSetupError(
            "the KV cache is on (use_cache=True, config.use_cache or "
            "past_key_values): layers the plan recomputes would append their "
            "keys and values again in the backward pass; train with "
            "model.config.use_cache = False (dcp_torch.prepare_hf_model sets "
            "it) and no past_key_values")
    for name in ("labels", "num_items_in_batch"):
        if kwargs.get(name) is not None:
            raise TransformersSetupError(
                f"the model was given {name}=: HF's loss shifts labels within "
                "this rank's chunk of the packed micro-batch, computes in "
                "fp32 and divides by a count that ignores the SP padding and "
                "step.loss_scale; compute dcp_torch.causal_lm_loss(logits, "
                "mb.inputs['labels'], mb) * step.loss_scale instead")
    if kwargs.get("attention_mask") is not None:
        raise TransformersSetupError(
            "the model was given an attention_mask: dcp_torch masks by the "
            "micro-batch's sequences; call the model without it")
    args = list(args)
    tokens_key = "input_ids" if (args or kwargs.get("input_ids") is not None) \
        else "inputs_embeds"
    tokens = args[0] if args else kwargs.get(tokens_key)
    token_dims = 1 if tokens_key == "input_ids" else 2
    if tokens is not None and tokens.dim() == token_dims:
        tokens = tokens.unsqueeze(0)
        if args:
            args[0] = tokens
        else:
            kwargs[tokens_key] = tokens
    count = tokens.shape[1] if tokens is not None else None
    positions = kwargs.get("position_ids")
    if positions is None:
        raise TransformersSetupError(
            "the model was called without position_ids: HF would number this "
            "rank's tokens 0..T-1, but they are a slice of several packed "
            "sequences; pass position_ids=mb.inputs['position_ids']")
    if positions.dim() == 1:
        positions = positions.unsqueeze(0)
        kwargs["position_ids"] = positions
    expected = _expected_positions(packing, positions.device)
    wrong = (count is not None and count != expected.shape[0]) or \
        positions.shape != (1, expected.shape[0]) or \
        not torch.equal(positions[0], expected)
    if packing.sp_size > 1:
        # Every member raises, or none: a member that went on alone would
        # wait in the all-to-all for the others.
        flag = torch.tensor([1 if wrong else 0], device=positions.device)
        torch.distributed.all_reduce(flag, group=packing.group)
        wrong = bool(flag.item())
    if wrong:
        raise TransformersSetupError(
            f"position_ids {tuple(positions.shape)} are not this rank's "
            f"positions in the micro-batch's packed sequences ({tuple(expected.shape)} "
            "tokens); pass the micro-batch's own: input_ids="
            "mb.inputs['input_ids'], position_ids=mb.inputs['position_ids']")
    _forward_calls.set([])
    return tuple(args), kwargs


def _check_routed(model: nn.Module, args: tuple, kwargs: dict, output):
    calls = _forward_calls.get()
    _forward_calls.set(None)
    if calls is not None and not calls and output is not None:
        raise TransformersSetupError(
            "no layer of the model called dcp_torch.attention in this "
            f"forward although its implementation is {ATTENTION_NAME!r}: its "
            "attention does not dispatch through transformers' "
            "AttentionInterface (or \"dcp\" was registered again as another "
            "function); call dcp_torch.prepare_hf_model(model) again, or call "
            "dcp_torch.attention in the model's own attention")
    return None


def _expected_positions(packing: context.Packing,
                        device: torch.device) -> torch.Tensor:
    """Each of this rank's tokens' position in its sequence (0 for padding),
    as MicroBatch.inputs["position_ids"] gives them."""
    cu = packing.cu_seqlens
    chunk = cu[-1] // packing.sp_size
    member = packing.group.rank() if packing.group is not None else 0
    index = torch.arange(member * chunk, (member + 1) * chunk)
    starts = torch.tensor(cu[:-1])
    segment = torch.searchsorted(torch.tensor(cu[1:]), index, right=True)
    positions = index - starts[segment]
    if packing.padded:
        positions[segment == len(cu) - 2] = 0
    return positions.to(device)


def _configs(model: nn.Module) -> list:
    """The distinct configs of the model and its submodels, by name."""
    seen, found = set(), []
    for name, module in model.named_modules():
        config = getattr(module, "config", None)
        if config is not None and id(config) not in seen and \
                hasattr(config, "_attn_implementation"):
            seen.add(id(config))
            found.append((name or "model", config))
    return found


def _decoder_layers(model: nn.Module) -> list:
    candidates = []
    get_decoder: Optional[Callable] = getattr(model, "get_decoder", None)
    if get_decoder is not None:
        candidates.append(get_decoder())
    candidates += [getattr(model, "model", None), model]
    for module in candidates:
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList):
            return list(layers)
    raise TransformersSetupError(
        f"found no decoder layers (a ModuleList named `layers`) in "
        f"{type(model).__name__}; pass prepare_hf_model(model, blocks=...)")
