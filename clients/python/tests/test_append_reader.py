"""The append stream's reader thread (issue 21 review, finding C), against a fake call so that the
order of answers and cancels is the test's: a cancelled future is skipped, and any end of the
reader breaks the stream, fails the items in flight, releases their slots and ends the requests."""

from __future__ import annotations

import queue
import threading
from typing import Any, List

import pytest

from historyd.appender import Appender, AppendStreamBrokenError, _Stream
from historyd.v1 import history_service_pb2 as hs

_DONE = object()


class FakeCall:
    """An AppendMessages call whose answers the test feeds: a response, an exception to raise, or
    _DONE to end OK. It reads the request iterator on a thread of its own, as gRPC does."""

    def __init__(self, requests: Any) -> None:
        self.answers: "queue.Queue[Any]" = queue.Queue()
        self.sent: List[Any] = []
        self.requests_ended = threading.Event()
        self.cancelled = False
        threading.Thread(target=self._drain, args=(requests,), daemon=True).start()

    def _drain(self, requests: Any) -> None:
        for r in requests:
            self.sent.append(r)
        self.requests_ended.set()

    def __iter__(self) -> Any:
        while True:
            a = self.answers.get(timeout=30)
            if a is _DONE:
                return
            if isinstance(a, BaseException):
                raise a
            yield a

    def cancel(self) -> None:
        self.cancelled = True
        self.answers.put(_DONE)


class FakeStub:
    def __init__(self) -> None:
        self.call: Any = None

    def AppendMessages(self, requests: Any, metadata: Any = None) -> FakeCall:  # noqa: N802 (gRPC's name)
        self.call = FakeCall(requests)
        return self.call


def ok_answer(index: int, text: str) -> hs.AppendMessagesResponse:
    resp = hs.AppendMessagesResponse(index=index)
    resp.response.message.id = f"00000000-0000-4000-8000-{index:012d}"
    resp.response.message.instruction.instruction = text
    return resp


def start(window: int = 4):
    stub = FakeStub()
    slots = threading.Semaphore(window)
    return _Stream(stub, None, window, slots), stub.call, slots


def send(s: _Stream, slots: threading.Semaphore, rid: str):
    from concurrent.futures import Future

    assert slots.acquire(timeout=5), "a slot was never released"
    fut: Future = Future()
    assert s.send(hs.AddMessageRequest(branch_id="b", request_id=rid), fut)
    return fut


def test_a_sent_future_cannot_be_cancelled() -> None:
    """The rule (Appender.append): a sent item's future is running, so cancel() returns False and
    the answer settles it; cancel() used to return True for an item the server then applied, and
    its answer was dropped (review of the clients, fault 3)."""
    s, call, slots = start()
    first = send(s, slots, "r0")
    assert first.running()
    assert not first.cancel(), "an item sent cannot be taken back"
    call.answers.put(ok_answer(0, "zero"))
    second = send(s, slots, "r1")
    call.answers.put(ok_answer(1, "one"))
    assert first.result(timeout=10).content["instruction"] == "zero"
    assert second.result(timeout=10).content["instruction"] == "one"
    assert not s.broken
    call.answers.put(_DONE)
    s.close()


def test_settling_a_cancelled_future_is_skipped() -> None:
    """_settle skips a cancelled future: set_result on one raises InvalidStateError, which killed
    the reader (issue 21 review, finding C)."""
    from concurrent.futures import Future

    from historyd.appender import _settle

    fut: Future = Future()
    assert fut.cancel()
    _settle(fut, result="late")
    _settle(fut, exc=ValueError("late"))
    assert fut.cancelled()


