"""The pipelined append stream for asyncio: :class:`AsyncAppender`, the asyncio form of
:class:`~historyd.appender.Appender` (issue 21), over ``grpc.aio``.

    async with aclient.appender(window=64) as ap:
        futures = [await ap.append_instruction(branch_id, f"step {i}") for i in range(1000)]
        messages = await asyncio.gather(*futures)

``await ap.append(req)`` waits for a place in the window, sends the item, and returns an
:class:`AppendFuture` (an :class:`asyncio.Future`) of its answer: the message as written, or the
item's typed :class:`~historyd.errors.HistorydError`; its ``request_id`` is the item's. Answers
come in the order appended; items on one branch are applied in that order; a failed item fails
alone. When the stream breaks, the items in flight raise
:class:`~historyd.appender.AppendStreamBrokenError` (with their ``request_id``, filled in when
empty, so they can be appended again safely) and the next append opens a new stream.

Bounds, as the sync Appender's. Each item has a deadline: by default the appender's ``timeout``
(itself by default the client's ``timeout``; None: none), which bounds the wait for the item's
answer from when the item is sent on the stream (when grpc takes it to send, so not while the
caller keeps the loop): the wait for a place in the window is not counted, so a batch far larger
than the window appended at once (``asyncio.gather`` of the appends) is written however long its
tail waits its turn. Past it before the answer, the stream is cancelled, as a gRPC deadline
cancels a call: the item and the items after it (answers come in order: they are unanswered too)
raise AppendStreamBrokenError with code ``DEADLINE_EXCEEDED``, and their places come back.

``append(req, timeout=)`` gives an item a deadline of its own instead (None: none), counted from
the call to ``append``, its wait for a place included: the appender's ``timeout`` does not bound
that item. An item whose own deadline passes before it is sent is not sent: ``append`` returns a
future that raises ``DEADLINE_EXCEEDED``. One whose own deadline passes while it is on the stream
is given up on alone, AppendStreamBrokenError with code ``DEADLINE_EXCEEDED`` and ``stream_ended``
False, as if its future were cancelled (below).

Cancellation is asyncio's: cancelling the task in ``append`` while it waits for a place sends
nothing. Cancelling a sent item's future (or ``asyncio.wait_for`` on it timing out, or a task
awaiting it cancelled) gives up on that item alone. (The cancel used to cancel the stream, failing
every other item in flight ``CANCELLED``; review of the clients 2, fault 5.)

A given-up item (its own deadline passed, or its future cancelled) that grpc has not yet taken to
send (the caller still keeps the loop, or flow control holds the sending back) leaves the stream
unsent, and its place comes back at once; its own deadline fails it ``DEADLINE_EXCEEDED`` as a
plain HistorydError. Once taken, the stream and the other items go on, and its answer is dropped
when it comes. The item may have been applied: append it
again with the future's ``request_id`` to have it applied exactly once. It keeps its place in the
window until that answer comes (the server counts it in flight); if none comes within the
appender's ``timeout`` counted from the giving up, the server is taken for stalled and the stream
is cancelled, as above (with ``timeout`` None the place is held until the answer). So a server
that accepts the stream and never answers holds no future and no place past these bounds. The
TypeScript client's rule is the same.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Deque, Optional, Set

import grpc

from . import _requests as rq
from ._convert import Message
from .appender import (
    DEFAULT_APPEND_WINDOW,
    AppendStreamBrokenError,
    given_up_past_deadline,
    instruction_item,
    unsent_past_deadline,
    with_request_id,
)
from .errors import HistorydError, from_item_status, from_rpc_error
from .v1 import history_service_pb2 as hs

__all__ = ["AsyncAppender", "AppendFuture"]

_END = object()
_DEFAULT: Any = object()


class AppendFuture(asyncio.Future):  # type: ignore[type-arg]
    """The future of an appended item's answer (:meth:`AsyncAppender.append`): an
    :class:`asyncio.Future` of the message as written, with the item's ``request_id``, to append it
    again after giving up on this future."""

    def __init__(self, request_id: str, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        #: The item's request id (filled in by the appender when the request had none).
        self.request_id = request_id
        self._on_cancel: Optional[Callable[[], None]] = None  # gives the sent item up (the appender's)

    def cancel(self, *args: Any, **kwargs: Any) -> bool:
        """Cancels the future as asyncio's does, and gives the sent item up at once (see the
        module's doc)."""
        if not super().cancel(*args, **kwargs):
            return False
        on_cancel, self._on_cancel = self._on_cancel, None
        if on_cancel is not None:
            on_cancel()
        return True


