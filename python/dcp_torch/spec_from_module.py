"""The ModelSpec of a plain torch.nn.Module, read from its blocks' layers:
what `dcp_torch.init(model, blocks)` plans with when no spec is given.

From the module (each only where it can be read unambiguously):
 - num_layers: len(blocks).
 - hidden_size: the in_features most of a block's nn.Linear layers share.
 - num_attention_heads, num_kv_heads: a head-count attribute of the block or
   one of its submodules (num_attention_heads, num_heads, n_heads, n_head,
   heads; num_key_value_heads, num_kv_heads, n_kv_heads, kv_heads), else
   the attention projections' widths over a head_dim attribute (head_dim,
   head_size, dim_head): the query, key, fused key-value or fused
   query-key-value projection, found by name (q_proj, wq, q, query, to_q,
   ...; see _PROJECTIONS).
 - head_dim: the head_dim attribute, else the query projection's width
   over the head count; kept (ModelSpec.head_dim) where it is not
   hidden_size / num_attention_heads (e.g. a query projection wider than
   the hidden size).
 - ffn_hidden_size: the widest in_features of a Linear back to hidden size
   (the MLP's down projection) other than the attention output projection
   (the query width, heads x head_dim, where that differs from the MLP's);
   gated_mlp when two Linears (or one fused, twice as wide) go from hidden
   size to it.
 - adaln_modulation: a Linear named *modulation* or *adaln*, or one from
   hidden size to 6 x hidden size.
 - vocab_size: the model's first nn.Embedding outside the blocks (0 without).
 - causal: a `causal` or `is_causal` attribute of the model, its blocks or
   their submodules; else True for a model with a vocabulary (a decoder).
 - dtype_bytes: the element size of the blocks' floating-point weights
   (8 for an fp64 model: dcp_planner plans for 1, 2 or 4, so its model
   file needs dtype_bytes=... given; see dcp_torch.write_model_file).
 - name: the model's class name.

An HF-style `model.config` (dcp_torch.model_spec) overrides what the module
gives, and keyword overrides override both. A field none of them gives is a
ValueError that names it, says what was looked for, and how to pass it.
Pure (reads the module, runs nothing)."""

from __future__ import annotations

import collections
from typing import Any, Iterable

import torch

from dcp_torch import spec as spec_lib

_HEADS = ("num_attention_heads", "num_heads", "n_heads", "n_head", "heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads")
_HEAD_DIM = ("head_dim", "head_size", "dim_head")
_CAUSAL = ("causal", "is_causal")
# Attention projections by the last part of their module name (lower case):
# what each holds, in heads (q: the query heads, kv: the key-value heads).
_PROJECTIONS = {
    "q": ("q_proj", "wq", "q", "query", "to_q", "q_lin"),
    "k": ("k_proj", "wk", "k", "key", "to_k", "k_lin"),
    "kv": ("kv_proj", "wkv", "kv", "to_kv"),
    "qkv": ("qkv_proj", "wqkv", "qkv", "to_qkv", "c_attn", "in_proj",
            "query_key_value"),
}


def _int_attribute(modules, names):
    """The first positive int attribute of these names on these modules."""
    for module in modules:
        for name in names:
            value = getattr(module, name, None)
            if isinstance(value, int) and not isinstance(value, bool) \
                    and value > 0:
                return value
    return None