@pytest.mark.parametrize("failure", [ValueError("decoder fault"), "answer to no item"])
def test_any_reader_exit_breaks_the_stream(failure: Any) -> None:
    s, call, slots = start(window=2)
    futs = [send(s, slots, "r0"), send(s, slots, "r1")]
    if failure == "answer to no item":
        call.answers.put(ok_answer(0, "zero"))
        call.answers.put(ok_answer(1, "one"))
        call.answers.put(ok_answer(2, "extra"))  # no item in flight: the reader's popleft fails
        assert futs[0].result(timeout=10).content["instruction"] == "zero"
        assert futs[1].result(timeout=10).content["instruction"] == "one"
    else:
        call.answers.put(failure)
        for i, f in enumerate(futs):
            with pytest.raises(AppendStreamBrokenError) as e:
                f.result(timeout=10)
            assert e.value.request_id == f"r{i}"
    s.reader.join(timeout=10)
    assert not s.reader.is_alive()
    assert s.broken
    assert call.requests_ended.wait(timeout=10), "the request stream was not ended"
    assert call.cancelled, "the call was not cancelled"
    for _ in range(2):  # every slot given back
        assert slots.acquire(timeout=5)


class FakeClient:
    """What an Appender uses of a Client: its stub and call metadata."""

    def __init__(self, stub: Any) -> None:
        self.history_stub = stub
        self._metadata = None


def item(rid: str) -> hs.AddMessageRequest:
    return hs.AddMessageRequest(branch_id="b", request_id=rid)


def test_done_callback_may_append_with_the_window_full() -> None:
    """The rule: a future's done-callback may append the next item (a chained pipeline) however
    full the window is, because the answer that settled its future has freed that item's slot.
    concurrent.futures runs a done-callback on the thread that settles the future; when that was
    the reader and the slot was still held, or another append took the freed slot first, the
    callback's append waited for a slot only the reader could free: the reader blocked for good,
    no later future settled and close() hung (review of the clients, fault 1)."""
    stub = FakeStub()
    ap = Appender(FakeClient(stub), window=1)
    first = ap.append(item("r0"))  # the window (1) is full
    call = stub.call

    # Another thread waits for a slot too: it takes the one r0's answer frees, so the callback's
    # append must wait for the next answer, which only a reader that is not blocked can read.
    other_sent = threading.Event()
    other: List[Any] = []

    def append_other() -> None:
        other.append(ap.append(item("r1")))
        other_sent.set()

    chained: List[Any] = []
    chained_sent = threading.Event()

    def on_done(_f: Any) -> None:
        other_sent.wait(timeout=10)
        chained.append(ap.append(item("r2")))
        chained_sent.set()

    first.add_done_callback(on_done)
    t = threading.Thread(target=append_other, daemon=True)
    t.start()
    call.answers.put(ok_answer(0, "zero"))
    assert other_sent.wait(timeout=10), "r0's answer did not free its slot"
    call.answers.put(ok_answer(1, "one"))
    assert chained_sent.wait(timeout=10), "the callback's append never returned: the reader is blocked in it"
    call.answers.put(ok_answer(2, "two"))
    assert first.result(timeout=10).content["instruction"] == "zero"
    assert other[0].result(timeout=10).content["instruction"] == "one"
    assert chained[0].result(timeout=10).content["instruction"] == "two"
    call.answers.put(_DONE)
    ap.close()


class ClosedChannelStub:
    """A stub whose AppendMessages raises, as grpc's does on a closed channel."""

    def AppendMessages(self, requests: Any, metadata: Any = None) -> Any:  # noqa: N802 (gRPC's name)
        raise ValueError("Cannot invoke RPC on closed channel!")


def test_append_whose_stream_cannot_open_gives_its_slot_back() -> None:
    """The rule: an append that fails before its item is sent holds no slot afterwards. append()
    took a slot before it built the stream; when building it raised (the client's channel
    closed), the slot leaked, and after `window` such calls append blocked forever (review of the
    clients, fault 4)."""
    ap = Appender(FakeClient(ClosedChannelStub()), window=2)
    errors: List[BaseException] = []

    def run() -> None:
        for i in range(5):
            try:
                ap.append(item(f"r{i}"))
            except ValueError as e:
                errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), f"append blocked after {len(errors)} failed calls: their slots leaked"
    assert len(errors) == 5
    ap.close()