class _Item:
    """An item on a stream: its request, its future, and the timers of its deadlines: ``timer``
    the one that cancels the stream (the appender's timeout from the sending, or from the giving
    up), ``own_timer`` the item's own (it gives the item up alone)."""

    __slots__ = ("request_id", "fut", "timer", "own_timer", "answered", "given_up", "taken", "withdrawn")

    def __init__(self, request_id: str, fut: "asyncio.Future[Message]") -> None:
        self.request_id = request_id
        self.fut = fut
        self.timer: Optional[asyncio.TimerHandle] = None
        self.own_timer: Optional[asyncio.TimerHandle] = None
        self.answered = False  # answered, or failed with the stream: no longer in flight
        self.given_up = False  # its own deadline passed or its future was cancelled: its answer is dropped
        self.taken = False  # grpc took it to send
        self.withdrawn = False  # given up on before grpc took it: it is not sent

    def settle(self, result: Any = None, exc: Optional[BaseException] = None) -> None:
        self.answered = True
        if isinstance(self.fut, AppendFuture):
            self.fut._on_cancel = None  # no longer in flight: nothing to give up
        for t in (self.timer, self.own_timer):
            if t is not None:
                t.cancel()
        if self.fut.done():  # its caller cancelled it, or its own deadline failed it: the answer is dropped
            return
        if exc is not None:
            self.fut.set_exception(exc)
        else:
            self.fut.set_result(result)


class _Stream:
    """One AppendMessages call: its request queue, its items in the order sent, and the task that
    reads the answers and settles them."""

    def __init__(self, stub: Any, metadata: Any, window: int, release: Any, streams: Optional[Set[Any]] = None) -> None:
        self.requests: "asyncio.Queue[Any]" = asyncio.Queue()
        self.pending: Deque[_Item] = deque()
        self.broken = False
        self.cancelled: Optional[HistorydError] = None  # why cancel() ended it: its items' error
        self._release = release
        # (request, its _Item or None, taken: called when grpc takes it to send, or None), then _END.
        self.requests.put_nowait((hs.AppendMessagesRequest(window=window), None, None))
        self.call = stub.AppendMessages(self._requests(), metadata=metadata)
        # The client's open streams, which its close() cancels (AsyncClient.close).
        self._streams = streams if streams is not None else set()
        self._streams.add(self.call)
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _requests(self) -> Any:
        while True:
            r = await self.requests.get()
            if r is _END:
                return
            req, item, taken = r
            if item is not None:
                if item.withdrawn:
                    continue  # given up on before grpc took it: not sent
                item.taken = True
            if taken is not None:
                taken()
            yield req

    def send(self, req: hs.AddMessageRequest, item: _Item, taken: Optional[Callable[[], None]] = None) -> bool:
        """Queues req, whose answer settles item; ``taken`` is called when grpc takes it to send
        (not while the caller keeps the loop, appending a batch). False when the stream is broken."""
        if self.broken:
            return False
        self.pending.append(item)
        self.requests.put_nowait((hs.AppendMessagesRequest(item=req), item, taken))
        return True

    def cancel(self, err: HistorydError) -> None:
        """Cancels the call, unless the stream is over: its items in flight fail with err."""
        if self.broken:
            return
        self.broken = True  # no item is sent on it any more: the next append opens a new stream
        self.cancelled = err
        self.call.cancel()

    async def _read(self) -> None:
        # Any exit breaks the stream: a reader that died silently would leave its futures
        # unsettled and its places taken, and every later append would wait forever.
        err = HistorydError("the append stream's reader ended", code=grpc.StatusCode.INTERNAL)
        try:
            async for resp in self.call:
                item = self.pending.popleft()  # IndexError on an answer to no item: broken
                self._release()
                try:
                    if resp.WhichOneof("result") == "error":
                        item.settle(exc=from_item_status(resp.error))
                    else:
                        item.settle(result=Message.from_proto(resp.response.message))
                except Exception as e:  # an answer that does not convert fails its item, and the stream
                    item.settle(exc=AppendStreamBrokenError(item.request_id, _reader_error(e)))
                    raise
            err = HistorydError("the append stream ended with OK before every answer", code=grpc.StatusCode.UNAVAILABLE)
        except grpc.RpcError as e:
            err = from_rpc_error(e)
        except asyncio.CancelledError:  # grpc.aio's end of a call cancelled here, or the task's
            err = HistorydError("the append stream was cancelled", code=grpc.StatusCode.CANCELLED)
        except Exception as e:
            err = _reader_error(e)
            self.call.cancel()
        finally:
            self._streams.discard(self.call)
            self._break(self.cancelled or err)

    def _break(self, err: HistorydError) -> None:
        self.broken = True
        self.requests.put_nowait(_END)
        left, self.pending = list(self.pending), deque()
        for item in left:
            self._release()
            item.settle(exc=AppendStreamBrokenError(item.request_id, err))

    async def close(self) -> None:
        """Ends the requests and waits for every answer."""
        self.requests.put_nowait(_END)  # the server answers what it has, then ends the stream
        await asyncio.shield(self.reader)


