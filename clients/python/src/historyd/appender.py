"""The pipelined append stream (issue 21): :class:`Appender` sends AddMessage requests as the items
of one ``HistoryService.AppendMessages`` stream without waiting for each answer, so a client that
writes many messages is not bound by one round trip per message.

    with client.appender(window=64) as ap:
        futures = [ap.append_instruction(branch_id, f"step {i}") for i in range(1000)]
        messages = [f.result() for f in futures]

Each future is an :class:`AppendFuture`, a :class:`concurrent.futures.Future` whose ``request_id``
is the item's (filled in when the request had none). Answers come back in the order appended, and
items on one branch are applied in that order. A failed item fails alone: its future raises the
typed :class:`~historyd.errors.HistorydError` a unary AddMessage would have raised. A sent item
cannot be taken back: its future is running, and ``cancel()`` returns False. When the stream
breaks, the items in flight raise :class:`AppendStreamBrokenError` (with their ``request_id``, so
they can be appended again safely) and the next append opens a new stream.

Each item has a deadline. By default it is the appender's ``timeout`` (itself by default the
client's ``timeout``, 30 s; None: none), and it bounds the wait for the item's answer, from when
the item is sent on the stream (when gRPC takes it to send): the wait for a place in the window
is not counted, so a batch far larger than the window (appended from many threads, say) is written
however long its tail waits its turn. An item unanswered by then cancels the stream, as a gRPC
deadline cancels a call: it and the items after it in the stream, unanswered too, fail
:class:`AppendStreamBrokenError` with code ``DEADLINE_EXCEEDED``, and their places in the window
come back. So a server that accepts the stream and never answers holds no future and no place for
longer than the deadline.

``append(req, timeout=)`` gives an item a deadline of its own instead (None: none), counted from
the call to append, its wait for a place included: the appender's ``timeout`` does not bound that
item. An item whose own deadline passes before it is sent fails ``DEADLINE_EXCEEDED`` unsent. One
whose own deadline passes while it is on the stream, not yet taken by gRPC to send (its sending
held back by flow control), leaves the stream unsent, fails the same way and gives its place back
at once. Once taken, it is given up on alone:
:class:`AppendStreamBrokenError` with code ``DEADLINE_EXCEEDED`` and ``stream_ended`` False; the
stream and the other items go on, and its answer is dropped when it comes. The server may still
have written it: append it again with its ``request_id`` to have it applied once. It keeps its
place in the window until that answer comes (the server counts it in flight); if none comes
within the appender's ``timeout`` counted from the giving up, the server is taken for stalled and
the stream is cancelled, as above (with ``timeout`` None the place is held until the answer). The
TypeScript client's rule is the same. (An item's own deadline used to cancel the stream, failing
every item in flight with it; for a while after, the appender's ``timeout`` from the sending cut
items with longer deadlines of their own.)
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any, Deque, Dict, List, Optional

import grpc

from . import _requests as rq
from ._convert import Message
from .errors import HistorydError, from_item_status, from_rpc_error
from .v1 import history_service_pb2 as hs

__all__ = ["Appender", "AppendFuture", "AppendStreamBrokenError", "DEFAULT_APPEND_WINDOW"]

#: The default window: 64 items in flight, where the server's group commit has most of its gain.
DEFAULT_APPEND_WINDOW = 64

_END = object()
_DEFAULT: Any = object()
_INSTRUCTION_ARGS = ("context", "guidance", "handle_context", "plain_content", "tool_schemas", "response_format", "images", "image_detail")


class AppendFuture(Future):  # type: ignore[type-arg]
    """The future of an appended item's answer (:meth:`Appender.append`): a
    :class:`concurrent.futures.Future` of the message as written, with the item's ``request_id``,
    to append it again when its answer is lost."""

    def __init__(self, request_id: str) -> None:
        super().__init__()
        #: The item's request id (filled in by the appender when the request had none).
        self.request_id = request_id


class AppendStreamBrokenError(HistorydError):
    """The item's answer did not come: the stream ended before it, or (``stream_ended`` False,
    code ``DEADLINE_EXCEEDED``) the item's own deadline passed first and it was given up on alone,
    the stream going on. It may or may not have been applied: append it again with the same
    ``request_id`` to have it applied exactly once."""

    def __init__(self, request_id: str, cause: HistorydError, *, stream_ended: bool = True) -> None:
        what = "the append stream ended before item {} was answered" if stream_ended else "item {} was given up on before its answer"
        super().__init__(
            f"{what.format(request_id)} (append it again): {cause}",
            code=cause.code,
            reason=cause.reason,
            metadata=cause.metadata,
        )
        self.request_id = request_id
        self.cause = cause
        #: False when the item alone was given up on (its own deadline passed): the stream went on.
        self.stream_ended = stream_ended


class _Sent:
    """An item on a sync stream: its future and its deadlines (time.monotonic() seconds, or None):
    ``own``, the item's own, which gives it up alone, and ``bound``, which cancels the stream: the
    appender's timeout (``answer_timeout``) from when gRPC takes it, for an item without a deadline
    of its own, and from the giving up for an item given up on."""

    __slots__ = ("request_id", "fut", "own", "timeout", "answer_timeout", "bound", "given_up", "taken", "withdrawn")

    def __init__(self, request_id: str, fut: Future, own: Optional[float], timeout: Optional[float], answer_timeout: Optional[float]) -> None:
        self.request_id = request_id
        self.fut = fut
        self.own = own  # None once it passed and the item was given up on
        self.timeout = timeout  # the own deadline's timeout, for its error
        self.answer_timeout = answer_timeout  # the bound's, from when gRPC takes it
        self.bound: Optional[float] = None
        self.given_up = False  # its own deadline passed: it failed alone, its answer to be dropped
        self.taken = False  # gRPC took it to send
        self.withdrawn = False  # given up on before gRPC took it: it is not sent


class _Stream:
    """One AppendMessages call: its request queue, its futures in order, its reader thread, and
    the thread that settles the futures.

    The reader frees an item's window slot as soon as its answer comes, and hands the settling of
    its future to the settler thread. concurrent.futures runs a done-callback on the thread that
    settles the future, so a callback that appends (a chained pipeline) waits for a slot on the
    settler, while the reader goes on reading the answers that free slots. When the reader settled
    futures itself, such a callback blocked it for good whenever the window was full: no later
    future settled and close() hung (review of the clients, fault 1). The window still bounds the
    items sent and not yet answered; answered items waiting to be settled hold no slot, and at
    most a window of them wait (the reader waits for the settler beyond that).

    A third thread, the watchdog, watches the deadlines of the items in flight (see the module's
    doc): past an item's own deadline it hands the item's failure to the settler, the item
    staying in flight, bounded from then by ``timeout`` (the appender's; None: none), or, not yet
    taken by gRPC, withdrawn from the stream; past a bound it cancels the call, and the reader then
    breaks the stream with that deadline as its end. The last of the reader and the watchdog to
    end ends the settler, so that no settlement of either comes after the settler is gone."""

    def __init__(self, stub: Any, metadata: Any, window: int, slots: threading.Semaphore, timeout: Optional[float] = None) -> None:
        self.requests: "queue.Queue[Any]" = queue.Queue()
        # The items in flight, in the order sent.
        self.pending: Deque[_Sent] = deque()
        # (future, result, exception), then _END. Bounded by the window: a slow done-callback
        # holds the reader back once a window of answers waits to be settled, so the answers held
        # stay bounded; the slots of those answers are free, so a callback that appends gets one.
        self.settlements: "queue.Queue[Any]" = queue.Queue(maxsize=max(window, 1))
        self.lock = threading.Lock()
        # Wakes the watchdog: an item sent with a deadline earlier than the one it waits for, or
        # the stream broken.
        self.deadlines = threading.Condition(self.lock)
        self.due: Optional[float] = None  # the deadline the watchdog waits for
        # The end the watchdog gave the stream: the reader breaks it with this, not CANCELLED.
        self.expired: Optional[HistorydError] = None
        self.broken = False
        self.slots = slots
        self.timeout = timeout  # the appender's: how long a given-up item may hold its place
        self.running = 2  # the reader and the watchdog: the last to end ends the settler (_ended)
        # (request, its _Sent or None), then _END.
        self.requests.put((hs.AppendMessagesRequest(window=window), None))
        self.call = stub.AppendMessages(self._requests(), metadata=metadata)
        self.settler = threading.Thread(target=self._settle_all, name="historyd-appender-settler", daemon=True)
        self.reader = threading.Thread(target=self._read, name="historyd-appender", daemon=True)
        self.watchdog = threading.Thread(target=self._watch_deadlines, name="historyd-appender-deadlines", daemon=True)
        try:
            self.settler.start()
            self.reader.start()
        except BaseException:
            self.call.cancel()
            self.settlements.put(_END)
            raise
        try:
            self.watchdog.start()
        except BaseException:
            self._ended()  # the watchdog's share
            self.call.cancel()  # the reader breaks the stream, which ends the settler
            raise

    def _requests(self) -> Any:
        """The request iterator gRPC takes the items from, on a thread of its own: an item the
        watchdog withdrew is skipped, and one taken can no longer be withdrawn."""
        while True:
            r = self.requests.get()
            if r is _END:
                return
            req, sent = r
            if sent is not None:
                with self.lock:
                    if sent.withdrawn:
                        continue
                    sent.taken = True
                    if sent.answer_timeout is not None:  # the appender's timeout runs from now
                        sent.bound = time.monotonic() + sent.answer_timeout
                        if self.due is None or sent.bound < self.due:
                            self.deadlines.notify()
            yield req

    def send(
        self,
        req: hs.AddMessageRequest,
        fut: Future,
        answer_timeout: Optional[float] = None,
        *,
        own: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> bool:
        """Queues req, whose answer settles fut, a new future; False when the stream is broken.
        fut is running from here on: cancel() returns False, as the server may already have the
        item (cancel() returned True, and the item was applied all the same; review of the
        clients, fault 3). answer_timeout (seconds) is how long after gRPC takes req the stream
        is cancelled if req has no answer yet; own (time.monotonic() seconds) is when fut fails
        alone (``timeout`` is own's, for the error): req unsent if gRPC has not taken it, else
        its answer dropped when it comes and the stream cancelled if that has not come within
        the stream's ``timeout`` from then; None: never."""
        with self.lock:
            if self.broken:
                return False
            fut.set_running_or_notify_cancel()
            sent = _Sent(req.request_id, fut, own, timeout, answer_timeout)
            self.pending.append(sent)
            self.requests.put((hs.AppendMessagesRequest(item=req), sent))
            if own is not None and (self.due is None or own < self.due):
                self.deadlines.notify()  # only then: the usual item's deadline is after the head's
            return True

    def _watch_deadlines(self) -> None:
        try:
            self._watch()
        finally:
            self._ended()

    def _watch(self) -> None:
        """The watchdog thread: sleeps until the earliest deadline of the items in flight. An item
        unanswered at its own deadline fails alone, staying in flight (its slot is the answer's to
        free) with a bound of the stream's ``timeout`` from then, or, not yet taken by gRPC, leaves
        the stream unsent, its slot free; one unanswered at its bound cancels the call."""
        while True:
            given_up: List[_Sent] = []
            withdrawn: List[_Sent] = []
            with self.lock:
                while not self.broken and not given_up and not withdrawn:
                    now = time.monotonic()
                    late = next((p for p in self.pending if p.bound is not None and p.bound <= now), None)
                    if late is not None:
                        what = (
                            f"item {late.request_id}, given up, was not answered within {self.timeout} s of that (the appender's timeout)"
                            if late.given_up
                            else f"item {late.request_id} was not answered within {late.answer_timeout} s of its sending"
                        )
                        self.expired = HistorydError(f"{what}: the append stream was cancelled", code=grpc.StatusCode.DEADLINE_EXCEEDED)
                        # No item is sent on it any more: the next append opens a new stream at
                        # once, rather than queue its item on a call the reader has not yet seen end.
                        self.broken = True
                        break
                    for p in [p for p in self.pending if p.own is not None and p.own <= now]:
                        p.own = None
                        if not p.taken:  # gRPC skips it: it leaves the stream unsent
                            p.withdrawn = True
                            self.pending.remove(p)
                            withdrawn.append(p)
                            continue
                        # Its place is held until its answer, which the appender's timeout bounds
                        # from now: past it the server is taken for stalled.
                        p.given_up = True
                        p.bound = None if self.timeout is None else now + self.timeout
                        given_up.append(p)
                    if given_up or withdrawn:
                        break
                    self.due = min((d for p in self.pending for d in (p.own, p.bound) if d is not None), default=None)
                    # A wait longer than threading takes is cut short and taken again (the loop).
                    self.deadlines.wait(None if self.due is None else rq.bounded_wait(self.due - now))
                else:
                    return  # broken by the reader (given_up and withdrawn are empty: the loop ends on them)
            # Settled on the settler, in order with the answers, outside the lock: a done-callback
            # that appends takes it. Should the stream break meanwhile, _break fails the given-up
            # items too (they are still in flight) and the first settlement wins; the settler ends
            # only after the watchdog, so none of these is left unsettled.
            for p in withdrawn:
                self.slots.release()  # before its future settles, as an answer's
                self.settlements.put((p.fut, None, unsent_past_deadline(p.request_id, p.timeout, sent=True)))
            for p in given_up:
                self.settlements.put((p.fut, None, given_up_past_deadline(p.request_id, p.timeout)))
            if self.expired is not None:
                self.call.cancel()
                return

    def _read(self) -> None:
        # Any exit, not only an RpcError, breaks the stream: a reader that died silently would leave
        # its futures unsettled and its slots held, and every later append would hang (issue 21
        # review, finding C).
        err: HistorydError = HistorydError("the append stream's reader ended", code=grpc.StatusCode.INTERNAL)
        try:
            for resp in self.call:
                with self.lock:
                    sent = self.pending.popleft()  # IndexError on an answer to no item: broken
                request_id, fut = sent.request_id, sent.fut
                # The item is answered: its slot is free before its future settles (see the class).
                self.slots.release()
                try:
                    if resp.WhichOneof("result") == "error":
                        self.settlements.put((fut, None, from_item_status(resp.error)))
                    else:
                        self.settlements.put((fut, Message.from_proto(resp.response.message), None))
                except Exception as e:  # an answer that does not convert fails its item, and the stream
                    self.settlements.put((fut, None, AppendStreamBrokenError(request_id, _reader_error(e))))
                    raise
            err = HistorydError("the append stream ended with OK before every answer", code=grpc.StatusCode.UNAVAILABLE)
        except grpc.RpcError as e:
            err = from_rpc_error(e)
        except Exception as e:
            err = _reader_error(e)
            self.call.cancel()  # the server need not answer a reader that is gone
        finally:
            self._break(self.expired or err)

    def _break(self, err: HistorydError) -> None:
        """Marks the stream broken, ends its requests and fails the items in flight, releasing
        their slots (each before its future settles, as in _read); the settler ends once the
        watchdog has ended too."""
        with self.lock:
            self.broken = True
            left = list(self.pending)
            self.pending.clear()
            self.deadlines.notify()  # the watchdog ends
        self.requests.put(_END)
        for p in left:
            self.slots.release()
            self.settlements.put((p.fut, None, AppendStreamBrokenError(p.request_id, err)))
        self._ended()

    def _ended(self) -> None:
        """The reader or the watchdog ended: the last of them ends the settler, after every
        settlement either queued."""
        with self.lock:
            self.running -= 1
            last = self.running == 0
        if last:
            self.settlements.put(_END)

    def _settle_all(self) -> None:
        """The settler thread: settles the futures in the order answered (done-callbacks run here;
        concurrent.futures logs and drops what they raise)."""
        while True:
            s = self.settlements.get()
            if s is _END:
                return
            fut, result, exc = s
            _settle(fut, result=result, exc=exc)

    def close(self) -> None:
        """Ends the requests and waits for every answer, and for every future to be settled;
        from a done-callback, on the settler itself, it only ends the requests. The settler
        settles the answers the reader reads, so there it can wait for neither: the reader, with
        a window of answers waiting to be settled, waited for room in the settler's queue, and
        the three waited on each other for good."""
        self.requests.put(_END)  # the server answers what it has, then ends the stream
        if threading.current_thread() is self.settler:
            return  # the answers still to come are settled by this thread, after the callback
        self.reader.join()
        self.settler.join()


def _settle(fut: Future, result: Any = None, exc: Optional[BaseException] = None) -> None:
    """Settles fut, unless its caller cancelled it: set_result on a cancelled future raises
    InvalidStateError, which killed the thread settling it (issue 21 review, finding C). The check
    and the set race with a cancel, hence the except too."""
    if fut.cancelled():
        return
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except InvalidStateError:
        pass


def instruction_item(branch_id: str, instruction: Any, kwargs: Dict[str, Any]) -> hs.AddMessageRequest:
    """The AddMessageRequest of append_instruction (sync and asyncio): kwargs are its keyword
    arguments less ``timeout``."""
    kwargs = dict(kwargs)
    head = {k: kwargs.pop(k, None) for k in ("request_id", "expected_head_sequence", "sender", "recipient", "metadata")}
    req = rq.add_message(branch_id, include_rendered=kwargs.pop("include_rendered", False), **head)
    req.omit_content = bool(kwargs.pop("omit_content", False))
    body = {k: kwargs.pop(k, None) for k in _INSTRUCTION_ARGS}
    if kwargs:
        raise TypeError(f"append_instruction: unknown arguments {sorted(kwargs)}")
    req.instruction.CopyFrom(rq.instruction_input(instruction, **body))
    return req


def with_request_id(req: hs.AddMessageRequest) -> hs.AddMessageRequest:
    """req, or a copy of it with a fresh UUID as its request_id when it has none."""
    if req.request_id:
        return req
    cp = hs.AddMessageRequest()
    cp.CopyFrom(req)
    cp.request_id = str(uuid.uuid4())
    return cp


def unsent_past_deadline(request_id: str, timeout: Optional[float], *, sent: bool = False) -> HistorydError:
    """The error of an item whose deadline passed before it was sent: while it waited for a place
    in the window, or (``sent``) once on the stream, before gRPC took it to send."""
    where = "waited on the stream, not yet taken by gRPC," if sent else "waited for a place in the window"
    return HistorydError(
        f"item {request_id} {where} past its deadline ({timeout} s); it was not sent",
        code=grpc.StatusCode.DEADLINE_EXCEEDED,
    )


def given_up_past_deadline(request_id: str, timeout: Optional[float]) -> AppendStreamBrokenError:
    """The error of a sent item whose own deadline passed before its answer: it alone fails, the
    stream going on; the server may still write it."""
    return AppendStreamBrokenError(
        request_id,
        HistorydError(
            f"item {request_id} was not answered within its deadline ({timeout} s); the stream goes on and drops its answer, "
            "but the server may have written it",
            code=grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
        stream_ended=False,
    )


def _reader_error(e: BaseException) -> HistorydError:
    return HistorydError(f"the append stream's reader failed: {e!r}", code=grpc.StatusCode.INTERNAL)


class Appender:
    """Appends messages over one AppendMessages stream; see the module's doc. Thread-safe. Use as a
    context manager, or call :meth:`close`, which waits for the answers in flight.

    The futures' done-callbacks run on the appender's own settler thread, one at a time in the
    order answered; one may append (waiting for a slot if the window is full), but one that waits
    for a later future's result waits forever.

    ``timeout`` is how long each item may wait for its answer once sent, in seconds, before the
    stream is cancelled (see the module's doc): by default the client's ``timeout``; None: none.
    :meth:`append` takes a deadline of the item's own instead, from the call, which gives it up
    alone; ``timeout`` then bounds how long a given-up item holds its place."""

    def __init__(self, client: Any, window: int = DEFAULT_APPEND_WINDOW, timeout: Optional[float] = _DEFAULT) -> None:
        self._client = client
        self._window = max(1, window)
        self._timeout: Optional[float] = getattr(client, "timeout", None) if timeout is _DEFAULT else timeout
        rq.check_timeout("appender(timeout=)", self._timeout)
        self._slots = threading.Semaphore(self._window)
        self._lock = threading.Lock()
        self._stream: Optional[_Stream] = None
        self._closed = False

    def append(self, req: hs.AddMessageRequest, *, timeout: Optional[float] = _DEFAULT) -> AppendFuture:
        """Sends req as the next item (waiting while the window is full); its future gives the
        message as written, or raises the item's error. An empty ``request_id`` is filled in; the
        future's ``request_id`` is the item's.

        The item is on the stream once append returns, and its future is running: ``cancel()``
        returns False and cannot take the item back (the server applies it); wait for its answer.

        Without ``timeout``, the appender's bounds the wait for the answer, from the sending: past
        it the stream is cancelled. ``timeout`` (seconds; None: none) is the item's own deadline
        instead, from this call: when it passes before the item is sent (while append waits for
        a place in the window), append returns a future that raises ``DEADLINE_EXCEEDED`` and
        nothing is sent; when it passes before the answer, the item alone fails
        ``DEADLINE_EXCEEDED`` (:class:`AppendStreamBrokenError`, ``stream_ended`` False) and its
        answer is dropped: the server may still have written it, and its ``request_id`` appends it
        again safely. Its place is held until that answer, at most the appender's ``timeout``
        from then (see the module's doc)."""
        own = timeout is not _DEFAULT  # the item's own deadline counts from now
        if own:
            rq.check_timeout("append(timeout=)", timeout)
        deadline = time.monotonic() + timeout if own and timeout is not None else None
        req = with_request_id(req)
        fut = AppendFuture(req.request_id)
        rq.check_open(self._client)
        placed = self._slots.acquire(timeout=None if deadline is None else rq.bounded_wait(max(0.0, deadline - time.monotonic())))
        if not placed or (deadline is not None and time.monotonic() >= deadline):  # never sent past its deadline
            if placed:
                self._slots.release()
            fut.set_running_or_notify_cancel()
            fut.set_exception(unsent_past_deadline(req.request_id, timeout))
            return fut
        with self._lock:
            if self._closed:
                self._slots.release()
                raise RuntimeError("historyd: the appender is closed")
            try:
                rq.check_open(self._client)  # closed while the item waited for a place
            except HistorydError:
                self._slots.release()
                raise
            # The appender's timeout bounds the answer of an item without a deadline of its own,
            # from the sending (gRPC taking it): past it the stream is taken as stalled and
            # cancelled. An item's own deadline replaces it, and gives the item up alone.
            answer_timeout = None if own else self._timeout
            # A stream that broke since the check (its watchdog or its reader broke it) takes no
            # item: the item goes on a new stream, as the next append's would. Only a new stream
            # broken at once (its call failed) fails it, unsent.
            for _ in range(2):
                if self._stream is None or self._stream.broken:
                    try:
                        self._stream = rq.open_call(
                            self._client,  # closed on another thread since the check above: CANCELLED too
                            lambda: _Stream(self._client.history_stub, self._client._metadata, self._window, self._slots, self._timeout),
                        )
                    except BaseException:
                        # Nothing was sent: give the slot back, or `window` such failures (a closed
                        # channel) left every later append waiting (review of the clients, fault 4).
                        self._slots.release()
                        raise
                if self._stream.send(req, fut, answer_timeout, own=deadline, timeout=timeout):
                    return fut
            self._slots.release()
            fut.set_exception(
                AppendStreamBrokenError(req.request_id, HistorydError("the append stream ended", code=grpc.StatusCode.UNAVAILABLE))
            )
        return fut

    def append_instruction(self, branch_id: str, instruction: Any, **kwargs: Any) -> AppendFuture:
        """Appends an Instruction (the keyword arguments of Branch.add_instruction's input:
        context, guidance, ...; and request_id, expected_head_sequence, and append's
        ``timeout``). ``omit_content=True`` asks for an acknowledgement: the future's message
        has no content (``kind`` None, ``content`` empty); the message is written whole."""
        timeout = kwargs.pop("timeout", _DEFAULT)
        return self.append(instruction_item(branch_id, instruction, kwargs), timeout=timeout)

    def close(self) -> None:
        """Stops taking items and waits for the answers of the ones in flight: at most until their
        deadlines, which cancel the stream, or for a given-up item the appender's ``timeout`` from
        the giving up (without them, as long as the server takes). From a
        future's done-callback it stops taking items and returns: the answers still to come are
        settled on the thread that runs the callback, once it returns."""
        with self._lock:
            self._closed = True
            s = self._stream
        if s is not None:
            s.close()

    def __enter__(self) -> "Appender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
