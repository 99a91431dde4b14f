"""The planner as a rank sees it: one method per dcp.v1.Planner RPC over gRPC.

Every call has a deadline. Every dcp.v1.Planner RPC is idempotent
(ReportStepStats per (worker, step, rank)), so every call is retried, but
only on UNAVAILABLE (the planner is not up, or restarting), with exponential
backoff and jitter; after the last attempt PlannerUnreachableError names the
address. Other errors come back at once as PlannerError with the planner's
code and message. Mirrors GrpcPlannerClient (planner/client/planner_client.h).
Thread-safe (gRPC channels and stubs are).
"""

import os
import random
import time

import grpc

from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch._proto import planner_service_pb2_grpc as pb_grpc

ADDRESS_ENVIRONMENT_VARIABLE = "DCP_PLANNER_ADDRESS"


class PlannerError(RuntimeError):
    """The planner answered a call with an error (code and message kept)."""

    def __init__(self, method, code, details):
        super().__init__(f"planner {method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


class PlannerUnreachableError(PlannerError):
    """Every attempt of a call found the planner UNAVAILABLE."""


class RetryPolicy:
    """Attempts per call (the first included) and the waits between them:
    initial_backoff_seconds, then each wait `multiplier` times longer, up to
    max_backoff_seconds, each jittered uniformly by +-`jitter` of itself."""

    def __init__(self, max_attempts=6, initial_backoff_seconds=0.2,
                 max_backoff_seconds=5.0, multiplier=2.0, jitter=0.2, seed=0):
        if max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts={max_attempts}; "
                             "it must be at least 1")
        self.max_attempts = max_attempts
        self.initial_backoff_seconds = initial_backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.multiplier = multiplier
        self.jitter = jitter
        self.seed = seed


def planner_address(address=None):
    """`address`, else $DCP_PLANNER_ADDRESS; ValueError when neither is set."""
    address = address or os.environ.get(
        ADDRESS_ENVIRONMENT_VARIABLE, "")
    if not address:
        raise ValueError(
            "no planner address: pass address='HOST:PORT' or set "
            f"{ADDRESS_ENVIRONMENT_VARIABLE}=HOST:PORT (where dcp_planner "
            "listens)")
    return address


class PlannerClient:
    """A dcp.v1.Planner client; see the module docstring.

    `sleep` (time.sleep by default) waits between attempts; tests inject one.
    """

    def __init__(self, address=None, call_deadline_seconds=30.0,
                 retry=None, sleep=time.sleep, channel=None):
        self.address = planner_address(address)
        self.call_deadline_seconds = call_deadline_seconds
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._random = random.Random(self.retry.seed)
        self._channel = channel or grpc.insecure_channel(
            self.address, options=[("grpc.max_receive_message_length",
                                    64 << 20)])
        self._stub = pb_grpc.PlannerStub(self._channel)
        self.attempts = 0

    def close(self):
        self._channel.close()

    def _backoff(self, next_attempt):
        p = self.retry
        wait = min(p.initial_backoff_seconds * p.multiplier ** (next_attempt - 2),
                   p.max_backoff_seconds)
        return wait * (1 + self._random.uniform(-p.jitter, p.jitter))

    def _call(self, method, request):
        rpc = getattr(self._stub, method)
        started = time.monotonic()
        for attempt in range(1, self.retry.max_attempts + 1):
            self.attempts += 1
            try:
                return rpc(request, timeout=self.call_deadline_seconds)
            except grpc.RpcError as error:
                code = error.code()
                if code != grpc.StatusCode.UNAVAILABLE:
                    raise PlannerError(method, code, error.details()) from None
                if attempt == self.retry.max_attempts:
                    raise PlannerUnreachableError(
                        method, code,
                        f"the DCP planner at {self.address} is unreachable "
                        f"after {attempt} attempts over "
                        f"{time.monotonic() - started:.1f} s "
                        f"({error.details()}); start dcp_planner there or "
                        f"point the address (or {ADDRESS_ENVIRONMENT_VARIABLE})"
                        " at it") from None
                self._sleep(self._backoff(attempt + 1))
        raise AssertionError("unreachable")

    def register_worker(self, request):
        return self._call("RegisterWorker", request)

    def submit_profile(self, request):
        return self._call("SubmitProfile", request)

    def submit_batches(self, request):
        return self._call("SubmitBatches", request)

    def get_plan(self, request):
        return self._call("GetPlan", request)

    def report_step_stats(self, request):
        return self._call("ReportStepStats", request)

    def get_cluster_model(self):
        return self._call("GetClusterModel", pb.GetClusterModelRequest())

    def list_workers(self):
        return self._call("ListWorkers", pb.ListWorkersRequest())