def _infer(model, blocks):
    """(the fields read from the module, why each missing one is missing)."""
    found, why = {"num_layers": len(blocks),
                  "name": type(model).__name__}, {}
    block = blocks[0]
    linears = [(name.lower(), m) for name, m in block.named_modules()
               if isinstance(m, torch.nn.Linear)]
    weights = [p for p in block.parameters() if p.is_floating_point()]
    if weights:
        found["dtype_bytes"] = weights[0].element_size()
    if not linears:
        why["hidden_size"] = "the first block has no torch.nn.Linear layers"
        return found, why
    inputs = collections.Counter(m.in_features for _, m in linears)
    hidden = max(inputs, key=lambda n: (inputs[n], n))
    found["hidden_size"] = hidden

    submodules = list(block.modules())
    heads = _int_attribute(submodules, _HEADS)
    kv_heads = _int_attribute(submodules, _KV_HEADS)
    head_dim = _int_attribute(submodules, _HEAD_DIM)
    widths = {}
    for name, m in linears:
        last = name.rsplit(".", 1)[-1]
        for kind, names in _PROJECTIONS.items():
            if last in names and m.in_features == hidden:
                widths.setdefault(kind, m.out_features)
    if head_dim is None and heads is not None:
        head_dim = widths.get("q", hidden) // heads
    if heads is None and head_dim is not None:
        if "q" in widths:
            heads = widths["q"] // head_dim
        elif "qkv" in widths and kv_heads is not None:
            heads = widths["qkv"] // head_dim - 2 * kv_heads
    if kv_heads is None and head_dim is not None:
        if "k" in widths:
            kv_heads = widths["k"] // head_dim
        elif "kv" in widths:
            kv_heads = widths["kv"] // (2 * head_dim)
        elif "qkv" in widths and heads is not None:
            kv_heads = (widths["qkv"] // head_dim - heads) // 2
    if heads:
        found["num_attention_heads"] = heads
        if head_dim is not None:
            found["head_dim"] = head_dim  # None in the spec if hidden/heads
    else:
        why["num_attention_heads"] = (
            f"no attribute {', '.join(_HEADS)} on the first block or its "
            "submodules, and no head_dim to divide the query projection by")
    if kv_heads:
        found["num_kv_heads"] = kv_heads
    elif heads:
        why["num_kv_heads"] = (
            f"no attribute {', '.join(_KV_HEADS)} and no key, key-value or "
            "query-key-value projection named "
            f"{', '.join(_PROJECTIONS['k'] + _PROJECTIONS['kv'])}, ...")

    attention = {name for name, _ in linears
                 if name.rsplit(".", 1)[-1] in
                 sum(_PROJECTIONS.values(), ())}
    query_width = heads * head_dim if heads and head_dim else None
    down = [m.in_features for _, m in linears
            if m.out_features == hidden and m.in_features != hidden]
    # The attention output projection also goes back to hidden size, from
    # the query width: not the MLP's unless it is the only width there is.
    mlp_down = [n for n in down if n != query_width] or down
    ffn = max(mlp_down) if mlp_down else hidden
    found["ffn_hidden_size"] = ffn
    up = [m.out_features for name, m in linears
          if m.in_features == hidden and name not in attention]
    found["gated_mlp"] = up.count(ffn) >= 2 or 2 * ffn in up
    found["adaln_modulation"] = any(
        "modulation" in name or "adaln" in name or
        (m.in_features == hidden and m.out_features == 6 * hidden)
        for name, m in linears)

    in_blocks = {id(m) for b in blocks for m in b.modules()}
    embeddings = [m for m in model.modules()
                  if isinstance(m, torch.nn.Embedding) and id(m) not in in_blocks]
    found["vocab_size"] = embeddings[0].num_embeddings if embeddings else 0

    causal = None
    for module in [model] + submodules:
        for name in _CAUSAL:
            value = getattr(module, name, None)
            if isinstance(value, bool):
                causal = value
                break
        if causal is not None:
            break
    if causal is None and embeddings:
        causal = True  # a model with a vocabulary: a decoder
    if causal is not None:
        found["causal"] = causal
    else:
        why["causal"] = (f"no bool attribute {' or '.join(_CAUSAL)} on the "
                         "model or its blocks, and no vocabulary embedding "
                         "that would make it a decoder")
    return found, why


def model_spec_from_module(model: torch.nn.Module,
                           blocks: Iterable[torch.nn.Module],
                           **overrides: Any) -> spec_lib.ModelSpec:
    """The ModelSpec of `model` (an nn.Module) whose transformer blocks
    are `blocks`: read from the module (see the module docstring), then
    `model.config` (HF-style) where it has a field, then `overrides` (any
    ModelSpec field). ValueError names each field none of them gave, what
    was looked for, and how to pass it."""
    blocks = list(blocks)
    if not blocks:
        raise ValueError("no blocks given: pass the model's transformer "
                         "blocks (e.g. model.layers)")
    known = spec_lib.FIELDS + spec_lib.PYTHON_FIELDS
    unknown = set(overrides) - set(known)
    if unknown:
        raise ValueError(f"unknown ModelSpec fields {sorted(unknown)}; "
                         f"known: {', '.join(known)}")
    found, why = _infer(model, blocks)
    config = getattr(model, "config", None)
    if config is not None:
        found.update(spec_lib.config_fields(config))
    found.update(overrides)
    missing = [field for field in why if field not in found]
    if missing:
        raise ValueError(
            "cannot build the ModelSpec of " + type(model).__name__ + ": " +
            "; ".join(f"{field}: {why[field]}" for field in missing) +
            ". Pass " + ", ".join(f"{field}=..." for field in missing) +
            " to dcp_torch.model_spec_from_module(model, blocks, ...) and "
            "give the result to dcp_torch.init(..., spec=...)")
    return spec_lib.model_spec(**found)
