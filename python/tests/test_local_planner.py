"""LocalPlanner's start-up errors carry the planner's own words (its log is
read before the folder holding it is removed); spawn_gloo_ranks gives its
ranks what torchrun would; built_planner_binary finds the CPU build."""

import os

import pytest

from dcp_torch.local_planner import (LocalPlanner, built_planner_binary,
                                     spawn_gloo_ranks)
from test_gradient_equivalence import LLAMA_SPEC


def _failing_binary(tmp_path, message, status):
    binary = tmp_path / "fake_planner.sh"
    binary.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit {status}\n")
    binary.chmod(0o755)
    return str(binary)


def test_a_planner_that_exits_at_start_up_shows_its_message(tmp_path):
    binary = _failing_binary(tmp_path, "dcp_planner: model.json: no such "
                             "thing as this model", 3)
    planner = LocalPlanner(LLAMA_SPEC, 1, 1, 1e9, binary=binary)
    with pytest.raises(RuntimeError) as error:
        planner.__enter__()
    message = str(error.value)
    assert f"dcp_planner ({binary}) exited with status 3" in message
    assert "dcp_planner: model.json: no such thing as this model" in message
    assert planner._dir is None  # the temporary folder is still removed


def test_the_real_planner_given_a_bad_flag_names_it():
    binary = os.environ.get("DCP_PLANNER_BINARY")
    if not binary:
        pytest.skip("needs $DCP_PLANNER_BINARY (python/run_tests.sh sets it)")
    with pytest.raises(RuntimeError) as error:
        with LocalPlanner(LLAMA_SPEC, 1, 1, 1e9,
                          extra_flags=["--no-such-flag"]):
            pass
    assert "unknown flag --no-such-flag" in str(error.value)


def _report_rank(out_dir):
    import torch
    import torch.distributed as dist
    total = torch.ones(())
    dist.all_reduce(total)
    with open(os.path.join(out_dir, os.environ["RANK"]), "w") as f:
        f.write(f"{dist.get_world_size()} {os.environ['DCP_NODE_NAME']} "
                f"{int(total.item())} {torch.get_num_threads()}")


def test_spawn_gloo_ranks_gives_each_rank_torchruns_environment(tmp_path):
    spawn_gloo_ranks(_report_rank, (str(tmp_path),), world_size=3,
                     ranks_per_node=2)
    seen = {rank.name: rank.read_text() for rank in tmp_path.iterdir()}
    assert seen == {"0": "3 node0 3 1", "1": "3 node0 3 1",
                    "2": "3 node1 3 1"}


def test_built_planner_binary_falls_back_to_the_cpu_build(tmp_path):
    def planner_under(*parts):
        path = tmp_path.joinpath(*parts, "planner", "service", "dcp_planner")
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)

    # Nothing built: the bazel-bin path, for the error to name.
    assert built_planner_binary(str(tmp_path)) == str(
        tmp_path / "bazel-bin" / "planner" / "service" / "dcp_planner")
    cpu = planner_under("bazel-out", "k8-opt", "bin")
    assert built_planner_binary(str(tmp_path)) == cpu
    latest = planner_under("bazel-bin")
    assert built_planner_binary(str(tmp_path)) == latest
