import os
import subprocess
import sys
import zipfile

import pytest

import dcp_torch
from dcp_torch import spec as spec_lib

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)


def test_spec_from_an_hf_style_config():
    config = {"num_hidden_layers": 4, "hidden_size": 64,
              "num_attention_heads": 8, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 100,
              "model_type": "llama"}
    spec = dcp_torch.model_spec(config, dtype_bytes=4)
    assert spec == {"name": "llama", "num_layers": 4, "hidden_size": 64,
                    "num_attention_heads": 8, "num_kv_heads": 2,
                    "ffn_hidden_size": 128, "vocab_size": 100,
                    "dtype_bytes": 4, "causal": True, "gated_mlp": True,
                    "adaln_modulation": False}
    assert spec_lib.from_proto(spec_lib.to_proto(spec)) == spec


def test_spec_errors_name_the_field():
    with pytest.raises(ValueError, match="ModelSpec.ffn_hidden_size is None"):
        dcp_torch.model_spec(num_layers=1, hidden_size=8,
                             num_attention_heads=2)
    with pytest.raises(ValueError, match="num_kv_heads 3 must divide"):
        dcp_torch.model_spec(num_layers=1, hidden_size=8,
                             num_attention_heads=2, num_kv_heads=3,
                             ffn_hidden_size=8)
    with pytest.raises(ValueError, match="unknown ModelSpec fields"):
        dcp_torch.model_spec(layers=3)


def test_cuda_library_pins_equal_the_libtorch_ones():
    """python/requirements.txt pins the CUDA libraries `import torch` loads
    that the toolkit lacks; they must be the versions torch's own CUDA
    requirements pin."""
    def pins(path):
        out = {}
        for line in open(path):
            line = line.split("#")[0].split(";")[0].strip()
            if "==" in line:
                name, version = line.split("==")
                out[name.strip()] = version.strip()
        return out
    ours = pins(os.path.join(PYTHON_DIR, "requirements.txt"))
    torch_cuda = pins(os.path.join(REPO, "third_party", "libtorch",
                                   "cuda_requirements.txt"))
    shared = {name for name in ours if name.startswith("nvidia-")}
    assert shared, "no CUDA library pins in python/requirements.txt"
    for name in shared:
        assert ours[name] == torch_cuda[name], name


def test_the_wheel_carries_stubs_generated_from_the_protos(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check",
                    "-w", str(tmp_path), PYTHON_DIR], check=True,
                   cwd=tmp_path)
    wheel = next(p for p in os.listdir(tmp_path) if p.endswith(".whl"))
    assert wheel.startswith("dcp_torch-0.1.0-py3")
    names = set(zipfile.ZipFile(tmp_path / wheel).namelist())
    assert "dcp_torch/_proto/planner_service_pb2_grpc.py" in names
    assert "dcp_torch/runtime.py" in names
    assert "dcp_torch/py.typed" in names  # PEP 561: typed
    protos = [n[:-6] for n in os.listdir(os.path.join(REPO, "proto", "dcp",
                                                      "v1"))
              if n.endswith(".proto")]
    for proto in protos:
        assert f"dcp_torch/_proto/{proto}_pb2.py" in names
    assert not any(n.startswith("dcp/") for n in names)  # no top-level dcp
