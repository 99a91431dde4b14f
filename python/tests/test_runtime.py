"""dcp_torch.init and the training loop against a real dcp_planner on 4
Gloo processes: the in-process profile, step reports, and the clear errors
(a diverging rank, an empty batch, a skipped micro-batch, another model)."""

import os

import pytest
import torch

import dcp_torch
from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch.local_planner import LocalPlanner, free_loopback_port
from dcp_torch.planner_client import PlannerClient
from test_gradient_equivalence import LLAMA_SPEC, build, fetch_of

LENGTHS = [5, 9, 17, 33, 64, 3, 40, 12]
QUICK_PROFILE = dcp_torch.ProfileOptions(
    repeats=2, warmup=0, gemm_tokens=(1, 8, 64, 256, 512),
    attention_lengths=(8, 16, 32, 64, 128),
    all_to_all_bytes=(4 << 10, 16 << 10, 64 << 10, 256 << 10),
    all_reduce_bytes=(4 << 10, 16 << 10, 64 << 10, 256 << 10),
    dtype=torch.float64)


def _init(rank, address, tag, profile=False, spec=LLAMA_SPEC, log=None):
    model = build("llama", dcp_torch.attention)
    runtime = dcp_torch.init(model, model.layers, address, spec=spec,
                             worker_id=f"{tag}-rank{rank}",
                             node_name=f"node{rank // 2}", profile=profile,
                             profile_options=QUICK_PROFILE,
                             log=log or (lambda message: None))
    return model, runtime


def _train(model, runtime, batches, skip_micro_batch_on=None):
    losses = []
    for step in runtime.steps(batches, fetch_of("llama", LENGTHS)):
        total = torch.zeros((), dtype=torch.float64)
        for index, mb in enumerate(step):
            if runtime.rank == skip_micro_batch_on and index == 0:
                continue
            with mb:
                loss = mb.token_loss_sum(model.per_token_loss(mb.inputs)) \
                    * step.loss_scale
                loss.backward()
            total += loss.detach()
        step.sync_gradients()
        torch.distributed.all_reduce(total)
        losses.append(total.item())
        step.report()
        for p in model.parameters():
            p.grad = None
    return losses


def profile_and_train(rank, world_size, address):
    lines = []
    model, runtime = _init(rank, address, "profile", profile=True,
                           log=lines.append)
    batches = [list(enumerate(LENGTHS)), list(enumerate(LENGTHS))[::-1]]
    losses = _train(model, runtime, batches)
    runtime.close()
    return lines, losses, runtime.reporter.sent, runtime.reporter.failed


def test_profile_is_submitted_fitted_and_steps_reported(ranks4):
    with LocalPlanner(LLAMA_SPEC, 2, 2, 1e9) as planner:
        results = ranks4.run(profile_and_train, planner.address)
        fitted = PlannerClient(planner.address).get_cluster_model()
    lines = results[0][0]
    assert any("profiled" in line for line in lines), lines
    assert not fitted.using_default_params
    assert fitted.params_version >= 1
    # Every rank's samples arrived: compute from its blocks (5 sizes each),
    # all-to-alls in node-local pairs and across the 2 nodes, all-reduces
    # over the world (4 sizes each). (Whether a fit is kept or its defaults
    # are depends on how noisy a loaded CPU's timings are.)
    samples = {r.name: r.num_samples for r in fitted.reports}
    assert samples == {"gemm": 20, "attention_forward": 20,
                       "attention_backward": 20, "all_to_all_intra": 16,
                       "all_to_all_inter": 16, "all_reduce_intra": 0,
                       "all_reduce_inter": 16, "activation_memory": 0,
                       # ZeRO-1's collectives: dcp_torch leaves the optimizer
                       # to the user, so it profiles none.
                       "reduce_scatter_intra": 0, "reduce_scatter_inter": 0,
                       "all_gather_intra": 0, "all_gather_inter": 0,
                       # Whole micro-batches and the optimizer step: the
                       # worker's profiler times them, dcp_torch does not.
                       "micro_batch": 0, "optimizer_step": 0,
                       "sp_micro_batch": 0}, samples
    assert any(not r.used_defaults for r in fitted.reports)
    assert fitted.step_relative_error > 0  # the planner got step reports
    for _, losses, sent, failed in results:
        assert (sent, failed) == (2, 0)
        # Both steps train on the same samples (in another order).
        assert losses[0] == pytest.approx(losses[1], rel=1e-9)
        assert losses == results[0][1]


def _training_error(rank, address, tag, batches, error_type,
                    skip_micro_batch_on=None):
    """The message of the `error_type` that training `batches` raises on this
    rank, or "no error"."""
    model, runtime = _init(rank, address, tag)
    try:
        _train(model, runtime, batches, skip_micro_batch_on)
    except error_type as error:
        return str(error)
    finally:
        runtime.close()
    return "no error"


def _messages(ranks4, run):
    """What `run` returns on each of 4 ranks against a 2 x 2 planner."""
    with LocalPlanner(LLAMA_SPEC, 2, 2, 1e9) as planner:
        return ranks4.run(run, planner.address)


def diverge(rank, world_size, address):
    batch = list(enumerate(LENGTHS))
    if rank == 2:
        batch = batch[::-1]  # another order: another fingerprint
    return _training_error(rank, address, "diverge", [batch],
                           dcp_torch.RankDivergedError)


