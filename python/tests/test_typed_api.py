"""The typed public API: ModelSpec and RetryPolicy are frozen dataclasses
with typed, documented fields; every public function and method of
dcp_torch.__all__ carries type hints that resolve; py.typed ships."""

import dataclasses
import inspect
import os
import tomllib
import typing

import pytest

import dcp_torch
from dcp_torch import spec as spec_lib

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = dict(name="m", num_layers=2, hidden_size=32, num_attention_heads=8,
            num_kv_heads=4, ffn_hidden_size=64, vocab_size=64)


def _frozen_dataclass_with_typed_fields(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        assert field.name in hints, f"{cls.__name__}.{field.name} untyped"
    assert cls.__doc__ and len(cls.__doc__) > 80


def test_model_spec_is_a_frozen_typed_dataclass():
    _frozen_dataclass_with_typed_fields(dcp_torch.ModelSpec)
    spec = dcp_torch.model_spec(**SPEC)
    assert isinstance(spec, dcp_torch.ModelSpec)
    assert {f.name for f in dataclasses.fields(spec)} == \
        set(spec_lib.FIELDS + spec_lib.PYTHON_FIELDS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.hidden_size = 64
    changed = dataclasses.replace(spec, dtype_bytes=4)
    assert (changed.dtype_bytes, spec.dtype_bytes) == (4, 2)
    with pytest.raises(ValueError, match="ModelSpec.num_kv_heads 3 must "
                                         "divide num_attention_heads 8"):
        dataclasses.replace(spec, num_kv_heads=3)  # checked when built
    with pytest.raises(ValueError, match="ModelSpec.causal is 1; give True"):
        dcp_torch.ModelSpec(**dict(SPEC, causal=1))
    assert hash(spec) == hash(dcp_torch.model_spec(**SPEC))


def test_model_spec_keeps_the_dict_interface_and_the_proto_round_trip():
    spec = dcp_torch.model_spec(**SPEC)
    legacy = {"name": "m", "num_layers": 2, "hidden_size": 32,
              "num_attention_heads": 8, "num_kv_heads": 4,
              "ffn_hidden_size": 64, "vocab_size": 64, "dtype_bytes": 2,
              "causal": True, "gated_mlp": True, "adaln_modulation": False}
    assert spec == legacy and legacy == spec and dict(spec) == legacy
    assert spec["hidden_size"] == spec.hidden_size == 32
    with pytest.raises(KeyError):
        spec["head_dim"]  # hidden / heads: no head_dim of its own
    proto = spec_lib.to_proto(spec)
    assert spec_lib.from_proto(proto) == spec
    assert isinstance(spec_lib.from_proto(proto), dcp_torch.ModelSpec)
    assert spec_lib.to_proto(legacy) == proto  # dicts are still accepted
    assert spec_lib.as_model_spec(legacy) == spec
    with pytest.raises(TypeError, match="a ModelSpec is expected, not list"):
        spec_lib.as_model_spec([1, 2])


def test_retry_policy_is_a_frozen_typed_dataclass():
    _frozen_dataclass_with_typed_fields(dcp_torch.RetryPolicy)
    policy = dcp_torch.RetryPolicy(4, 0.5)  # positional as before
    assert (policy.max_attempts, policy.initial_backoff_seconds,
            policy.max_backoff_seconds) == (4, 0.5, 5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_attempts = 1
    assert dataclasses.replace(policy, seed=3).seed == 3
    assert policy == dcp_torch.RetryPolicy(max_attempts=4,
                                           initial_backoff_seconds=0.5)
    with pytest.raises(ValueError, match=r"RetryPolicy.jitter=1.5; give a "
                                         r"fraction in \[0, 1\)"):
        dcp_torch.RetryPolicy(jitter=1.5)
    with pytest.raises(ValueError, match="RetryPolicy.multiplier=0.5"):
        dcp_torch.RetryPolicy(multiplier=0.5)
    with pytest.raises(ValueError, match="initial_backoff_seconds=-1"):
        dcp_torch.RetryPolicy(initial_backoff_seconds=-1)


def _public_callables():
    """(qualified name, function) for every function of __all__ and every
    public method (and __init__) its classes define, exceptions aside."""
    for name in dcp_torch.__all__:
        value = getattr(dcp_torch, name)
        if inspect.isfunction(value):
            yield name, value
        elif inspect.isclass(value) and not issubclass(value, BaseException):
            for attribute, member in vars(value).items():
                if inspect.isfunction(member) and (
                        not attribute.startswith("_") or attribute in (
                            "__init__", "__enter__", "__exit__", "__iter__",
                            "__len__")):
                    yield f"{name}.{attribute}", member


def test_every_public_function_and_method_has_type_hints():
    missing = []
    checked = 0
    for name, function in _public_callables():
        hints = typing.get_type_hints(function)  # they resolve
        parameters = [p for p in inspect.signature(function).parameters
                      if p != "self"]
        missing += [f"{name}({p})" for p in parameters if p not in hints]
        if "return" not in hints:
            missing.append(f"{name} -> ?")
        checked += 1
    assert not missing, missing
    assert checked >= 25


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(dcp_torch.__file__),
                                       "py.typed"))
    with open(os.path.join(PYTHON_DIR, "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"][
        "dcp_torch"]
