"""watch(): a resuming iterator (issue 20: "a watch with a forced disconnect and resume";
docs/design.md#sequences: after any end, a new WatchBranch with after_sequence = the last
last_sequence and the same incarnation continues exactly where the stream stopped).

The forced disconnect is a TCP proxy between the watching client and historyd whose connections
are cut while writes go on through another client; the watch must deliver every commit exactly
once, in order, across the cut."""

from __future__ import annotations

import asyncio
import uuid
from typing import List

import pytest

from historyd import (
    BranchDeletedError,
    BranchNotFoundError,
    Client,
    Commit,
    HistoryCompactedError,
    HistorydError,
    InvalidFieldError,
    RetryPolicy,
)
from historyd.aio import AsyncClient

# Fast reconnection for the client behind the proxy: gRPC's own reconnect backoff starts at 1 s.
# grpc.min_reconnect_backoff_ms is also the connect timeout: 50 ms is too short for a handshake
# through the proxy on a loaded machine, and its default (20 s) holds back reconnections.
FAST = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 2000), ("grpc.max_reconnect_backoff_ms", 200)]


def sequences(commits: List[Commit]) -> List[int]:
    return [e.sequence for c in commits for e in c.events]


def test_watch_resumes_after_forced_disconnect(server, proxy) -> None:
    with Client(server.addr, tls=False) as writer, Client(proxy.addr, tls=False, options=FAST) as watcher:
        b = writer.create_branch(system="S")
        first = b.add_instruction("before")  # sequence 2
        watched = watcher.branch(b.id)
        resumes: List[int] = []
        it = watched.watch(after=0, on_resume=lambda cursor, err: resumes.append(cursor))
        got: List[Commit] = []
        got.append(next(it))  # BRANCH_CREATED (replay)
        got.append(next(it))  # the first instruction (replay)
        assert sequences(got) == [1, 2] and got[1].events[0].message.id == first.id

        proxy.cut()  # forced disconnect: the stream ends UNAVAILABLE
        for i in range(3):  # written while the watcher is cut off
            b.add_instruction(f"during {i}")
        while len(got) < 5:
            got.append(next(it))
        call = b.add_action_request("f", {"x": 1})
        resp = b.respond(call, {"ok": True})  # one commit of two events
        while sequences(got)[-1] < 8:
            got.append(next(it))
        it.close()

        assert sequences(got) == [1, 2, 3, 4, 5, 6, 7, 8], "every event once, in order, across the cut"
        assert resumes == [2], "resumed once, after the last sequence received"
        assert proxy.connections >= 2
        assert [e.kind for e in got[-1].events] == ["message_added", "message_replaced"]
        assert got[-1].events[0].message.id == resp.id and got[-1].first_sequence == 7
        assert [e.message.content["instruction"] for c in got[2:5] for e in c.events] == ["during 0", "during 1", "during 2"]


def test_watch_raises_branch_deleted_after_its_commit(server) -> None:
    with Client(server.addr, tls=False) as c:
        b = c.create_branch()
        it = b.watch(after=0)
        assert [e.kind for e in next(it).events] == ["branch_created"]
        last = b.delete()
        deleted = next(it)
        assert [e.kind for e in deleted.events] == ["branch_deleted"] and deleted.last_sequence == last
        with pytest.raises(BranchDeletedError) as ei:
            next(it)
        assert ei.value.metadata["branchId"] == b.id and ei.value.meta_int("lastSequence") == last


def test_watch_raises_history_compacted_for_another_incarnation(server) -> None:
    with Client(server.addr, tls=False) as c:
        b = c.create_branch()
        b.add_instruction("x")
        with pytest.raises(HistoryCompactedError) as ei:
            next(b.watch(after=1, incarnation=str(uuid.uuid4())))
        assert ei.value.meta_int("headSequence") == 2 and "oldestSequence" in ei.value.metadata


def test_watch_errors_before_the_first_frame_are_not_retried(server) -> None:
    with Client(server.addr, tls=False) as c:
        with pytest.raises(BranchNotFoundError):
            next(c.branch(str(uuid.uuid4())).watch())
        b = c.create_branch()
        with pytest.raises(InvalidFieldError) as ei:
            next(b.watch(after=99))
        assert ei.value.metadata.get("field") == "after_sequence"


