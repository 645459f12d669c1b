"""The asyncio appender (historyd.aio.AsyncAppender): against the real binary, answers in the order
appended and a failed item failing alone, as the sync Appender's test; against the stalled fake
server of test_append_deadline, its bounds: an item's deadline, a task cancelled while it waits
for a place, and a sent item's future cancelled, each ending without a leaked place."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import grpc
import pytest

from historyd import AppendStreamBrokenError, BranchNotFoundError, HistorydError
from historyd.aio import AsyncClient
from test_append_deadline import LIMIT, GatedServer, StalledServer, gated, item_alone_expired, stalled  # noqa: F401 (the fixtures)


async def ended(stalled: StalledServer, n: int) -> None:
    """Waits (off the loop) until the fake has seen n streams end."""
    assert await asyncio.get_running_loop().run_in_executor(None, stalled.wait_ended, n), f"{n} streams ended"


async def read(stalled: StalledServer, n: int) -> None:
    """Waits (off the loop) until the fake has read n items, the windows counted."""
    assert await asyncio.get_running_loop().run_in_executor(None, stalled.wait_items, n), f"{n} items read"


async def taken(ap: Any, fut: Any) -> None:
    """Waits until grpc has taken the item of fut to send: an item given up on before that is not
    sent at all (the module's doc), and these tests give up on items that were."""

    async def poll() -> None:
        item = next(i for i in ap._stream.pending if i.fut is fut)
        while not item.taken:
            await asyncio.sleep(0)

    await asyncio.wait_for(poll(), LIMIT)


@pytest.mark.asyncio
async def test_async_appender_order_and_failures(server) -> None:
    async with AsyncClient(server.addr, tls=False) as client:
        a = await client.create_branch()
        b = await client.create_branch()
        missing = str(uuid.uuid4())
        async with client.appender(window=8) as ap:
            futures = []
            for i in range(100):
                branch = missing if i == 50 else (b.id if i % 3 == 0 else a.id)
                futures.append((branch, await ap.append_instruction(branch, f"m{i}")))
            seqs = {a.id: 1, b.id: 1}
            for i, (branch, fut) in enumerate(futures):
                if branch == missing:
                    with pytest.raises(BranchNotFoundError):
                        await asyncio.wait_for(fut, LIMIT)
                    continue
                msg = await asyncio.wait_for(fut, LIMIT)
                seqs[branch] += 1
                assert msg.sequence == seqs[branch], f"item {i}: items on a branch apply in the order appended"
        texts = [m.content["instruction"] async for m in a.messages()]
        assert texts == [f"m{i}" for i in range(100) if i != 50 and i % 3 != 0]
        with pytest.raises(RuntimeError):
            await ap.append_instruction(a.id, "late")


@pytest.mark.asyncio
async def test_async_appender_deadline_against_a_stalled_server(stalled: StalledServer) -> None:  # noqa: F811
    async with AsyncClient(stalled.addr, tls=False, timeout=0.3) as client:
        t0 = time.monotonic()
        ap = client.appender(window=2)
        first = [await ap.append_instruction("b", f"m{i}") for i in range(2)]
        for f in first:
            with pytest.raises(AppendStreamBrokenError) as ei:
                await asyncio.wait_for(f, LIMIT)
            assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED, str(ei.value)
            assert ei.value.request_id
        await ended(stalled, 1)  # the stream was cancelled
        # The window is free again: an append waiting for a place past its own deadline fails
        # unsent; the next gets a place on a new stream.
        held = await asyncio.wait_for(ap.append_instruction("b", "held", timeout=1.0), LIMIT)
        held2 = await asyncio.wait_for(ap.append_instruction("b", "held 2", timeout=1.0), LIMIT)
        waited = await asyncio.wait_for(ap.append_instruction("b", "waited", timeout=0.1), LIMIT)
        with pytest.raises(HistorydError) as ei:
            await waited
        assert not isinstance(ei.value, AppendStreamBrokenError), "it was never sent"
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        for f in (held, held2):
            with pytest.raises(AppendStreamBrokenError):
                await asyncio.wait_for(f, LIMIT)
        await asyncio.wait_for(ap.close(), LIMIT)
        await ended(stalled, 1)
        assert stalled.opened == 2
        assert len(stalled.items) == 6, "two streams: the window and two items each; the waiting item not sent"
        assert time.monotonic() - t0 < LIMIT


@pytest.mark.asyncio
async def test_async_appender_cancellation(stalled: StalledServer) -> None:  # noqa: F811
    """Cancelling a task that waits for a place sends nothing and takes no place. Cancelling a
    sent item's future gives up on that item alone: the stream goes on, and a stall is still its
    deadline's to end (here the items after it fail at theirs, DEADLINE_EXCEEDED). The cancel used
    to cancel the stream: the items after it failed at once, CANCELLED (review of the clients 2,
    fault 5)."""
    async with AsyncClient(stalled.addr, tls=False, timeout=0.3) as client:
        ap = client.appender(window=2)
        mine = await ap.append_instruction("b", "mine")
        after = await ap.append_instruction("b", "after")
        waiting = asyncio.ensure_future(ap.append_instruction("b", "waiting"))
        await asyncio.sleep(0)  # it starts, finds the window full, and waits
        assert len(ap._waiters) == 1 and not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await read(stalled, 3)  # the window, mine and after: sent
        assert mine.cancel()  # gives up on it, as asyncio.wait_for does when it times out
        with pytest.raises(AppendStreamBrokenError) as ei:
            await asyncio.wait_for(after, LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED, f"the stream was not cancelled for the cancel: {ei.value!r}"
        assert mine.request_id, "the caller knows which item it gave up on"
        await ended(stalled, 1)
        # both places came back: two more items are sent at once, on a new stream
        again = [await asyncio.wait_for(ap.append_instruction("b", f"again {i}", timeout=0.1), LIMIT) for i in range(2)]
        for f in again:
            with pytest.raises(AppendStreamBrokenError):
                await asyncio.wait_for(f, LIMIT)
        await asyncio.wait_for(ap.close(), LIMIT)
        await ended(stalled, 1)
        assert stalled.opened == 2 and len(stalled.items) == 6, "the window and two items a stream: the cancelled waiting item never sent"


@pytest.mark.asyncio
async def test_async_appender_a_cancelled_future_leaves_the_stream(server) -> None:
    """A consumer that gives up on one item (cancels its future, as asyncio.wait_for timing out
    does) loses that item's answer alone: the other items in flight are written, and the item's
    request_id, on its future, appends it again exactly once. The cancel used to cancel the
    stream: the other 63 failed CANCELLED, and the caller could not tell the cancelled item,
    applied, from one never sent (review of the clients 2, fault 5)."""
    async with AsyncClient(server.addr, tls=False) as client:
        b = await client.create_branch()
        async with client.appender(window=64) as ap:
            futures = [await ap.append_instruction(b.id, f"m{i}") for i in range(64)]
            await taken(ap, futures[0])  # sent: cancelled before, it would not be
            assert futures[0].cancel()
            written = await asyncio.wait_for(asyncio.gather(*futures[1:]), LIMIT)
            assert [m.content["instruction"] for m in written] == [f"m{i}" for i in range(1, 64)]
            m0 = await asyncio.wait_for(await ap.append_instruction(b.id, "m0", request_id=futures[0].request_id), LIMIT)
        assert m0.sequence == 2, "item 0 was applied, once"
        assert [m.content["instruction"] async for m in b.messages()] == [f"m{i}" for i in range(64)]


# The rule (aio_appender.py; README "Many writes"): by default an item's deadline, the client's
# timeout, bounds the wait for its answer from when the item is sent, not its wait for a place in
# the window. It counted from the call to append(): a batch appended at once (asyncio.gather of the
# appends) counted the queue against each item, the first to run out cancelled the stream, and
# every item in flight failed AppendStreamBrokenError, some of them applied (review of the clients
# 2, fault 1). 6000 items take longer than the 1 s timeout here, each answer far less.
@pytest.mark.asyncio
async def test_async_appender_batch_longer_than_the_timeout_is_all_written(server) -> None:
    n = 6000
    async with AsyncClient(server.addr, tls=False, timeout=1.0) as client:
        b = await client.create_branch()
        t0 = time.monotonic()
        async with client.appender(window=64) as ap:
            futures = await asyncio.gather(*(ap.append_instruction(b.id, f"m{i}") for i in range(n)))
            results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert not failed, f"{len(failed)} of {n} failed in {time.monotonic() - t0:.1f} s, the first: {failed[0]!r}"
        assert (await b.refresh()).head_sequence == n + 1


@pytest.mark.asyncio
async def test_async_appender_never_sends_an_item_past_its_own_deadline(stalled: StalledServer) -> None:  # noqa: F811
    """An item whose own deadline passed before it is sent (timeout=0, with a place free) fails
    DEADLINE_EXCEEDED unsent, and the stream, with an item in flight, goes on. It was sent, and its
    timer then cancelled the stream: every item in flight broke."""
    client = AsyncClient(stalled.addr, tls=False, timeout=None)
    ap = client.appender(window=4)
    held = await ap.append_instruction("b", "held")
    late = await ap.append_instruction("b", "late", timeout=0)
    with pytest.raises(HistorydError) as ei:
        await asyncio.wait_for(late, LIMIT)
    assert not isinstance(ei.value, AppendStreamBrokenError), f"it was not sent: {ei.value!r}"
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.sleep(0)  # a timer due now would run here
    assert not held.done(), "the stream goes on"
    await client.close()
    with pytest.raises(AppendStreamBrokenError) as ei:
        await asyncio.wait_for(held, LIMIT)
    assert ei.value.code == grpc.StatusCode.CANCELLED, "the close, not the late item's deadline, ended the stream"
    await asyncio.wait_for(ap.close(), LIMIT)


@pytest.mark.asyncio
async def test_async_close_ends_the_appends_waiting_for_a_place(stalled: StalledServer) -> None:  # noqa: F811
    """AsyncClient.close() while appends wait for a place in the window: each raises HistorydError
    CANCELLED, unsent. They were woken as the item before them failed and called AppendMessages on
    the closed channel: grpc's UsageError('Channel is closed.') (review of the clients 2, fault 4)."""
    c = AsyncClient(stalled.addr, tls=False, timeout=None)
    ap = c.appender(window=1)
    in_flight = await ap.append_instruction("b", "in flight")  # never answered
    waiting = [asyncio.ensure_future(ap.append_instruction("b", f"waiting {i}")) for i in range(3)]
    await asyncio.sleep(0)  # they start, find the window full, and wait
    assert len(ap._waiters) == 3
    await asyncio.wait_for(c.close(), LIMIT)
    for i, t in enumerate(waiting):
        with pytest.raises(HistorydError) as ei:
            await asyncio.wait_for(t, LIMIT)
        assert ei.value.code == grpc.StatusCode.CANCELLED, f"waiting {i}: {ei.value!r}"
    with pytest.raises(AppendStreamBrokenError) as ei:
        await asyncio.wait_for(in_flight, LIMIT)
    assert ei.value.code == grpc.StatusCode.CANCELLED
    with pytest.raises(HistorydError) as ei:
        await ap.append_instruction("b", "after close()")
    assert ei.value.code == grpc.StatusCode.CANCELLED
    await asyncio.wait_for(ap.close(), LIMIT)
    assert stalled.opened <= 1, "no stream after close()"


@pytest.mark.asyncio
async def test_async_appender_deadline_starts_when_grpc_takes_the_item(server) -> None:
    """The appender's timeout bounds the wait for an answer from when grpc takes the item to send.
    Counted from the append, it ran while the caller kept the loop (a gather of a big batch runs
    every append's first step in one go), when nothing could be sent or read: the first window of
    a big batch ran out before its answers could be read (the review's p4.py with 50,000 items and
    a 1 s timeout: 64 broken)."""
    async with AsyncClient(server.addr, tls=False, timeout=0.5) as client:
        b = await client.create_branch()
        async with client.appender(window=4) as ap:
            first = await ap.append_instruction(b.id, "first")
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.7:  # the rest of a long batch keeps the loop
                pass
            assert (await asyncio.wait_for(first, LIMIT)).sequence == 2


@pytest.mark.asyncio
async def test_async_appender_an_items_own_deadline_fails_that_item_alone(gated: GatedServer) -> None:  # noqa: F811
    """As test_append_deadline's sync test: an item's own deadline passing while it is on the
    stream fails it alone, DEADLINE_EXCEEDED with its request_id; the stream and the other items
    go on, and its answer is dropped. Its timer cancelled the stream: every item in flight
    failed."""
    async with AsyncClient(gated.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=4)
        mine = await ap.append_instruction("b", "mine", timeout=0.2)
        other = await ap.append_instruction("b", "other")
        with pytest.raises(Exception) as ei:
            await asyncio.wait_for(asyncio.shield(mine), LIMIT)
        assert item_alone_expired(ei.value, mine.request_id), repr(ei.value)
        await asyncio.sleep(0)  # what the expiry set off runs here
        assert not other.done(), f"the other item in flight went with it: {other.exception()!r}"
        gated.gate.set()  # the server answers: mine's answer is dropped, other's settles it
        assert (await asyncio.wait_for(other, LIMIT)).sequence == 3
        assert (await asyncio.wait_for(await ap.append_instruction("b", "next"), LIMIT)).sequence == 4
        assert mine.exception() is ei.value, "the late answer is dropped"
        await asyncio.wait_for(ap.close(), LIMIT)
        assert gated.opened == 1, "one stream throughout"


@pytest.mark.asyncio
@pytest.mark.parametrize("long", [1e10, float("inf")])
async def test_async_appender_very_long_deadlines(stalled: StalledServer, long: float) -> None:  # noqa: F811
    """As test_append_deadline's sync test: items with long deadlines of their own are not cut by
    a shorter appender's ``timeout`` (ddc850b cut them at the appender's 0.2 s), and an append
    with a long deadline waits for a place in the full window, until close()."""
    client = AsyncClient(stalled.addr, tls=False, timeout=None)
    ap = client.appender(window=2, timeout=0.2)
    a = await ap.append_instruction("b", "a", timeout=long)
    b = await ap.append_instruction("b", "b", timeout=long)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(a), 0.8)  # four times the appender's timeout
    assert not b.done()
    assert stalled.opened == 1 and not stalled.ended.acquire(timeout=0), "the stream goes on"
    waited = asyncio.ensure_future(ap.append_instruction("b", "c", timeout=long))
    done, _ = await asyncio.wait([waited], timeout=0.2)
    assert not done, "a full window: it waits for a place"
    await asyncio.wait_for(client.close(), LIMIT)
    for f in (a, b):
        with pytest.raises(AppendStreamBrokenError) as ei:
            await asyncio.wait_for(f, LIMIT)
        assert ei.value.code == grpc.StatusCode.CANCELLED, "the close, not a deadline, ended the stream"
    with pytest.raises(HistorydError) as ei:
        await asyncio.wait_for(waited, LIMIT)
    assert not isinstance(ei.value, AppendStreamBrokenError) and ei.value.code == grpc.StatusCode.CANCELLED
    await asyncio.wait_for(ap.close(), LIMIT)
    assert len(stalled.items) == 3, "the window, a and b"


@pytest.mark.asyncio
async def test_async_appender_a_given_up_item_holds_its_place_until_the_appenders_timeout_from_then(stalled: StalledServer) -> None:  # noqa: F811
    """As test_append_deadline's sync test: an item whose own deadline passes after it was sent
    fails alone and keeps its place until its answer, or until the appender's ``timeout`` counted
    from the giving up, which cancels the stream as stalled. ddc850b cancelled it at the
    appender's timeout from the sending (0.3 s), before the item's own deadline (0.6 s)."""
    async with AsyncClient(stalled.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=2, timeout=0.3)
        t0 = time.monotonic()
        mine = await ap.append_instruction("b", "mine", timeout=0.6)
        other = await ap.append_instruction("b", "other", timeout=float("inf"))
        with pytest.raises(Exception) as ei:
            await asyncio.wait_for(asyncio.shield(mine), LIMIT)
        assert item_alone_expired(ei.value, mine.request_id) and not ei.value.stream_ended, repr(ei.value)
        assert not other.done(), "mine alone failed"
        late = await asyncio.wait_for(ap.append_instruction("b", "late", timeout=0.1), LIMIT)
        with pytest.raises(HistorydError) as ei:
            await late
        assert type(ei.value) is HistorydError and ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED, "the place is held"
        with pytest.raises(AppendStreamBrokenError) as ei:
            await asyncio.wait_for(other, LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and ei.value.stream_ended
        assert "given up" in str(ei.value), str(ei.value)
        assert time.monotonic() - t0 >= 0.6 + 0.3, "the stall counts from the giving up"
        await ended(stalled, 1)
        await asyncio.wait_for(ap.close(), LIMIT)


@pytest.mark.asyncio
async def test_async_appender_a_cancelled_item_holds_its_place_until_the_appenders_timeout_from_then(stalled: StalledServer) -> None:  # noqa: F811
    """The rule (the module's doc): cancelling a sent item's future gives up on it as its own
    deadline does; its place is held until its answer, or until the appender's ``timeout`` from
    the cancel, which cancels the stream as stalled. Items with deadlines of their own are not
    cut before that (ddc850b cut them at the appender's timeout from their sending)."""
    async with AsyncClient(stalled.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=2, timeout=0.3)
        mine = await ap.append_instruction("b", "mine", timeout=float("inf"))
        other = await ap.append_instruction("b", "other", timeout=float("inf"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(other), 0.5)
        t0 = time.monotonic()
        assert mine.cancel()
        with pytest.raises(AppendStreamBrokenError) as ei:
            await asyncio.wait_for(other, LIMIT)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "given up" in str(ei.value), repr(ei.value)
        assert time.monotonic() - t0 >= 0.3 - 0.01, "the stall counts from the cancel"
        await ended(stalled, 1)
        await asyncio.wait_for(ap.close(), LIMIT)


@pytest.mark.asyncio
async def test_async_appender_a_cancelled_item_grpc_has_not_taken_is_not_sent(stalled: StalledServer) -> None:  # noqa: F811
    """The rule (the module's doc; the TypeScript client's giveUp): an item given up on before grpc
    has taken it to send (its future cancelled in the tick of its append) leaves the stream unsent,
    and its place comes back at once. It held its place until an answer that, on a server that
    never answers, never came, and was sent all the same."""
    async with AsyncClient(stalled.addr, tls=False, timeout=None) as client:
        ap = client.appender(window=1, timeout=None)
        mine = await ap.append_instruction("b", "mine")
        assert mine.cancel()
        nxt = await asyncio.wait_for(ap.append_instruction("b", "next"), LIMIT)  # its place is free
        await read(stalled, 2)
        assert not nxt.done()
    await ended(stalled, 1)
    assert len(stalled.items) == 2, "the window and next: mine was not sent"