def _reader_error(e: BaseException) -> HistorydError:
    return HistorydError(f"the append stream's reader failed: {e!r}", code=grpc.StatusCode.INTERNAL)


class AsyncAppender:
    """Appends messages over one AppendMessages stream, for asyncio; see the module's doc. Use as
    an async context manager, or await :meth:`close`, which waits for the answers in flight.

    ``timeout`` is how long each item may wait for its answer once sent, in seconds, before the
    stream is cancelled: by default the client's ``timeout``; None: none. :meth:`append` takes a
    deadline of the item's own instead, from the call, which gives it up alone; ``timeout`` then
    bounds how long a given-up item holds its place (see the module's doc)."""

    def __init__(self, client: Any, window: int = DEFAULT_APPEND_WINDOW, timeout: Optional[float] = _DEFAULT) -> None:
        self._client = client
        self._window = max(1, window)
        self._timeout: Optional[float] = getattr(client, "timeout", None) if timeout is _DEFAULT else timeout
        rq.check_timeout("appender(timeout=)", self._timeout)
        self._in_flight = 0
        self._waiters: "Deque[asyncio.Future[None]]" = deque()  # appends waiting for a place, in order
        self._stream: Optional[_Stream] = None
        self._closed = False

    async def append(self, req: hs.AddMessageRequest, *, timeout: Optional[float] = _DEFAULT) -> AppendFuture:
        """Waits for a place in the window, sends req as the next item, and returns the future of
        its answer: the message as written, or the item's error. An empty ``request_id`` is filled
        in; the future's ``request_id`` is the item's. Cancelling the future gives up on the item
        alone. Without ``timeout``, the appender's bounds the wait for the answer once the item is
        sent (past it the stream is cancelled); ``timeout`` here is the item's own deadline
        instead, from this call, its wait for a place included, past which the item alone fails
        ``DEADLINE_EXCEEDED``. A given-up item holds its place until its answer, at most the
        appender's ``timeout`` from the giving up (see the module's doc). Raises HistorydError
        CANCELLED when the client is closed, before or while the item waits for a place (nothing
        is sent)."""
        loop = asyncio.get_running_loop()
        own = timeout is not _DEFAULT  # the item's own deadline counts from now
        if own:
            rq.check_timeout("append(timeout=)", timeout)
        deadline = loop.time() + timeout if own and timeout is not None else None
        req = with_request_id(req)
        fut = AppendFuture(req.request_id, loop=loop)
        self._check_client()
        placed = await self._place(deadline)
        if not placed or (deadline is not None and loop.time() >= deadline):  # never sent past its deadline
            if placed and self._in_flight < self._window:
                self._wake_next()  # woken for a place and not taking it: the next waiter may
            fut.set_exception(unsent_past_deadline(req.request_id, timeout))
            return fut
        if self._closed:
            raise RuntimeError("historyd: the appender is closed")
        try:
            self._check_client()  # closed while the item waited for a place
        except HistorydError:
            self._wake_next()  # woken for a place and not taking it: the next waiter ends too
            raise
        self._in_flight += 1
        if self._stream is None or self._stream.broken:
            try:
                self._stream = _Stream(
                    self._client.history_stub, self._client._metadata, self._window, self._release, getattr(self._client, "_streams", None)
                )
            except BaseException:
                self._release()  # nothing was sent: give the place back
                raise
        stream, item = self._stream, _Item(req.request_id, fut)
        # The appender's timeout bounds the answer of an item without a deadline of its own, from
        # the sending: past it the stream is taken as stalled and cancelled. An item's own
        # deadline replaces it, and gives the item up alone.
        answer_timeout = None if own else self._timeout

        def taken() -> None:  # grpc took the item to send: the appender's timeout runs from now
            if answer_timeout is not None and not item.answered and not item.given_up:
                what = f"item {item.request_id} was not answered within {answer_timeout} s of its sending"
                item.timer = loop.call_later(answer_timeout, self._expire, stream, item, what)

        if not stream.send(req, item, taken):  # unreachable: a stream is broken only by the loop's callbacks
            self._release()
            fut.set_exception(AppendStreamBrokenError(req.request_id, HistorydError("the append stream ended", code=grpc.StatusCode.UNAVAILABLE)))
            return fut
        if deadline is not None:
            item.own_timer = loop.call_at(deadline, self._expire_alone, stream, item, timeout)
        fut._on_cancel = lambda: self._give_up_item(stream, item, None)
        return fut

    async def append_instruction(self, branch_id: str, instruction: Any, **kwargs: Any) -> AppendFuture:
        """Appends an Instruction: the arguments of the sync Appender's append_instruction."""
        timeout = kwargs.pop("timeout", _DEFAULT)
        return await self.append(instruction_item(branch_id, instruction, kwargs), timeout=timeout)

    async def _place(self, deadline: Optional[float]) -> bool:
        """Waits while the window is full and the appender open; False when the deadline passed
        first (no place taken). A release wakes the first waiter; one that then finds the place
        taken (by an append that came meanwhile) waits again."""
        loop = asyncio.get_running_loop()
        while not self._closed and self._in_flight >= self._window:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            w: "asyncio.Future[None]" = loop.create_future()
            self._waiters.append(w)
            try:
                done, _ = await asyncio.wait([w], timeout=left)
            except asyncio.CancelledError:
                self._give_up(w)
                raise
            if not done:
                self._give_up(w)
                return False
        return True

    def _check_client(self) -> None:
        """Raises HistorydError CANCELLED once the client is closed (AsyncClient.close): a stream
        opened then raised grpc's UsageError ('Channel is closed.')."""
        rq.check_open(self._client)

    def _give_up(self, w: "asyncio.Future[None]") -> None:
        """An append stops waiting for a place: its waiter leaves the queue or, when a release
        woke it already, passes the wake on (a release wakes only one)."""
        if w.done():
            self._wake_next()
        else:
            w.cancel()
            self._waiters.remove(w)

    def _wake_next(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _release(self) -> None:
        self._in_flight -= 1
        self._wake_next()

    def _expire_alone(self, stream: _Stream, item: _Item, timeout: Optional[float]) -> None:
        """The item's own deadline passed: it is given up on, failing alone."""
        self._give_up_item(stream, item, given_up_past_deadline(item.request_id, timeout), timeout)

    def _give_up_item(self, stream: _Stream, item: _Item, exc: Optional[BaseException], timeout: Optional[float] = None) -> None:
        """Gives up on a sent item alone, unless it is answered: its own deadline passed (exc, its
        error; timeout, that deadline's) or its future was cancelled (exc None). Not yet taken by
        grpc, it leaves the stream unsent and its place comes back. Else it stays in flight, its
        place the answer's to free; the appender's timeout from now, replacing any bound it had,
        cancels the stream if that answer has not come by then."""
        if item.answered or item.given_up:
            return
        item.given_up = True
        for t in (item.timer, item.own_timer):
            if t is not None:
                t.cancel()
        item.timer = item.own_timer = None
        if not item.taken:
            item.withdrawn, item.answered = True, True
            stream.pending.remove(item)
            self._release()
            if exc is not None and not item.fut.done():
                item.fut.set_exception(unsent_past_deadline(item.request_id, timeout, sent=True))
            return
        if exc is not None and not item.fut.done():
            item.fut.set_exception(exc)
        loop = item.fut.get_loop()  # cancel() may come from outside a running loop
        if self._timeout is not None and not loop.is_closed():
            what = f"item {item.request_id}, given up, was not answered within {self._timeout} s of that (the appender's timeout)"
            item.timer = loop.call_later(self._timeout, self._expire, stream, item, what)

    def _expire(self, stream: _Stream, item: _Item, what: str) -> None:
        if not item.answered:
            stream.cancel(HistorydError(f"{what}: the append stream was cancelled", code=grpc.StatusCode.DEADLINE_EXCEEDED))

    async def close(self) -> None:
        """Stops taking items and waits for the answers of the ones in flight: at most until their
        deadlines, which cancel the stream, or for a given-up item the appender's ``timeout`` from
        the giving up (without them, as long as the server takes)."""
        self._closed = True
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()
        if self._stream is not None:
            await self._stream.close()

    async def __aenter__(self) -> "AsyncAppender":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