def test_a_rank_with_another_batch_stops_every_rank(ranks4):
    messages = _messages(ranks4, diverge)
    assert "rank 2's batch for step 0" in messages[2]
    assert "same sampler" in messages[2]
    for rank in (0, 1, 3):
        assert "rank(s) [2] could not get its batch or plan" in \
            messages[rank], messages[rank]


def empty_batch(rank, world_size, address):
    return _training_error(rank, address, "empty",
                           [list(enumerate(LENGTHS)), []],
                           dcp_torch.EmptyBatchError)


def test_an_empty_batch_is_a_clear_error_on_every_rank(ranks4):
    for message in _messages(ranks4, empty_batch):
        assert "empty global batch for step 1" in message


def skip_micro_batch(rank, world_size, address):
    return _training_error(rank, address, "skip", [list(enumerate(LENGTHS))],
                           dcp_torch.RankDivergedError, skip_micro_batch_on=3)


def test_a_rank_that_skips_a_micro_batch_stops_every_rank(ranks4):
    # 1e9 bytes: four SP-1 groups, so rank 3 has micro-batches to skip.
    for rank, message in enumerate(_messages(ranks4, skip_micro_batch)):
        assert "1 rank(s) reached sync_gradients of step 0 without" in message
        assert ("rank 3 skipped [0]" in message) == (rank == 3)


def other_model(rank, world_size, address):
    spec = dict(LLAMA_SPEC, num_kv_heads=2)
    try:
        _init(rank, address, "other", spec=spec)
    except ValueError as error:
        return str(error)
    return "no error"


def test_a_model_other_than_the_planners_is_refused(ranks4):
    for message in _messages(ranks4, other_model):
        assert "num_kv_heads: this model 2, the planner 4" in message
        assert "--model=FILE" in message


def test_the_planner_assigns_and_lists_every_rank(ranks4):
    with LocalPlanner(LLAMA_SPEC, 2, 2, 1e9) as planner:
        ranks4.run(profile_free_register, planner.address)
        workers = PlannerClient(planner.address).list_workers()
    assert workers.world_complete
    assert sorted(w.first_rank for w in workers.workers) == [0, 1, 2, 3]
    assert {w.backend for w in workers.workers} == {"gloo"}
    assert {w.job_id for w in workers.workers} == {"py-job"}


def profile_free_register(rank, world_size, address):
    os.environ["DCP_JOB_ID"] = "py-job"  # as a launcher sets it
    _, runtime = _init(rank, address, "list")
    runtime.close()
    return runtime.torch_rank_of


def test_get_plan_by_fingerprint_agrees_with_the_cpp_planner():
    """The planner computes the fingerprint in C++: a by-step GetPlan with
    this package's fingerprint is served; a wrong one is refused."""
    batch = list(enumerate(LENGTHS))
    with LocalPlanner(LLAMA_SPEC, 1, 1, 1e9) as planner:
        client = PlannerClient(planner.address)
        # A CPU (Gloo) worker: the planner counts no communicator memory
        # (with no backend it would keep the H200 defaults' NCCL ones).
        client.register_worker(pb.RegisterWorkerRequest(
            worker_id="w", node_name="n", num_ranks=1, backend="gloo"))
        from dcp_torch.runtime import Runtime
        # Only a registered worker's batch is taken.
        with pytest.raises(dcp_torch.PlannerError, match="worker_id is empty"):
            client.submit_batches(pb.SubmitBatchesRequest(
                batches=[Runtime._batch_proto(batch, 3)]))
        client.submit_batches(pb.SubmitBatchesRequest(
            worker_id="w", batches=[Runtime._batch_proto(batch, 3)]))
        good = client.get_plan(pb.GetPlanRequest(
            worker_id="w", step=3,
            batch_fingerprint=dcp_torch.batch_fingerprint(batch)))
        assert good.plan.step == 3
        with pytest.raises(dcp_torch.PlannerError, match="fingerprint"):
            client.get_plan(pb.GetPlanRequest(
                worker_id="w", step=3,
                batch_fingerprint=dcp_torch.batch_fingerprint(batch[::-1])))


def unreachable(rank, world_size, address):
    waits = []
    client = PlannerClient(address, call_deadline_seconds=5,
                           retry=dcp_torch.RetryPolicy(max_attempts=3,
                                                       jitter=0.0),
                           sleep=waits.append)
    model = build("llama", dcp_torch.attention)
    try:
        dcp_torch.init(model, model.layers, address, spec=LLAMA_SPEC,
                       worker_id=f"unreachable-rank{rank}", profile=False,
                       client=client, log=lambda message: None)
    except dcp_torch.PlannerUnreachableError as error:
        return str(error), waits
    return "no error", waits


def test_init_retries_an_unreachable_planner_then_names_its_address(ranks4):
    address = f"127.0.0.1:{free_loopback_port()}"  # nobody listens there
    for message, waits in ranks4.run(unreachable, address):
        assert f"the DCP planner at {address} is unreachable after 3 " \
            "attempts" in message, message
        assert "RegisterWorker" in message
        assert waits == pytest.approx([0.2, 0.4])  # backoff, doubling