def test_close_from_a_done_callback_returns() -> None:
    """The rule (Appender.close): close() called from a future's done-callback, on the settler
    thread, stops taking items and returns; the answers still to come are settled after the
    callback returns. It waited for the reader, which waited for the settler to take the
    answers it had read: with a window of answers waiting to be settled, the callback, the
    settler and the reader waited on each other for good (a pipeline that stops on its first
    error, closing from the callback that sees it, hung)."""
    stub = FakeStub()
    ap = Appender(FakeClient(stub), window=1)
    first = ap.append(item("r0"))
    call = stub.call
    go = threading.Event()
    closed = threading.Event()

    def on_done(_f: Any) -> None:
        go.wait(timeout=10)
        ap.close()
        closed.set()

    first.add_done_callback(on_done)  # r0 is unanswered: the callback runs on the settler
    call.answers.put(ok_answer(0, "zero"))  # the settler runs on_done, which waits for go
    later = [ap.append(item("r1"))]  # r0's answer freed its place
    call.answers.put(ok_answer(1, "one"))  # read and queued for the settler, which is busy
    later.append(ap.append(item("r2")))
    call.answers.put(ok_answer(2, "two"))  # the reader waits for room in the settler's queue
    call.answers.put(_DONE)
    go.set()
    assert closed.wait(timeout=5), "close() in the done-callback never returned"
    assert first.result(timeout=5).content["instruction"] == "zero"
    assert [f.result(timeout=5).content["instruction"] for f in later] == ["one", "two"]
    with pytest.raises(RuntimeError):
        ap.append(item("r3"))
    ap.close()


class LaggingCall(FakeCall):
    """A FakeCall whose cancel() takes effect only when the test says (ends()), as gRPC's reader
    sees a cancelled call end some time after cancel() returns."""

    def __init__(self, requests: Any) -> None:
        super().__init__(requests)
        self.cancel_called = threading.Event()

    def cancel(self) -> None:
        self.cancelled = True
        self.cancel_called.set()

    def ends(self) -> None:
        self.answers.put(_DONE)


def test_a_stream_cancelled_for_a_deadline_takes_no_more_items() -> None:
    """The rule (the module's doc): an item past its deadline cancels its stream, and the next
    append opens a new one. Between the cancel and the reader's seeing the call end, the stream
    still took items: they were queued on a call already cancelled, and failed with another
    item's deadline instead of going to a new stream."""
    import time
    from concurrent.futures import Future

    class Stub(FakeStub):
        def AppendMessages(self, requests: Any, metadata: Any = None) -> LaggingCall:  # noqa: N802
            self.call = LaggingCall(requests)
            return self.call

    stub = Stub()
    slots = threading.Semaphore(4)
    s = _Stream(stub, None, 4, slots)
    call = stub.call
    slots.acquire()
    late: Future = Future()
    assert s.send(hs.AddMessageRequest(branch_id="b", request_id="late"), late, 0.0)
    assert call.cancel_called.wait(timeout=5), "the watchdog did not cancel the call"
    slots.acquire()
    assert not s.send(hs.AddMessageRequest(branch_id="b", request_id="next"), Future()), "a cancelled stream took an item"
    slots.release()
    call.ends()
    with pytest.raises(AppendStreamBrokenError) as ei:
        late.result(timeout=5)
    assert ei.value.code.name == "DEADLINE_EXCEEDED"
    s.reader.join(timeout=5)
    assert not s.reader.is_alive()


class BrokeSinceTheCheck:
    """A stream the appender found whole, broken by the time it sends: its watchdog (a deadline)
    or its reader (the call ended) broke it in between, so send() takes no item."""

    broken = False

    def send(self, *args: Any, **kwargs: Any) -> bool:
        self.broken = True
        return False