def test_watch_gives_up_after_its_retry_policy(server, proxy) -> None:
    """A server that is gone: watch() raises the last error after max_attempts reconnections."""
    p = proxy
    with Client(p.addr, tls=False, options=FAST) as c:
        b = c.create_branch()
        it = b.watch(after=0, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01))
        next(it)
        p.close()  # no listener any more
        with pytest.raises(Exception) as ei:
            next(it)
        assert getattr(ei.value, "code", None) is not None and ei.value.code.name == "UNAVAILABLE"


@pytest.mark.asyncio
async def test_async_watch_resumes_after_forced_disconnect(server, proxy) -> None:
    async with AsyncClient(server.addr, tls=False) as writer, AsyncClient(proxy.addr, tls=False, options=FAST) as watcher:
        b = await writer.create_branch(system="S")
        got: List[Commit] = []
        it = watcher.branch(b.id).watch(after=0)
        got.append(await it.__anext__())
        await b.add_instruction("before")
        got.append(await it.__anext__())
        await asyncio.get_running_loop().run_in_executor(None, proxy.cut)
        for i in range(3):
            await b.add_instruction(f"during {i}")
        while len(got) < 5:
            got.append(await it.__anext__())
        await b.delete()
        got.append(await it.__anext__())
        with pytest.raises(BranchDeletedError):
            await it.__anext__()
        assert sequences(got) == [1, 2, 3, 4, 5, 6]
        assert got[-1].events[0].kind == "branch_deleted"
        assert proxy.connections >= 2


@pytest.mark.asyncio
async def test_async_watch_history_compacted(server) -> None:
    async with AsyncClient(server.addr, tls=False) as c:
        b = await c.create_branch()
        with pytest.raises(HistoryCompactedError):
            async for _ in b.watch(after=0, incarnation=str(uuid.uuid4())):
                pass


class _RecordingStub:
    """The client's HistoryService stub with WatchBranch wrapped: each request, and the case of
    each frame the server sent (the API yields commits one at a time, so only the frames show
    whether the server batched them)."""

    def __init__(self, stub) -> None:
        self._stub = stub
        self.requests: list = []
        self.frames: List[str] = []

    def __getattr__(self, name):
        return getattr(self._stub, name)

    def WatchBranch(self, req, **kwargs):
        self.requests.append(req)
        call, frames = self._stub.WatchBranch(req, **kwargs), self.frames

        class Call:
            def cancel(self):
                return call.cancel()

            def __iter__(self):
                for f in call:
                    frames.append(f.WhichOneof("frame"))
                    yield f

            async def __aiter__(self):
                async for f in call:
                    frames.append(f.WhichOneof("frame"))
                    yield f

        return Call()


# batch_commits (WatchBranchRequest.batch_commits, issue 21): a replay is sent as `commits`
# frames, several commits each; the watch yields them one at a time, each once, in order, and
# resumes after the last. The asyncio watch had no batch_commits (it also had no case for a
# `commits` frame, so it could not have taken one).
def test_watch_batch_commits(server) -> None:
    with Client(server.addr, tls=False) as c:
        b = c.create_branch(system="S")
        for i in range(20):
            b.add_instruction(f"m{i}")
        rec = c.history_stub = _RecordingStub(c.history_stub)
        got: List[Commit] = []
        for commit in c.branch(b.id).watch(after=0, batch_commits=True):
            got.append(commit)
            if commit.last_sequence == 21:
                break
        assert sequences(got) == list(range(1, 22))
        assert rec.requests[0].batch_commits and "commits" in rec.frames, rec.frames
        assert len(rec.frames) < 21, "the replay came several commits to a frame"


