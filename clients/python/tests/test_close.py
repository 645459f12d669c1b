"""Closing a client (Client.close, AsyncClient.close): a call in flight, a call pausing between
retries and a call made afterwards all fail with HistorydError CANCELLED, "the client was closed",
in both clients; nothing made after close() reaches the server.

A fake historyd (grpc.server with a generic handler) counts the calls that reach it; its GetBranch
holds each call until the client ends it, so the test knows the call is in flight."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from concurrent import futures
from typing import Any, Iterator

import grpc
import pytest

from conftest import Proxy
from historyd import AppendStreamBrokenError, Client, HistorydError, RetryPolicy
from historyd.aio import AsyncClient
from test_append_deadline import LIMIT, StalledServer, stalled  # noqa: F401 (the fixture)

FAST = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 2000), ("grpc.max_reconnect_backoff_ms", 100)]


class HoldingServer(grpc.GenericRpcHandler):
    """A gRPC server that counts every call it receives; HistoryService/GetBranch is held until the
    client ends it (``entered`` is set once one is in flight), any other method is UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.entered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[self])
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def service(self, details: Any) -> Any:
        with self.lock:
            self.calls += 1
        if details.method == "/historyd.v1.HistoryService/GetBranch":
            return grpc.unary_unary_rpc_method_handler(self._hold)
        return None

    def _hold(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        done = threading.Event()
        if context.add_callback(done.set):  # False: the call is over already
            self.entered.set()
            done.wait()
        return b""

    def stop(self) -> None:
        self.server.stop(0)


@pytest.fixture()
def holding() -> Iterator[HoldingServer]:
    s = HoldingServer()
    yield s
    s.stop()


def closed(err: BaseException) -> bool:
    return isinstance(err, HistorydError) and err.code == grpc.StatusCode.CANCELLED and "closed" in err.message


class Pausing(RetryPolicy):
    """A retry policy whose pause is 30 s, and which says when a call starts it (``paused``)."""

    paused: Any = None

    def backoff(self, attempt: int) -> float:
        self.paused.set()
        return 30.0


def refused_addr() -> str:
    """An address nothing listens on: a call to it fails UNAVAILABLE, which is retried."""
    s = socket.create_server(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr


def run_off_thread(fn: Any) -> "futures.Future[Any]":
    ex = futures.ThreadPoolExecutor(max_workers=1)
    f = ex.submit(fn)
    ex.shutdown(wait=False)
    return f


def test_close_ends_a_call_in_flight_and_the_calls_after_it(holding: HoldingServer) -> None:
    """Client.close() with GetBranch in flight: it raises HistorydError CANCELLED. A call after
    close() raised ValueError('Cannot invoke RPC on closed channel!') from grpc, and so did a watch,
    an inbox subscription and an appender's first append: not the documented HistorydError."""
    c = Client(holding.addr, tls=False, timeout=None)
    call = run_off_thread(lambda: c.get_branch(str(uuid.uuid4())))
    assert holding.entered.wait(LIMIT), "the call reached the server"
    c.close()
    err = call.exception(timeout=LIMIT)
    assert closed(err), f"the call in flight: {err!r}"
    n = holding.calls
    for what, fn in (
        ("a unary call", lambda: c.get_branch(str(uuid.uuid4()))),
        ("a watch", lambda: next(c.branch("b").watch(after=0))),
        ("an inbox subscription", lambda: next(c.exchange.subscribe_inbox(str(uuid.uuid4())))),
        ("an append", lambda: c.appender().append_instruction("b", "after close()")),
    ):
        with pytest.raises(Exception) as ei:
            fn()
        assert closed(ei.value), f"{what} after close(): {ei.value!r}"
    assert holding.calls == n, "nothing made after close() reached the server"


@pytest.mark.parametrize(
    "what, stub, method",
    [
        ("a unary call", "history_stub", "GetBranch"),
        ("a watch", "history_stub", "WatchBranch"),
        ("an inbox subscription", "exchange_stub", "SubscribeInbox"),
        ("an append", "history_stub", "AppendMessages"),
    ],
)
def test_a_call_racing_close_raises_the_closed_error(what: str, stub: str, method: str) -> None:
    """The rule (Client.close): a call made while close() runs on another thread raises
    HistorydError CANCELLED, as one made after it does. Each call checks the client, then makes
    its gRPC call: close() landing between the two (here the stub's method runs it first) left
    grpc's ValueError ('Cannot invoke RPC on closed channel!') to the caller."""
    c = Client(refused_addr(), tls=False, timeout=None)
    s = getattr(c, stub)
    real = getattr(s, method)

    def racing(*args: Any, **kwargs: Any) -> Any:
        c.close()  # another thread's close(), after the call's check
        return real(*args, **kwargs)

    setattr(s, method, racing)
    calls = {
        "a unary call": lambda: c.get_branch(str(uuid.uuid4())),
        "a watch": lambda: next(c.branch("b").watch(after=0)),
        "an inbox subscription": lambda: next(c.exchange.subscribe_inbox(str(uuid.uuid4()))),
        "an append": lambda: c.appender().append_instruction("b", "racing close()"),
    }
    with pytest.raises(Exception) as ei:
        calls[what]()
    assert closed(ei.value), f"{what} racing close(): {ei.value!r}"


def test_close_ends_the_appends_waiting_for_a_place(stalled: StalledServer) -> None:  # noqa: F811
    """Client.close() while an append waits for a place in a full window (the server answers
    nothing): the item in flight fails AppendStreamBrokenError CANCELLED, and the waiting append,
    given the place its failure freed, raises HistorydError CANCELLED unsent. It opened a new
    stream on the closed channel: ValueError('Cannot invoke RPC: Channel closed!'). (AsyncClient:
    test_aio_append.py, test_async_close_ends_the_appends_waiting_for_a_place.)"""
    c = Client(stalled.addr, tls=False, timeout=None)
    ap = c.appender(window=1)
    in_flight = ap.append_instruction("b", "in flight")
    # The stream has reached the server before close(): without this wait, close() could cancel it
    # before the server's handler ran, and the server counted no stream at all (opened 0).
    assert stalled.wait_items(1), "the item in flight reached the server"
    waiting = run_off_thread(lambda: ap.append_instruction("b", "waiting"))  # the window is full
    c.close()
    with pytest.raises(AppendStreamBrokenError) as ei:
        in_flight.result(timeout=LIMIT)
    assert ei.value.code == grpc.StatusCode.CANCELLED
    err = waiting.exception(timeout=LIMIT)
    assert closed(err), repr(err)
    ap.close()
    assert stalled.opened == 1, "no stream after close()"


@pytest.mark.asyncio
async def test_async_close_ends_a_call_in_flight_and_the_calls_after_it(holding: HoldingServer) -> None:
    """AsyncClient.close() with GetBranch in flight: it raised asyncio.CancelledError in the
    caller's task, as if the task itself had been cancelled (grpc.aio cancels the calls it finds
    on close); a call after close() raised grpc's UsageError('Channel is closed.'). Both are now
    HistorydError CANCELLED, and the task is not cancelled."""
    loop = asyncio.get_running_loop()
    c = AsyncClient(holding.addr, tls=False, timeout=None)
    call = asyncio.ensure_future(c.get_branch(str(uuid.uuid4())))
    assert await loop.run_in_executor(None, holding.entered.wait, LIMIT), "the call reached the server"
    await asyncio.wait_for(c.close(), LIMIT)
    done, _ = await asyncio.wait([call], timeout=LIMIT)
    assert done, "the call still waits after close()"
    assert not call.cancelled(), "close() is not a cancellation of the caller's task"
    assert closed(call.exception()), f"the call in flight: {call.exception()!r}"
    n = holding.calls
    with pytest.raises(Exception) as ei:
        await asyncio.wait_for(c.get_branch(str(uuid.uuid4())), LIMIT)
    assert closed(ei.value), f"a unary call after close(): {ei.value!r}"
    assert holding.calls == n, "nothing made after close() reached the server"


@pytest.mark.asyncio
async def test_async_a_cancelled_task_stays_cancelled(holding: HoldingServer) -> None:
    """The caller's own cancellation of a task in a call is still asyncio's CancelledError."""
    loop = asyncio.get_running_loop()
    async with AsyncClient(holding.addr, tls=False, timeout=None) as c:
        call = asyncio.ensure_future(c.get_branch(str(uuid.uuid4())))
        assert await loop.run_in_executor(None, holding.entered.wait, LIMIT)
        call.cancel()
        done, _ = await asyncio.wait([call], timeout=LIMIT)
        assert done and call.cancelled()


def test_close_ends_a_call_pausing_between_retries() -> None:
    """Client.close() while a call pauses before its next attempt: it raises HistorydError
    CANCELLED at once. It slept out its pause (30 s here), then tried the closed channel and raised
    ValueError."""
    policy = Pausing()
    policy.paused = threading.Event()
    c = Client(refused_addr(), tls=False, timeout=None, retry=policy, options=FAST)
    call = run_off_thread(lambda: c.get_branch(str(uuid.uuid4())))
    assert policy.paused.wait(LIMIT), "the first attempt failed UNAVAILABLE"
    c.close()
    try:
        err = call.exception(timeout=LIMIT)
    except futures.TimeoutError:
        pytest.fail(f"the call still pauses {LIMIT} s after close()")
    assert closed(err), repr(err)


@pytest.mark.asyncio
async def test_async_close_ends_a_call_pausing_between_retries() -> None:
    """As the sync test above: the call slept out its pause, then raised grpc's UsageError."""
    policy = Pausing()
    policy.paused = asyncio.Event()
    c = AsyncClient(refused_addr(), tls=False, timeout=None, retry=policy, options=FAST)
    call = asyncio.ensure_future(c.get_branch(str(uuid.uuid4())))
    await asyncio.wait_for(policy.paused.wait(), LIMIT)
    await asyncio.wait_for(c.close(), LIMIT)
    done, _ = await asyncio.wait([call], timeout=LIMIT)
    assert done, f"the call still pauses {LIMIT} s after close()"
    assert closed(call.exception()), repr(call.exception())


def test_close_ends_a_watch_pausing_between_reconnections(server, proxy: Proxy) -> None:
    """Client.close() while a watch pauses before reconnecting: the watch raises HistorydError
    CANCELLED at once. It slept out its pause (30 s here), then raised ValueError from the closed
    channel. (AsyncClient: test_watch.py, test_async_close_ends_a_watch_pausing_between_reconnections.)"""
    c = Client(proxy.addr, tls=False, options=FAST)
    b = c.create_branch()
    pausing = threading.Event()
    it = b.watch(after=0, on_resume=lambda cursor, err: pausing.set(), retry=RetryPolicy(max_attempts=5, initial_backoff=30.0, max_backoff=30.0, jitter=0))
    assert next(it).last_sequence == 1
    watching = run_off_thread(lambda: next(it))
    proxy.cut()  # the stream fails UNAVAILABLE
    assert pausing.wait(LIMIT), "on_resume: the watch pauses 30 s"
    c.close()
    try:
        err = watching.exception(timeout=LIMIT)
    except futures.TimeoutError:
        pytest.fail(f"the watch still pauses {LIMIT} s after close()")
    assert closed(err), repr(err)
