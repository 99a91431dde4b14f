"""The ModelSpec (proto/dcp/v1/model.proto) of a user's model: what the
planner's cost model needs, built from an HF-style config (or keywords), and
written as the JSON file `dcp_planner --model=FILE` reads. Pure."""

import json

from dcp_torch._proto import model_pb2

# ModelSpec JSON field names (cost_model/model_spec.h), in order.
FIELDS = ("name", "num_layers", "hidden_size", "num_attention_heads",
          "num_kv_heads", "ffn_hidden_size", "vocab_size", "dtype_bytes",
          "causal", "gated_mlp", "adaln_modulation")

# Where an HF-style config keeps each field (first name found wins).
_CONFIG_NAMES = {
    "num_layers": ("num_hidden_layers", "num_layers", "depth", "n_layer"),
    "hidden_size": ("hidden_size", "d_model", "n_embd"),
    "num_attention_heads": ("num_attention_heads", "num_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "ffn_hidden_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size",),
}


def config_fields(config):
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


def model_spec(config=None, **overrides):
    """A ModelSpec dict from `config` (an object or dict with HF-style
    attribute names: num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads, intermediate_size, vocab_size) and keyword overrides
    (any FIELDS name). Defaults: causal, gated (SwiGLU) MLP, no adaLN, bf16
    (dtype_bytes=2), num_kv_heads = num_attention_heads, vocab_size 0.
    ValueError names a missing or inconsistent field.
    (dcp_torch.model_spec_from_module reads them from an nn.Module.)"""
    spec = {"name": "model", "dtype_bytes": 2, "causal": True,
            "gated_mlp": True, "adaln_modulation": False, "vocab_size": 0}
    spec.update(config_fields(config))
    unknown = set(overrides) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown ModelSpec fields {sorted(unknown)}; "
                         f"known: {', '.join(FIELDS)}")
    spec.update(overrides)
    spec.setdefault("num_kv_heads", spec.get("num_attention_heads"))
    for field in ("num_layers", "hidden_size", "num_attention_heads",
                  "num_kv_heads", "ffn_hidden_size"):
        if not isinstance(spec.get(field), int) or spec[field] <= 0:
            raise ValueError(
                f"ModelSpec.{field} is {spec.get(field)!r}; give a positive "
                f"integer ({field}=...) or a config with "
                f"{' or '.join(_CONFIG_NAMES.get(field, (field,)))}")
    if spec["hidden_size"] % spec["num_attention_heads"]:
        raise ValueError(
            f"ModelSpec.hidden_size {spec['hidden_size']} is not divisible by "
            f"num_attention_heads {spec['num_attention_heads']}")
    if spec["num_attention_heads"] % spec["num_kv_heads"]:
        raise ValueError(
            f"ModelSpec.num_kv_heads {spec['num_kv_heads']} must divide "
            f"num_attention_heads {spec['num_attention_heads']}")
    return {field: spec[field] for field in FIELDS}


def write_model_file(spec, path):
    """Writes `spec` as the JSON file of `dcp_planner --model=PATH`."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")


def to_proto(spec):
    return model_pb2.ModelSpec(**spec)


def from_proto(proto):
    return {field: getattr(proto, field) for field in FIELDS}


def check_matches_planner(spec, planner_proto):
    """ValueError naming each architecture field where the planner's model
    (RegisterWorkerResponse.model) differs from `spec`. The name may differ,
    and so may dtype_bytes: a module's weights need not have the dtype its
    activations take (e.g. fp32 weights under bf16 autocast), and the
    planner budgets memory for its own dtype_bytes, which the user sets."""
    planner = from_proto(planner_proto)
    differing = [f"{field}: this model {spec[field]!r}, the planner "
                 f"{planner[field]!r}" for field in FIELDS
                 if field not in ("name", "dtype_bytes")
                 and spec[field] != planner[field]]
    if differing:
        raise ValueError(
            "the planner plans for another model (" + "; ".join(differing) +
            "); start dcp_planner with --model=FILE, FILE written by "
            "dcp_torch.write_model_file(dcp_torch.model_spec(...), FILE)")
