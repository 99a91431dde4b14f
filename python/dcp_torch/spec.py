"""The ModelSpec (proto/dcp/v1/model.proto) of a user's model: what the
planner's cost model needs, built from an HF-style config (or keywords), and
written as the JSON file `dcp_planner --model=FILE` reads. Pure."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import os
from typing import Any, Iterator, Mapping, Optional, Union

from dcp_torch._proto import model_pb2

# ModelSpec JSON field names (cost_model/model_spec.h), in order: the
# fields of dcp.v1.ModelSpec and of the model file.
FIELDS = ("name", "num_layers", "hidden_size", "num_attention_heads",
          "num_kv_heads", "ffn_hidden_size", "vocab_size", "dtype_bytes",
          "causal", "gated_mlp", "adaln_modulation")
# The fields of the Python ModelSpec only (not in the proto or the file).
PYTHON_FIELDS = ("head_dim",)

# Element sizes a ModelSpec may have (fp8, fp16/bf16, fp32, fp64), and those
# dcp_planner plans for (cost_model/model_spec.cc, ValidateModelSpec).
DTYPE_BYTES = (1, 2, 4, 8)
PLANNER_DTYPE_BYTES = (1, 2, 4)

# Where an HF-style config keeps each field (first name found wins).
_CONFIG_NAMES = {
    "num_layers": ("num_hidden_layers", "num_layers", "depth", "n_layer"),
    "hidden_size": ("hidden_size", "d_model", "n_embd"),
    "num_attention_heads": ("num_attention_heads", "num_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "ffn_hidden_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size",),
    "head_dim": ("head_dim",),
}

_POSITIVE = ("num_layers", "hidden_size", "num_attention_heads",
             "num_kv_heads", "ffn_hidden_size")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ModelSpec(collections.abc.Mapping):
    """The transformer the planner plans for (dcp.v1.ModelSpec), validated.

    Build one with dcp_torch.model_spec (from a config or keywords) or
    dcp_torch.model_spec_from_module; change a field with
    dataclasses.replace(spec, dtype_bytes=4). It is also a read-only mapping
    (spec["hidden_size"], dict(spec), ** in calls) of the dcp.v1.ModelSpec
    fields, plus head_dim where it is not hidden_size / num_attention_heads,
    and equals a dict of the same items (the dict specs of earlier
    versions)."""

    #: Human-readable name; keys the planner's fitted cost-model reports.
    name: str = "model"
    #: Transformer blocks.
    num_layers: int
    #: Width of the residual stream.
    hidden_size: int
    #: Query heads.
    num_attention_heads: int
    #: Key/value heads; equals num_attention_heads without grouped-query
    #: attention, and must divide it.
    num_kv_heads: int
    #: Inner width of the MLP.
    ffn_hidden_size: int
    #: Vocabulary of the input embedding and LM head (0: none, e.g. a DiT).
    vocab_size: int = 0
    #: Bytes per activation/parameter element: 1, 2 (bf16/fp16), 4 (fp32)
    #: or 8 (fp64; dcp_planner plans only for 1, 2 or 4, see
    #: write_model_file).
    dtype_bytes: int = 2
    #: Causal (decoder) attention, which halves attention FLOPs.
    causal: bool = True
    #: Gated MLP (SwiGLU): three FFN projections instead of two.
    gated_mlp: bool = True
    #: Diffusion-transformer adaptive layer-norm modulation.
    adaln_modulation: bool = False
    #: Width of one attention head where it is not hidden_size /
    #: num_attention_heads (e.g. Qwen3, Gemma); None (also what a value
    #: equal to that quotient becomes) otherwise. Python-only:
    #: dcp.v1.ModelSpec has no such field and the planner's cost model
    #: takes hidden_size / num_attention_heads; the profile times the
    #: attention core at this width, so the fitted attention costs are this
    #: model's.
    head_dim: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ModelSpec.name is {self.name!r}; give a "
                             "non-empty string (name=...)")
        for field in _POSITIVE:
            value = getattr(self, field)
            if not _is_int(value) or value <= 0:
                raise ValueError(
                    f"ModelSpec.{field} is {value!r}; give a positive "
                    f"integer ({field}=...) or a config with "
                    f"{' or '.join(_CONFIG_NAMES.get(field, (field,)))}")
        if not _is_int(self.vocab_size) or self.vocab_size < 0:
            raise ValueError(f"ModelSpec.vocab_size is {self.vocab_size!r}; "
                             "give an integer >= 0 (0: no vocabulary)")
        if self.dtype_bytes not in DTYPE_BYTES or \
                not _is_int(self.dtype_bytes):
            raise ValueError(
                f"ModelSpec.dtype_bytes is {self.dtype_bytes!r}; give the "
                "bytes of one element: 1 (fp8), 2 (bf16/fp16), 4 (fp32) or "
                "8 (fp64)")
        for field in ("causal", "gated_mlp", "adaln_modulation"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"ModelSpec.{field} is "
                                 f"{getattr(self, field)!r}; give True or "
                                 "False")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"ModelSpec.hidden_size {self.hidden_size} is not divisible "
                f"by num_attention_heads {self.num_attention_heads} (as "
                "dcp_planner requires)")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelSpec.num_kv_heads {self.num_kv_heads} must divide "
                f"num_attention_heads {self.num_attention_heads}")
        if self.head_dim is not None:
            if not _is_int(self.head_dim) or self.head_dim <= 0:
                raise ValueError(
                    f"ModelSpec.head_dim is {self.head_dim!r}; give a "
                    "positive integer (head_dim=...) or None for "
                    "hidden_size / num_attention_heads")
            if self.head_dim * self.num_attention_heads == self.hidden_size:
                object.__setattr__(self, "head_dim", None)

    @property
    def attention_head_dim(self) -> int:
        """The width of one attention head: head_dim, else hidden_size /
        num_attention_heads."""
        if self.head_dim is not None:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    def planner_fields(self) -> dict[str, Any]:
        """The dcp.v1.ModelSpec fields (FIELDS) as a dict: the model file's
        content."""
        return {field: getattr(self, field) for field in FIELDS}

    # The read-only mapping of the dict specs of earlier versions.
    def __getitem__(self, key: str) -> Any:
        if key in FIELDS or (key == "head_dim" and self.head_dim is not None):
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from FIELDS
        if self.head_dim is not None:
            yield "head_dim"

    def __len__(self) -> int:
        return len(FIELDS) + (self.head_dim is not None)

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in self.items())
        return f"ModelSpec({fields})"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


SpecLike = Union[ModelSpec, Mapping[str, Any]]


def config_fields(config: Any) -> dict[str, Any]:
    """The ModelSpec fields an HF-style config (an object or a dict) has
    under the names of _CONFIG_NAMES, plus its name."""
    def lookup(names):
        for name in names:
            if isinstance(config, dict) and name in config:
                return config[name]
            if config is not None and not isinstance(config, dict) and \
                    getattr(config, name, None) is not None:
                return getattr(config, name)
        return None

    fields = {}
    for field, names in _CONFIG_NAMES.items():
        value = lookup(names)
        if value is not None:
            fields[field] = int(value)
    name = lookup(("name_or_path", "_name_or_path", "model_type"))
    if name:
        fields["name"] = str(name)
    return fields


def model_spec(config: Any = None, **overrides: Any) -> ModelSpec:
    """A ModelSpec from `config` (an object or dict with HF-style attribute
    names: num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads, intermediate_size, vocab_size, head_dim) and
    keyword overrides (any ModelSpec field). Defaults: causal, gated (SwiGLU)
    MLP, no adaLN, bf16 (dtype_bytes=2), num_kv_heads = num_attention_heads,
    vocab_size 0, head_dim = hidden_size / num_attention_heads.
    ValueError names a missing or inconsistent field.
    (dcp_torch.model_spec_from_module reads them from an nn.Module.)"""
    known = FIELDS + PYTHON_FIELDS
    unknown = set(overrides) - set(known)
    if unknown:
        raise ValueError(f"unknown ModelSpec fields {sorted(unknown)}; "
                         f"known: {', '.join(known)}")
    spec = config_fields(config)
    spec.update(overrides)
    spec.setdefault("num_kv_heads", spec.get("num_attention_heads"))
    for field in _POSITIVE:
        spec.setdefault(field, None)  # named by ModelSpec's check
    return ModelSpec(**spec)


def as_model_spec(spec: SpecLike) -> ModelSpec:
    """`spec` as a ModelSpec: itself, or a mapping of its fields (the dict
    specs of earlier versions) checked by model_spec."""
    if isinstance(spec, ModelSpec):
        return spec
    if not isinstance(spec, collections.abc.Mapping):
        raise TypeError(f"a ModelSpec is expected, not {type(spec).__name__}"
                        "; build one with dcp_torch.model_spec(...) or "
                        "dcp_torch.model_spec_from_module(model, blocks)")
    return model_spec(**spec)


def write_model_file(spec: SpecLike, path: Union[str, os.PathLike]) -> None:
    """Writes `spec` as the JSON file of `dcp_planner --model=PATH` (its
    dcp.v1.ModelSpec fields). ValueError for a dtype_bytes dcp_planner does
    not plan for (8: fp64), naming the fix."""
    spec = as_model_spec(spec)
    if spec.dtype_bytes not in PLANNER_DTYPE_BYTES:
        raise ValueError(
            f"ModelSpec.dtype_bytes is {spec.dtype_bytes} (fp64), which "
            "dcp_planner does not plan for (1, 2 or 4); write the file of "
            "dataclasses.replace(spec, dtype_bytes=4) and give the planner "
            "half of each rank's memory (--gpu-memory), or train in fp32 or "
            "bf16")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec.planner_fields(), f, indent=2)
        f.write("\n")


def to_proto(spec: SpecLike) -> model_pb2.ModelSpec:
    """The dcp.v1.ModelSpec of `spec` (head_dim has no field there)."""
    return model_pb2.ModelSpec(**as_model_spec(spec).planner_fields())


def from_proto(proto: model_pb2.ModelSpec) -> ModelSpec:
    """The ModelSpec of a dcp.v1.ModelSpec (checked)."""
    return ModelSpec(**{field: getattr(proto, field) for field in FIELDS})


def check_matches_planner(spec: SpecLike,
                          planner_proto: model_pb2.ModelSpec) -> None:
    """ValueError naming each architecture field where the planner's model
    (RegisterWorkerResponse.model) differs from `spec`. The name may differ,
    and so may dtype_bytes: a module's weights need not have the dtype its
    activations take (e.g. fp32 weights under bf16 autocast), and the
    planner budgets memory for its own dtype_bytes, which the user sets."""
    spec = as_model_spec(spec)
    differing = [f"{field}: this model {spec[field]!r}, the planner "
                 f"{getattr(planner_proto, field)!r}" for field in FIELDS
                 if field not in ("name", "dtype_bytes")
                 and spec[field] != getattr(planner_proto, field)]
    if differing:
        raise ValueError(
            "the planner plans for another model (" + "; ".join(differing) +
            "); start dcp_planner with --model=FILE, FILE written by "
            "dcp_torch.write_model_file(dcp_torch.model_spec(...), FILE)")
