"""The ModelSpec read from plain nn.Modules: the tests' Llama-style and
DiT-style models, the example's (fused key-value and gate-up projections),
and the errors for what a module does not show."""

import importlib.util
import os

import pytest
import torch

import dcp_torch
import models
from test_gradient_equivalence import DIT_SPEC, LLAMA_SPEC

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "examples", "train_llama.py")

ARCHITECTURE = [f for f in LLAMA_SPEC if f not in ("name", "dtype_bytes")]


def _architecture(spec):
    return {field: spec[field] for field in ARCHITECTURE}


def test_the_llama_style_model_gives_its_spec():
    model = models.Llama().double()
    spec = dcp_torch.model_spec_from_module(model, model.layers)
    assert _architecture(spec) == _architecture(LLAMA_SPEC)
    assert spec["name"] == "Llama" and spec["dtype_bytes"] == 8
    other = models.Llama(hidden=48, layers=3, heads=6, kv_heads=2, ffn=80,
                         vocab=50)
    assert dcp_torch.model_spec_from_module(other, other.layers) == {
        "name": "Llama", "num_layers": 3, "hidden_size": 48,
        "num_attention_heads": 6, "num_kv_heads": 2, "ffn_hidden_size": 80,
        "vocab_size": 50, "dtype_bytes": 4, "causal": True,
        "gated_mlp": True, "adaln_modulation": False}


def test_the_dit_style_model_gives_its_spec_once_told_it_is_bidirectional():
    model = models.DiT()
    with pytest.raises(ValueError) as error:
        dcp_torch.model_spec_from_module(model, model.layers)
    message = str(error.value)
    assert "cannot build the ModelSpec of DiT: causal: no bool attribute " \
        "causal or is_causal" in message
    assert "Pass causal=... to dcp_torch.model_spec_from_module" in message
    spec = dcp_torch.model_spec_from_module(model, model.layers, causal=False)
    assert _architecture(spec) == _architecture(DIT_SPEC)
    model.is_causal = False  # or an attribute says so
    assert dcp_torch.model_spec_from_module(model, model.layers) == spec


def test_the_example_model_with_fused_projections_gives_its_spec():
    loaded = importlib.util.spec_from_file_location("train_llama", EXAMPLE)
    example = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(example)
    model = example.Llama(example.VOCAB, hidden=64, layers=4, heads=8,
                          kv_heads=4, ffn=128)
    spec = dcp_torch.model_spec_from_module(model, model.layers)
    assert spec == {"name": "Llama", "num_layers": 4, "hidden_size": 64,
                    "num_attention_heads": 8, "num_kv_heads": 4,
                    "ffn_hidden_size": 128, "vocab_size": example.VOCAB,
                    "dtype_bytes": 4, "causal": True, "gated_mlp": True,
                    "adaln_modulation": False}


class _Anonymous(torch.nn.Module):
    """Heads nowhere to be read: no attribute, no head_dim."""

    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)


def test_what_a_module_does_not_show_is_named_with_how_to_pass_it():
    blocks = torch.nn.ModuleList([_Anonymous(), _Anonymous()])
    with pytest.raises(ValueError) as error:
        dcp_torch.model_spec_from_module(blocks, blocks)
    message = str(error.value)
    assert "num_attention_heads: no attribute num_attention_heads, " \
        "num_heads" in message
    assert "Pass num_attention_heads=..., causal=..." in message
    spec = dcp_torch.model_spec_from_module(
        blocks, blocks, num_attention_heads=4, causal=False)
    assert (spec["hidden_size"], spec["ffn_hidden_size"], spec["num_layers"],
            spec["num_kv_heads"], spec["gated_mlp"]) == (16, 32, 2, 4, False)
    with pytest.raises(ValueError, match="unknown ModelSpec fields"):
        dcp_torch.model_spec_from_module(blocks, blocks, heads=4)
    with pytest.raises(ValueError, match="no blocks given"):
        dcp_torch.model_spec_from_module(blocks, [])


def test_an_hf_style_config_overrides_what_the_module_shows():
    model = models.Llama()
    model.config = {"num_hidden_layers": 2, "num_key_value_heads": 8,
                    "model_type": "llama"}
    spec = dcp_torch.model_spec_from_module(model, model.layers)
    assert (spec["name"], spec["num_kv_heads"], spec["hidden_size"]) == \
        ("llama", 8, 32)
