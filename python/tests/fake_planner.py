"""A PlannerClient fake for tests that script the plans: it registers every
rank at once (planner rank = the rank in the worker id "...-rank<R>"), plans
for `spec`, serves plans[step] for GetPlan and records what it is sent. Like the real planner it refuses
a batch without a worker id, and it checks that every call of a process
names the incarnation it registered with."""

from dcp_torch import spec as spec_lib
from dcp_torch._proto import cluster_pb2, plan_pb2
from dcp_torch._proto import planner_service_pb2 as pb


def plan(step, *groups):
    """A dcp.v1.Plan; groups: (ranks, [(sequence indices, checkpointed
    layers) per micro-batch])."""
    return plan_pb2.Plan(step=step, strategy="scripted", groups=[
        plan_pb2.Group(ranks=ranks, sp_size=len(ranks), micro_batches=[
            plan_pb2.MicroBatch(sequence_indices=indices,
                                checkpointed_layers=layers)
            for indices, layers in micro])
        for ranks, micro in groups])


def phased_plan(step, *phases):
    """A dcp.v1.Plan that re-groups the ranks within the step; phases: the
    groups of each, as for plan()."""
    return plan_pb2.Plan(step=step, strategy="scripted", phases=[
        plan_pb2.Phase(groups=plan(step, *groups).groups) for groups in phases])


class FakePlannerClient:
    def __init__(self, spec, world_size, plans, gpus_per_node=2):
        self.address = "fake-planner:0"
        self._spec = spec
        self._world_size = world_size
        self._plans = plans
        self._gpus_per_node = gpus_per_node
        self.submitted_steps = []
        self.reports = []
        self._incarnation = None

    def _check_caller(self, request):
        assert request.worker_id, "a call without a worker_id"
        assert request.incarnation == self._incarnation, (
            f"incarnation {request.incarnation!r} is not the registered "
            f"{self._incarnation!r}")

    def register_worker(self, request):
        assert len(request.incarnation) == 16, request.incarnation
        assert (request.precision in ("bf16", "fp32") and
                request.optimizer_sharding in ("none", "zero3")) or (
            request.precision, request.optimizer_sharding) == ("", ""), request
        self._incarnation = request.incarnation
        rank = int(request.worker_id.rsplit("-rank", 1)[1])
        return pb.RegisterWorkerResponse(
            first_rank=rank, num_ranks=1, world_size=self._world_size,
            world_complete=True, model=spec_lib.to_proto(self._spec),
            cluster=cluster_pb2.ClusterSpec(
                num_nodes=self._world_size // self._gpus_per_node,
                gpus_per_node=self._gpus_per_node))

    def submit_batches(self, request):
        self._check_caller(request)
        self.submitted_steps += [b.step for b in request.batches]
        return pb.SubmitBatchesResponse(accepted=len(request.batches))

    def get_plan(self, request):
        self._check_caller(request)
        return pb.GetPlanResponse(plan=self._plans[request.step])

    def report_step_stats(self, request):
        self.reports.append(request.step)
        return pb.ReportStepStatsResponse()

    def close(self):
        pass