def test_an_append_racing_a_stream_break_goes_on_a_new_stream() -> None:
    """The rule (the module's doc): when the stream breaks, the items in flight fail and the next
    append opens a new stream. An append that found the stream whole and then, sending, found it
    broken sent nothing and failed AppendStreamBrokenError UNAVAILABLE all the same, an item that
    was never in flight."""
    stub = FakeStub()
    ap = Appender(FakeClient(stub), window=2, timeout=None)
    ap._stream = BrokeSinceTheCheck()  # type: ignore[assignment]
    fut = ap.append(item("r0"))
    assert stub.call is not None, "the item went on a new stream"
    stub.call.answers.put(ok_answer(0, "zero"))
    assert fut.result(timeout=10).content["instruction"] == "zero"
    stub.call.answers.put(_DONE)
    ap.close()


class HeldCall(FakeCall):
    """A FakeCall that takes no request until the test sets ``go``: as gRPC's sending, held back
    by flow control, leaves the items queued."""

    def __init__(self, requests: Any) -> None:
        self.go = threading.Event()
        super().__init__(requests)

    def _drain(self, requests: Any) -> None:
        self.go.wait(timeout=30)
        super()._drain(requests)


class HeldStub(FakeStub):
    def AppendMessages(self, requests: Any, metadata: Any = None) -> HeldCall:  # noqa: N802 (gRPC's name)
        self.call = HeldCall(requests)
        return self.call


def test_an_item_given_up_before_grpc_takes_it_is_not_sent() -> None:
    """The rule (the module's doc; the TypeScript client's giveUp): an item whose own deadline
    passes before gRPC has taken it to send leaves the stream unsent: it fails DEADLINE_EXCEEDED as
    a plain HistorydError (nothing to append again), and its place comes back at once. It was
    given up on as if sent (AppendStreamBrokenError, stream_ended False), held its place until an
    answer that could never come, and was sent after its deadline once gRPC took it."""
    from historyd import HistorydError

    stub = HeldStub()
    ap = Appender(FakeClient(stub), window=1, timeout=None)
    mine = ap.append(item("r0"), timeout=0.1)
    err = mine.exception(timeout=10)
    assert type(err) is HistorydError and err.code.name == "DEADLINE_EXCEEDED", repr(err)
    assert ap._slots.acquire(timeout=5), "its place did not come back"
    ap._slots.release()
    nxt = ap.append(item("r1"))
    call = stub.call
    call.go.set()
    call.answers.put(ok_answer(0, "one"))
    assert nxt.result(timeout=10).content["instruction"] == "one"
    call.answers.put(_DONE)
    ap.close()
    assert call.requests_ended.wait(timeout=10)
    assert [r.item.request_id for r in call.sent if r.HasField("item")] == ["r1"], "r0 was not sent"


def test_the_appenders_timeout_counts_from_when_grpc_takes_the_item() -> None:
    """The rule (the module's doc; the asyncio appender's and the TypeScript client's alike): the
    appender's timeout bounds an item's answer from when gRPC takes the item to send, not from its
    queueing: an item held back (flow control, here a call that takes nothing until told) is not
    cut for the wait. Counted from the queueing, the stream was cancelled at 0.2 s, the item
    failing AppendStreamBrokenError DEADLINE_EXCEEDED before it was sent."""
    from concurrent.futures import TimeoutError as FutureTimeout

    stub = HeldStub()
    ap = Appender(FakeClient(stub), window=2, timeout=0.2)
    fut = ap.append(item("r0"))
    with pytest.raises(FutureTimeout):
        fut.result(timeout=0.5)  # held, unsent: the appender's timeout has not begun
    call = stub.call
    call.go.set()
    call.answers.put(ok_answer(0, "zero"))
    assert fut.result(timeout=10).content["instruction"] == "zero"
    call.answers.put(_DONE)
    ap.close()
    assert not call.cancelled
