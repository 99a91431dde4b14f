"""The ModelSpec read from plain nn.Modules: the tests' Llama-style and
DiT-style models, the example's (fused key-value and gate-up projections),
and the errors for what a module does not show."""

import dataclasses
import importlib.util
import json
import os

import pytest
import torch

import dcp_torch
import models
from dcp_torch import spec as spec_lib
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
    example = _load_example()
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


def test_an_fp64_model_gives_dtype_bytes_8_which_the_planner_file_refuses(
        tmp_path):
    model = models.Llama().double()
    spec = dcp_torch.model_spec_from_module(model, model.layers)
    assert spec.dtype_bytes == 8 and isinstance(spec, dcp_torch.ModelSpec)
    # dcp_planner plans for 1, 2 or 4 bytes: refused before it starts,
    # naming the value and the fix.
    with pytest.raises(ValueError) as error:
        dcp_torch.write_model_file(spec, tmp_path / "model.json")
    message = str(error.value)
    assert "ModelSpec.dtype_bytes is 8 (fp64), which dcp_planner does not " \
        "plan for (1, 2 or 4)" in message
    assert "dataclasses.replace(spec, dtype_bytes=4)" in message
    assert not (tmp_path / "model.json").exists()
    dcp_torch.write_model_file(dataclasses.replace(spec, dtype_bytes=4),
                               tmp_path / "model.json")
    written = json.loads((tmp_path / "model.json").read_text())
    assert written == dict(spec, dtype_bytes=4)
    with pytest.raises(ValueError, match="ModelSpec.dtype_bytes is 3; give "
                                         "the bytes of one element"):
        dataclasses.replace(spec, dtype_bytes=3)


class _WideQueryBlock(torch.nn.Module):
    """Qwen3-style attention: 4 heads of 16 over a hidden size of 32 (the
    query projection is twice as wide as the hidden size); no head_dim
    attribute, so it comes from the query width over the head count."""

    def __init__(self, hidden=32, heads=4, kv_heads=2, head_dim=16, ffn=48):
        super().__init__()
        self.num_heads = heads
        self.q_proj = torch.nn.Linear(hidden, heads * head_dim)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * head_dim)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * head_dim)
        self.o_proj = torch.nn.Linear(heads * head_dim, hidden)
        self.gate_proj = torch.nn.Linear(hidden, ffn)
        self.up_proj = torch.nn.Linear(hidden, ffn)
        self.down_proj = torch.nn.Linear(ffn, hidden)


def test_a_head_dim_other_than_hidden_over_heads_is_read_and_kept():
    blocks = torch.nn.ModuleList([_WideQueryBlock(), _WideQueryBlock()])
    spec = dcp_torch.model_spec_from_module(blocks, blocks, causal=True)
    # ffn 48, not the output projection's 64; kv heads 32 / 16 = 2, not 4.
    assert (spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads,
            spec.ffn_hidden_size, spec.gated_mlp) == (32, 4, 2, 48, True)
    assert spec.head_dim == 16 and spec.attention_head_dim == 16
    assert spec["head_dim"] == 16 and "head_dim" in dict(spec)
    # The planner has no head_dim field: the proto and file leave it out.
    assert spec_lib.to_proto(spec).hidden_size == 32
    assert "head_dim" not in spec.planner_fields()
    # A head_dim attribute (the tests' Llama) gives the same.
    model = models.Llama(hidden=32, heads=4, kv_heads=2, ffn=48, head_dim=16)
    from_attribute = dcp_torch.model_spec_from_module(model, model.layers)
    assert (from_attribute.head_dim, from_attribute.num_kv_heads,
            from_attribute.ffn_hidden_size) == (16, 2, 48)
    # hidden / heads is no head_dim of its own: the spec of before.
    plain = models.Llama()
    assert dcp_torch.model_spec_from_module(plain, plain.layers).head_dim \
        is None


def test_an_hf_config_with_an_explicit_head_dim_gives_it():
    config = {"num_hidden_layers": 2, "hidden_size": 32,
              "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 48, "head_dim": 16, "model_type": "qwen3"}
    spec = dcp_torch.model_spec(config)
    assert (spec.name, spec.head_dim, spec.attention_head_dim) == \
        ("qwen3", 16, 16)
    assert dcp_torch.model_spec(config, head_dim=8).attention_head_dim == 8
    assert dcp_torch.model_spec(dict(config, head_dim=None)).head_dim is None
    with pytest.raises(ValueError, match="ModelSpec.head_dim is -1"):
        dcp_torch.model_spec(config, head_dim=-1)


def test_the_profile_times_attention_at_the_model_s_head_dim(monkeypatch):
    from dcp_torch import profiler
    monkeypatch.setattr(profiler, "_profile_collectives",
                        lambda *args: [])  # no processes here
    blocks = torch.nn.ModuleList([_WideQueryBlock()])
    spec = dcp_torch.model_spec_from_module(blocks, blocks, causal=True)
    shapes = []

    def core(q, k, v, causal):
        shapes.append(tuple(q.shape))
        return q * 1.0
    options = dcp_torch.ProfileOptions(repeats=1, warmup=0, gemm_tokens=(4,),
                                       attention_lengths=(8,))
    samples = profiler.profile(spec, blocks, None, [0], 1,
                               torch.device("cpu"), options, core)
    assert set(shapes) == {(4, 8, 16)}  # heads, length, head_dim
    attention = [s for s in samples if s.op == s.ATTENTION_FORWARD]
    assert attention[0].flops == 4.0 * 32 * 0.5 * 8 * 8  # the planner's


def _load_example():
    loaded = importlib.util.spec_from_file_location("train_llama", EXAMPLE)
    example = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(example)
    return example


def test_the_example_describes_plans_of_one_layout_and_of_phases():
    from dcp_torch._proto import plan_pb2
    describe = _load_example().describe
    one = plan_pb2.Plan(groups=[
        plan_pb2.Group(ranks=[0, 1], sp_size=2, micro_batches=[
            plan_pb2.MicroBatch(checkpointed_layers=1)]),
        plan_pb2.Group(ranks=[2], sp_size=1, micro_batches=[
            plan_pb2.MicroBatch(), plan_pb2.MicroBatch()])])
    assert describe(one) == \
        "1xSP1 + 1xSP2, 3 micro-batches, recompute <= 1 layers"
    phased = plan_pb2.Plan(phases=[
        plan_pb2.Phase(groups=one.groups),
        plan_pb2.Phase(groups=[plan_pb2.Group(
            ranks=[0, 1, 2], sp_size=3, micro_batches=[
                plan_pb2.MicroBatch(checkpointed_layers=2)])])])
    assert describe(phased) == ("1xSP1 + 1xSP2, then 1xSP3, 4 micro-batches, "
                                "recompute <= 2 layers")