@pytest.mark.asyncio
async def test_async_watch_batch_commits(server) -> None:
    async with AsyncClient(server.addr, tls=False) as c:
        b = await c.create_branch(system="S")
        for i in range(20):
            await b.add_instruction(f"m{i}")
        rec = c.history_stub = _RecordingStub(c.history_stub)
        got: List[Commit] = []
        it = c.branch(b.id).watch(after=0, batch_commits=True)
        async for commit in it:
            got.append(commit)
            if commit.last_sequence == 21:
                break
        await it.aclose()
        assert sequences(got) == list(range(1, 22))
        assert rec.requests[0].batch_commits and "commits" in rec.frames, rec.frames
        assert len(rec.frames) < 21, "the replay came several commits to a frame"
        # commits written while the watch opens (live or replayed: the cursor is explicit, so
        # either way), batched or not, come once each and in order
        it = c.branch(b.id).watch(after=21, batch_commits=True)
        first = asyncio.ensure_future(it.__anext__())
        writes = [await b.add_instruction(f"live {i}") for i in range(5)]
        live = [await first] + [await it.__anext__() for _ in range(4)]
        await it.aclose()
        assert sequences(live) == [w.sequence for w in writes] == list(range(22, 27))


# The rule (AsyncClient.close: "calls in flight end with CANCELLED"): closing the asyncio client
# ends the streams it has open. grpcio's aio channel (1.51) finds the calls to cancel on close by
# looking at the tasks' top frames, where a stream being read is not: a watch, an inbox
# subscription or an appender's stream open at close() waited forever, and so did the task reading
# it. The client now cancels its own streams first, and they end with HistorydError CANCELLED, as
# the sync client's do.
@pytest.mark.asyncio
async def test_async_close_ends_the_streams_in_progress(server) -> None:
    c = AsyncClient(server.addr, tls=False)
    b = await c.create_branch()
    owner = str(uuid.uuid4())
    await c.exchange.register(owner)
    it = b.watch(after=0)
    assert (await it.__anext__()).last_sequence == 1
    watching = asyncio.ensure_future(it.__anext__())
    inbox = c.exchange.subscribe_inbox(owner, heartbeats=True)
    await inbox.__anext__()  # the first heartbeat: the subscription is live
    subscribed = asyncio.ensure_future(inbox.__anext__())
    ap = c.appender(window=4, timeout=None)
    other = await c.create_branch()
    first = await ap.append_instruction(other.id, "one")
    await asyncio.wait_for(first, 10)  # the appender's stream is open, and idle
    await asyncio.sleep(0)  # the two readers wait on their streams
    await asyncio.wait_for(c.close(), 10)
    for what, t in (("the watch", watching), ("the inbox subscription", subscribed)):
        done, _ = await asyncio.wait([t], timeout=5)
        assert done, f"{what} still waits after close()"
        err = t.exception()
        assert isinstance(err, HistorydError) and err.code.name == "CANCELLED", f"{what}: {err!r}"
    await asyncio.wait_for(ap.close(), 5)


# The rule (AsyncClient.close: watches and inbox subscriptions raise HistorydError CANCELLED): also
# a watch pausing between reconnections when close() runs, and a stream asked for after it. The
# watch slept out its pause, then called WatchBranch on the closed channel, and raised grpc's
# UsageError('Channel is closed.') (review of the clients 2, fault 4).
@pytest.mark.asyncio
async def test_async_close_ends_a_watch_pausing_between_reconnections(server, proxy) -> None:
    c = AsyncClient(proxy.addr, tls=False, options=FAST)
    b = await c.create_branch()
    pausing = asyncio.Event()
    it = b.watch(after=0, on_resume=lambda cursor, err: pausing.set(), retry=RetryPolicy(max_attempts=5, initial_backoff=30.0, max_backoff=30.0, jitter=0))
    assert (await it.__anext__()).last_sequence == 1
    watching = asyncio.ensure_future(it.__anext__())
    await asyncio.get_running_loop().run_in_executor(None, proxy.cut)  # the stream fails UNAVAILABLE
    await asyncio.wait_for(pausing.wait(), 5)  # on_resume: the watch pauses 30 s
    await asyncio.wait_for(c.close(), 5)
    done, _ = await asyncio.wait([watching], timeout=5)
    assert done, "the watch still pauses 5 s after close()"
    err = watching.exception()
    assert isinstance(err, HistorydError) and err.code.name == "CANCELLED", repr(err)
    for what, stream in (("a watch", b.watch(after=0)), ("an inbox subscription", c.exchange.subscribe_inbox(str(uuid.uuid4())))):
        with pytest.raises(HistorydError) as ei:
            await asyncio.wait_for(stream.__anext__(), 5)
        assert ei.value.code.name == "CANCELLED", f"{what} after close(): {ei.value!r}"
