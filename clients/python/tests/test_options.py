"""Options that feed a sleep, a wait or a timeout (RetryPolicy, Keepalive, the clients' and the
appenders' timeouts) are checked where they are given: a value out of range raises ValueError naming
the option and its range, in both clients alike. Unchecked, they failed later and elsewhere: a
watch's pause between reconnections raised OverflowError from time.sleep (a backoff past its
range, or one that grew unbounded), Client(keepalive=Keepalive(time=1e300)) raised OverflowError
from grpc, a NaN item deadline killed the sync appender's watchdog thread (StopIteration), and a
negative timeout failed every call DEADLINE_EXCEEDED."""

from __future__ import annotations

import math
import socket
import uuid

import pytest

from historyd import Client, Keepalive, RetryPolicy
from historyd import _requests as rq
from historyd.aio import AsyncClient
from historyd.v1 import history_service_pb2 as hs

NAN, INF = float("nan"), float("inf")


def nowhere() -> str:
    """An address nothing listens on (no call made in these tests reaches it)."""
    s = socket.create_server(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


@pytest.mark.parametrize(
    "field, value",
    [
        ("initial_backoff", -1.0),
        ("initial_backoff", 1e10),  # time.sleep's OverflowError
        ("initial_backoff", INF),
        ("initial_backoff", NAN),
        ("max_backoff", -0.5),
        ("max_backoff", 1e10),
        ("max_backoff", NAN),
        ("multiplier", -2.0),
        ("multiplier", 0.5),
        ("multiplier", INF),
        ("multiplier", NAN),
        ("jitter", -0.1),
        ("jitter", 1.5),
        ("jitter", NAN),
    ],
)
def test_retry_policy_refuses_values_out_of_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"RetryPolicy\.{field} must be .* in \["):
        RetryPolicy(**{field: value})


def test_retry_backoff_stays_in_range() -> None:
    """Within the ranges the pause never overflows: max_backoff 0 (no bound) grows to MAX_WAIT at
    most. It raised OverflowError (a float power past its range) and grew past what time.sleep
    takes."""
    p = RetryPolicy(initial_backoff=1e9, max_backoff=0, multiplier=1e9, jitter=1.0)
    for attempt in (1, 2, 40, 10_000):
        assert 0 <= p.backoff(attempt) <= 2 * rq.MAX_WAIT
    assert RetryPolicy(initial_backoff=0, max_backoff=0, multiplier=1e9).backoff(10_000) == 0
    assert RetryPolicy(jitter=0).backoff(10) == 2.0, "the default policy: 50 ms doubling to 2 s"


@pytest.mark.parametrize("field", ["time", "timeout"])
@pytest.mark.parametrize("value", [0.0, -1.0, 1e300, INF, NAN, 2147484.0])
def test_keepalive_refuses_values_out_of_range(field: str, value: float) -> None:
    """gRPC takes these as 32-bit milliseconds: 1 ms to 2147483.647 s."""
    with pytest.raises(ValueError, match=rf"Keepalive\.{field} must be .* in \[0\.001, 2147483\.647\]"):
        Keepalive(**{field: value})


def test_keepalive_range_ends_are_taken() -> None:
    for v in (0.001, 2147483.647):
        Client(nowhere(), tls=False, keepalive=Keepalive(time=v, timeout=v)).close()


@pytest.mark.parametrize("value", [-1.0, NAN])
def test_client_timeouts_refuse_values_out_of_range(value: float) -> None:
    """The client's timeout, the appender's, an item's and a call's: None or seconds in [0, inf]."""
    with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
        Client(nowhere(), tls=False, timeout=value)
    with Client(nowhere(), tls=False, timeout=INF) as c:
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            c.appender(timeout=value)
        ap = c.appender(timeout=None)
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            ap.append(hs.AddMessageRequest(branch_id=str(uuid.uuid4())), timeout=value)
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            c.get_branch(str(uuid.uuid4()), timeout=value)
        ap.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("value", [-1.0, NAN])
async def test_async_client_timeouts_refuse_values_out_of_range(value: float) -> None:
    with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
        AsyncClient(nowhere(), tls=False, timeout=value)
    async with AsyncClient(nowhere(), tls=False, timeout=INF) as c:
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            c.appender(timeout=value)
        ap = c.appender(timeout=None)
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            await ap.append(hs.AddMessageRequest(branch_id=str(uuid.uuid4())), timeout=value)
        with pytest.raises(ValueError, match=r"timeout.* must be None or .* in \[0, inf\]"):
            await c.get_branch(str(uuid.uuid4()), timeout=value)
        await ap.close()


def test_zero_and_infinite_timeouts_are_taken() -> None:
    assert not math.isnan(RetryPolicy(initial_backoff=0, max_backoff=0).backoff(3))
    with Client(nowhere(), tls=False, timeout=0) as c:
        c.appender(timeout=INF).close()
