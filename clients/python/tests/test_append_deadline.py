"""The Appender's deadlines against a stalled server: a fake historyd (grpc.server with a generic
handler) whose AppendMessages reads the items and never answers, as a server stuck behind a lock
or a proxy that swallows its answers would. An item not answered within its deadline fails
DEADLINE_EXCEEDED, the stream is cancelled (the fake sees it end), the window's places come back,
and close() returns; an append that waits for a place past its deadline fails unsent.

Before the deadlines, the futures stayed pending until the client closed, and close() never
returned: nothing bounded an item but the caller's own patience."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Iterator, List

import grpc
import pytest

from historyd import AppendStreamBrokenError, Client, HistorydError
from historyd.v1 import envelope_pb2 as envelope
from historyd.v1 import history_service_pb2 as hs

# What each test may take at most (the deadlines under test are tenths of a second).
LIMIT = 5.0


class StalledServer:
    """A gRPC server whose HistoryService/AppendMessages takes every item and answers none. It
    counts the streams opened and the items read, and records each stream's end (the client
    cancelling it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read = threading.Condition(self.lock)  # notified with each item read
        self.opened = 0
        self.items: List[str] = []
        self.ended = threading.Semaphore(0)  # released once per stream the client ended
        handler = grpc.method_handlers_generic_handler(
            "historyd.v1.HistoryService",
            {"AppendMessages": grpc.stream_stream_rpc_method_handler(self._append)},
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[handler])
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _append(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        # No deserializer: each request is its bytes, which is all this server needs (it counts).
        with self.lock:
            self.opened += 1
        try:
            for r in requests:
                self._record(r)
        except Exception:  # the client cancelled while we read
            pass
        done = threading.Event()
        if context.add_callback(done.set):  # False: the call is over already
            done.wait()
        self.ended.release()
        return iter(())

    def _record(self, r: bytes) -> None:
        with self.read:
            self.items.append(r)
            self.read.notify_all()

    def wait_items(self, n: int) -> bool:
        """Whether n items (the windows counted) were read within LIMIT."""
        with self.read:
            return self.read.wait_for(lambda: len(self.items) >= n, timeout=LIMIT)

    def wait_ended(self, n: int) -> bool:
        """Whether n streams ended (cancelled by the client) within LIMIT."""
        deadline = time.monotonic() + LIMIT
        return all(self.ended.acquire(timeout=max(0.0, deadline - time.monotonic())) for _ in range(n))

    def stop(self) -> None:
        self.server.stop(0)


def within(fn, what: str):
    """fn() run on a thread, its result; fails the test (instead of hanging it) when fn has not
    returned within LIMIT."""
    with futures.ThreadPoolExecutor(max_workers=1) as ex:
        f = ex.submit(fn)
        try:
            return f.result(timeout=LIMIT)
        except futures.TimeoutError:
            pytest.fail(f"{what} did not return within {LIMIT} s")


class AnsweringServer(StalledServer):
    """A gRPC server whose AppendMessages answers its items in order, each once ``_hold`` returns:
    a healthy server, as slow as its subclass says."""

    def _hold(self) -> None:
        raise NotImplementedError

    def _append(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        with self.lock:
            self.opened += 1
        for i, r in enumerate(requests):
            self._record(r)
            if i == 0:
                continue  # the window
            self._hold()
            answer = hs.AddMessageResponse(message=envelope.Message(sequence=i + 1))
            yield hs.AppendMessagesResponse(index=i - 1, response=answer).SerializeToString()
        self.ended.release()


class SlowServer(AnsweringServer):
    """Answers every item, one at a time, ``delay`` seconds after reading it: a healthy server,
    slow."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__()

    def _hold(self) -> None:
        time.sleep(self.delay)  # the server's slowness, not the test's synchronisation


class GatedServer(AnsweringServer):
    """Answers its items in order, each once ``gate`` is set: a healthy server that holds its
    answers as long as the test says."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        super().__init__()

    def _hold(self) -> None:
        self.gate.wait()

    def stop(self) -> None:
        self.gate.set()
        super().stop()


@pytest.fixture()
def gated() -> Iterator[GatedServer]:
    s = GatedServer()
    yield s
    s.stop()


def item_alone_expired(err: BaseException, request_id: str) -> bool:
    """Whether err is the failure of a sent item whose own deadline passed, alone: DEADLINE_EXCEEDED
    with the item's request_id, to append it again."""
    return isinstance(err, AppendStreamBrokenError) and err.code == grpc.StatusCode.DEADLINE_EXCEEDED and err.request_id == request_id


@pytest.fixture()
def stalled() -> Iterator[StalledServer]:
    s = StalledServer()
    yield s
    s.stop()


def test_appender_items_fail_deadline_exceeded_when_the_server_never_answers(stalled: StalledServer) -> None:
    """The client's timeout is each item's deadline by default; on it the stream is cancelled and
    the items in flight fail DEADLINE_EXCEEDED, as broken items (may or may not be applied: their
    request ids are there to append them again)."""
    with Client(stalled.addr, tls=False, timeout=0.3) as client:
        t0 = time.monotonic()
        ap = client.appender(window=2)
        first = [ap.append_instruction("b", f"m{i}") for i in range(2)]
        for f in first:
            with pytest.raises(AppendStreamBrokenError) as ei:
                f.result(timeout=LIMIT)
            assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED, str(ei.value)
            assert ei.value.request_id
        assert stalled.wait_ended(1), "the stream was cancelled"
        # The window is free again: a third item gets a place at once, on a new stream, and meets
        # its own deadline there.
        third = within(lambda: ap.append_instruction("b", "m2"), "an append to a window the deadline emptied")
        with pytest.raises(AppendStreamBrokenError) as ei:
            third.result(timeout=LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        within(ap.close, "close()")  # nothing is left in flight
        assert stalled.wait_ended(1)
        assert stalled.opened == 2
        assert time.monotonic() - t0 < LIMIT


def test_appender_wait_for_a_place_honours_the_deadline(stalled: StalledServer) -> None:
    """An append that waits for a place in a full window past its own deadline fails
    DEADLINE_EXCEEDED without being sent (a plain HistorydError: nothing to append again), and
    takes no place; the item in flight fails at its deadline later."""
    with Client(stalled.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=1, timeout=1.0)
        held = ap.append_instruction("b", "held")
        t0 = time.monotonic()
        waited = within(lambda: ap.append_instruction("b", "waited", timeout=0.1), "an append waiting for a place")
        with pytest.raises(HistorydError) as ei:
            waited.result(timeout=LIMIT)
        assert not isinstance(ei.value, AppendStreamBrokenError), "the item was never sent"
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - t0 < 1.0, "it failed at its own deadline, before the held item's"
        with pytest.raises(AppendStreamBrokenError) as ei:
            held.result(timeout=LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        within(ap.close, "close()")
        assert stalled.wait_ended(1)
        with stalled.lock:
            assert len(stalled.items) == 2, "the window and the held item were sent, the waiting one not"


def test_appender_timeout_none_waits_for_the_answer(stalled: StalledServer) -> None:
    """timeout=None keeps an item waiting for its answer (no deadline) until the client closes,
    as before: the deadline is opt-out, not gone."""
    client = Client(stalled.addr, tls=False, timeout=0.1)
    ap = client.appender(window=2, timeout=None)
    fut = ap.append_instruction("b", "no deadline")
    with pytest.raises(futures.TimeoutError):
        fut.result(timeout=0.3)  # past the client's 0.1 s: the appender's None wins
    client.close()
    with pytest.raises(AppendStreamBrokenError) as ei:
        fut.result(timeout=LIMIT)
    assert ei.value.code == grpc.StatusCode.CANCELLED
    within(ap.close, "close()")


def test_appender_default_deadline_counts_from_the_sending() -> None:
    """The rule (appender.py; README "Many writes"): by default an item's deadline, the client's
    timeout, bounds the wait for its answer from when the item is sent, not its wait for a place
    in the window. Here a server answers each item 0.25 s after it comes, window 1, timeout 0.4 s:
    each item waits 0.25 s for a place, then 0.25 s for its answer. When the deadline counted from
    append(), the second item ran out at 0.4 s and cancelled the stream (review of the clients 2,
    fault 1: the asyncio and TypeScript appenders, fed a batch at once, failed most of it)."""
    slow = SlowServer(0.25)
    try:
        with Client(slow.addr, tls=False, timeout=0.4) as client:
            ap = client.appender(window=1)
            sent = [ap.append_instruction("b", f"m{i}") for i in range(3)]
            assert [f.result(timeout=LIMIT).sequence for f in sent] == [2, 3, 4]
            within(ap.close, "close()")
    finally:
        slow.stop()


def test_appender_never_sends_an_item_past_its_own_deadline(stalled: StalledServer) -> None:
    """An item whose own deadline passed before it is sent (here timeout=0, with a place free)
    fails DEADLINE_EXCEEDED unsent, and the stream, with an item in flight, goes on. It was sent,
    and the watchdog then cancelled the stream for it: every item in flight broke."""
    client = Client(stalled.addr, tls=False, timeout=None)
    ap = client.appender(window=4)
    held = ap.append_instruction("b", "held")
    late = ap.append_instruction("b", "late", timeout=0)
    with pytest.raises(HistorydError) as ei:
        late.result(timeout=LIMIT)
    assert not isinstance(ei.value, AppendStreamBrokenError), f"it was not sent: {ei.value!r}"
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert not held.done(), "the stream goes on"
    client.close()
    with pytest.raises(AppendStreamBrokenError) as ei:
        held.result(timeout=LIMIT)
    assert ei.value.code == grpc.StatusCode.CANCELLED, "the close, not the late item's deadline, ended the stream"
    within(ap.close, "close()")


@pytest.mark.parametrize("long", [1e10, float("inf")])
def test_appender_very_long_deadlines(stalled: StalledServer, long: float) -> None:
    """A deadline of any length, inf too, is a deadline. threading waits at most
    threading.TIMEOUT_MAX (292 years): a timeout of 1e10 s or inf raised OverflowError in the
    watchdog thread, which died and left the later items of its stream unbounded, and in append's
    wait for a place (review of the clients 2, fault 6).

    The rule (the module's doc; README "Reference"): an item's own deadline bounds its whole wait
    instead of the appender's ``timeout``, so items with long deadlines of their own are not cut by
    a shorter appender's ``timeout`` (ddc850b cut them: the stream was cancelled at the appender's
    0.2 s). An append with a long deadline waits for a place in the full window, until close()."""
    client = Client(stalled.addr, tls=False, timeout=None)
    waiting = futures.ThreadPoolExecutor(max_workers=1)
    try:
        ap = client.appender(window=2, timeout=0.2)  # shorter than the items' own deadlines
        a = ap.append_instruction("b", "a", timeout=long)
        b = ap.append_instruction("b", "b", timeout=long)
        with pytest.raises(futures.TimeoutError):
            a.result(timeout=0.8)  # four times the appender's timeout: not its to cut
        assert not b.done()
        s = ap._stream
        assert s is not None and s.watchdog.is_alive(), "the watchdog took the long deadlines"
        assert stalled.opened == 1 and not stalled.ended.acquire(timeout=0), "the stream goes on"
        # A full window: an append with a long deadline waits for a place.
        waited = waiting.submit(lambda: ap.append_instruction("b", "c", timeout=long))
        with pytest.raises(futures.TimeoutError):
            waited.result(timeout=0.2)
    finally:
        client.close()
        waiting.shutdown(wait=False)
    for f in (a, b):
        with pytest.raises(AppendStreamBrokenError) as ei:
            f.result(timeout=LIMIT)
        assert ei.value.code == grpc.StatusCode.CANCELLED, "the close, not a deadline, ended the stream"
    err = waited.exception(timeout=LIMIT)  # woken by the close: the client is closed, nothing sent
    assert isinstance(err, HistorydError) and not isinstance(err, AppendStreamBrokenError), repr(err)
    assert err.code == grpc.StatusCode.CANCELLED
    within(ap.close, "close()")
    with stalled.lock:
        assert len(stalled.items) == 3, "the window, a and b"


def test_appender_a_given_up_item_holds_its_place_until_the_appenders_timeout_from_then(stalled: StalledServer) -> None:
    """The rule (the module's doc; README "Reference"; the TypeScript client's alike): an item
    whose own deadline passes after it was sent fails alone and keeps its place in the window
    until its answer comes; if none comes within the appender's ``timeout`` counted from the giving
    up, the server is taken for stalled and the stream is cancelled. ddc850b bounded such an item
    by the appender's timeout from its sending instead: here the stream was cancelled at 0.3 s,
    before the item's own 0.6 s deadline, and the item failed with the stream."""
    with Client(stalled.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=2, timeout=0.3)
        t0 = time.monotonic()
        mine = ap.append_instruction("b", "mine", timeout=0.6)
        other = ap.append_instruction("b", "other", timeout=float("inf"))
        err = mine.exception(timeout=LIMIT)
        assert item_alone_expired(err, mine.request_id) and not err.stream_ended, repr(err)
        assert not other.done(), "mine alone failed"
        # Its place is held (the window is full): an append waiting 0.1 s for one fails unsent.
        late = within(lambda: ap.append_instruction("b", "late", timeout=0.1), "an append waiting for a place")
        err = late.exception(timeout=LIMIT)
        assert type(err) is HistorydError and err.code == grpc.StatusCode.DEADLINE_EXCEEDED, repr(err)
        with pytest.raises(AppendStreamBrokenError) as ei:
            other.result(timeout=LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and ei.value.stream_ended
        assert "given up" in str(ei.value), str(ei.value)
        assert time.monotonic() - t0 >= 0.6 + 0.3, "the stall counts from the giving up"
        assert stalled.wait_ended(1), "the stream was cancelled"
        within(ap.close, "close()")


def test_appender_a_given_up_item_without_an_appender_timeout_holds_its_place_until_its_answer(gated: GatedServer) -> None:
    """The rule (as above): with the appender's ``timeout`` None, a given-up item holds its place
    until its answer comes, however late; the answer frees it and is dropped."""
    with Client(gated.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=1, timeout=None)
        mine = ap.append_instruction("b", "mine", timeout=0.2)
        err = mine.exception(timeout=LIMIT)
        assert item_alone_expired(err, mine.request_id), repr(err)
        late = within(lambda: ap.append_instruction("b", "late", timeout=0.2), "an append waiting for a place")
        assert type(late.exception(timeout=LIMIT)) is HistorydError, "the place is held: late was not sent"
        gated.gate.set()  # mine's answer comes: its place is free, the answer dropped
        nxt = within(lambda: ap.append_instruction("b", "next"), "an append after the answer")
        assert nxt.result(timeout=LIMIT).sequence == 3
        assert mine.exception(timeout=0) is err
        within(ap.close, "close()")
        assert gated.opened == 1


def test_appender_an_items_own_deadline_fails_that_item_alone(gated: GatedServer) -> None:
    """The rule (the module's doc; README "Reference"): an item's own deadline (append(req,
    timeout=)) passing while the item is on the stream fails that item alone, DEADLINE_EXCEEDED
    with its request_id (the server may still write it: append it again with that id); the
    stream and the other items go on, and its answer is dropped when it comes. It cancelled the
    stream: every item in flight failed with it."""
    with Client(gated.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=4)
        mine = ap.append_instruction("b", "mine", timeout=0.2)
        other = ap.append_instruction("b", "other")
        err = mine.exception(timeout=LIMIT)
        assert item_alone_expired(err, mine.request_id), repr(err)
        assert not other.done(), f"the other item in flight went with it: {other.exception(timeout=0)!r}"
        gated.gate.set()  # the server answers: mine's answer is dropped, other's settles it
        assert other.result(timeout=LIMIT).sequence == 3
        assert within(lambda: ap.append_instruction("b", "next").result(timeout=LIMIT), "an append after").sequence == 4
        assert mine.exception(timeout=0) is err, "the late answer is dropped"
        within(ap.close, "close()")
        assert gated.opened == 1, "one stream throughout"
