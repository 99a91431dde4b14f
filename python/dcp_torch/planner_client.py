"""The planner as a rank sees it: one method per dcp.v1.Planner RPC over gRPC.

Every call has a deadline. Every dcp.v1.Planner RPC is idempotent
(ReportStepStats per (worker, step, rank)), so every call is retried, but
only on UNAVAILABLE (the planner is not up, or restarting), with exponential
backoff and jitter; after the last attempt PlannerUnreachableError names the
address. Other errors come back at once as PlannerError with the planner's
code and message. Mirrors GrpcPlannerClient (planner/client/planner_client.h).
Thread-safe (gRPC channels and stubs are).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Any, Callable, Optional

import grpc

from dcp_torch._proto import planner_service_pb2 as pb
from dcp_torch._proto import planner_service_pb2_grpc as pb_grpc

ADDRESS_ENVIRONMENT_VARIABLE = "DCP_PLANNER_ADDRESS"


class PlannerError(RuntimeError):
    """The planner answered a call with an error (code and message kept)."""

    def __init__(self, method: str, code: grpc.StatusCode,
                 details: str) -> None:
        super().__init__(f"planner {method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


class PlannerUnreachableError(PlannerError):
    """Every attempt of a call found the planner UNAVAILABLE."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a PlannerClient retries a call the planner answers UNAVAILABLE:
    `max_attempts` per call (the first included), waiting
    initial_backoff_seconds before the second, each wait `multiplier` times
    the one before, up to max_backoff_seconds, each jittered uniformly by
    +-`jitter` of itself (from a random.Random(`seed`)). Frozen: derive
    another with dataclasses.replace(policy, max_attempts=...)."""

    #: Attempts per call, the first included; at least 1.
    max_attempts: int = 6
    #: The wait before the second attempt, in seconds.
    initial_backoff_seconds: float = 0.2
    #: The longest wait, in seconds (before jitter).
    max_backoff_seconds: float = 5.0
    #: Each wait over the one before; at least 1.
    multiplier: float = 2.0
    #: The relative jitter of each wait, in [0, 1).
    jitter: float = 0.2
    #: The seed of the jitter's random.Random.
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts={self.max_attempts}; "
                             "it must be at least 1")
        for field in ("initial_backoff_seconds", "max_backoff_seconds"):
            if getattr(self, field) < 0:
                raise ValueError(f"RetryPolicy.{field}={getattr(self, field)}"
                                 "; give a wait of 0 seconds or more")
        if self.multiplier < 1:
            raise ValueError(f"RetryPolicy.multiplier={self.multiplier}; "
                             "it must be at least 1 (waits never shrink)")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"RetryPolicy.jitter={self.jitter}; give a "
                             "fraction in [0, 1), e.g. 0.2 for +-20%")


def planner_address(address: Optional[str] = None) -> str:
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

    def __init__(self, address: Optional[str] = None,
                 call_deadline_seconds: float = 30.0,
                 retry: Optional[RetryPolicy] = None,
                 sleep: Callable[[float], Any] = time.sleep,
                 channel: Optional[grpc.Channel] = None) -> None:
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

    def close(self) -> None:
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

    def register_worker(self, request: pb.RegisterWorkerRequest
                        ) -> pb.RegisterWorkerResponse:
        return self._call("RegisterWorker", request)

    def submit_profile(self, request: pb.SubmitProfileRequest
                       ) -> pb.SubmitProfileResponse:
        return self._call("SubmitProfile", request)

    def submit_batches(self, request: pb.SubmitBatchesRequest
                       ) -> pb.SubmitBatchesResponse:
        return self._call("SubmitBatches", request)

    def get_plan(self, request: pb.GetPlanRequest) -> pb.GetPlanResponse:
        return self._call("GetPlan", request)

    def report_step_stats(self, request: pb.ReportStepStatsRequest
                          ) -> pb.ReportStepStatsResponse:
        return self._call("ReportStepStats", request)

    def get_cluster_model(self) -> pb.GetClusterModelResponse:
        return self._call("GetClusterModel", pb.GetClusterModelRequest())

    def list_workers(self) -> pb.ListWorkersResponse:
        return self._call("ListWorkers", pb.ListWorkersRequest())
