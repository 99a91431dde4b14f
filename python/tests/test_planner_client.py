import grpc
import pytest

from dcp_torch.local_planner import free_loopback_port
from dcp_torch.planner_client import (PlannerClient, PlannerUnreachableError,
                                      RetryPolicy, planner_address)


def test_unreachable_planner_is_retried_with_backoff_then_named():
    address = f"127.0.0.1:{free_loopback_port()}"
    waits = []
    client = PlannerClient(address, call_deadline_seconds=5,
                           retry=RetryPolicy(max_attempts=4, jitter=0.0),
                           sleep=waits.append)
    with pytest.raises(PlannerUnreachableError) as error:
        client.get_cluster_model()
    assert client.attempts == 4
    assert waits == pytest.approx([0.2, 0.4, 0.8])
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    message = str(error.value)
    assert f"the DCP planner at {address} is unreachable after 4 attempts" \
        in message
    assert "DCP_PLANNER_ADDRESS" in message


def test_backoff_is_capped_and_jittered_within_bounds():
    client = PlannerClient("127.0.0.1:1", retry=RetryPolicy(
        max_attempts=10, initial_backoff_seconds=1, max_backoff_seconds=3,
        jitter=0.25, seed=5))
    waits = [client._backoff(n) for n in range(2, 10)]
    assert all(0.75 <= w <= 1.25 for w in waits[:1])
    assert all(2.25 <= w <= 3.75 for w in waits[2:])


def test_address_comes_from_the_argument_or_the_environment(monkeypatch):
    monkeypatch.setenv("DCP_PLANNER_ADDRESS", "planner:50051")
    assert planner_address() == "planner:50051"
    assert planner_address("other:1") == "other:1"
    monkeypatch.delenv("DCP_PLANNER_ADDRESS")
    with pytest.raises(ValueError, match="DCP_PLANNER_ADDRESS=HOST:PORT"):
        planner_address()


def test_bad_retry_policy_names_the_field():
    with pytest.raises(ValueError, match="max_attempts=0"):
        RetryPolicy(max_attempts=0)
