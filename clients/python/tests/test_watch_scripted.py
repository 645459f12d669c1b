"""watch() against scripted WatchBranch streams (as the Go client's watch_deleted_internal_test.go),
so that how each stream ends is the test's: a connection lost right after the BRANCH_DELETED
commit, and the bound on reconnections in a row."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List, Optional, Tuple

import grpc
import pytest

from historyd import BranchDeletedError, RetryPolicy
from historyd._rpc import error_details_pb2, status_pb2
from historyd.aio import AsyncBranch
from historyd.client import Branch
from historyd.v1 import history_service_pb2 as hs


class ScriptedError(grpc.RpcError):
    """An RpcError as grpc raises it: a code, details, and trailers with the ErrorInfo."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self._code, self._message = code, message
        self._trailers: Tuple[Any, ...] = ()
        if reason is not None:
            st = status_pb2.Status(code=code.value[0], message=message)
            st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="historyd", metadata={"branchId": "b"}))
            self._trailers = (("grpc-status-details-bin", st.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> Any:
        return self._trailers


Script = Tuple[List[hs.WatchBranchResponse], BaseException]


class ScriptedCall:
    """One WatchBranch stream: its frames, then its end, for `for` and `async for` alike."""

    def __init__(self, script: Script) -> None:
        self.frames, self.end = script

    def __iter__(self) -> Any:
        yield from self.frames
        raise self.end

    async def _agen(self) -> Any:
        for f in self.frames:
            yield f
        raise self.end

    def __aiter__(self) -> Any:
        return self._agen()

    def cancel(self) -> None:
        pass


class ScriptedStub:
    """WatchBranch plays the next script each call (the last one again when they run out)."""

    def __init__(self, scripts: List[Script]) -> None:
        self.scripts = scripts
        self.calls = 0

    def WatchBranch(self, req: Any, metadata: Any = None) -> ScriptedCall:  # noqa: N802 (gRPC's name)
        script = self.scripts[min(self.calls, len(self.scripts) - 1)]
        self.calls += 1
        return ScriptedCall(script)


class FakeClient:
    """What a watch uses of a client: its stub and call metadata, whether it is closed, and its
    pause between reconnections (Client._pause)."""

    def __init__(self, stub: ScriptedStub) -> None:
        self.history_stub = stub
        self._metadata = None
        self._closed = False

    def _pause(self, delay: float) -> None:
        time.sleep(delay)  # the watch's pause between reconnections, as the client's


class AsyncFakeClient(FakeClient):
    """What an asyncio watch uses of a client: FakeClient's, and the set of its open streams
    (AsyncClient.close); its pause is a coroutine."""

    def __init__(self, stub: ScriptedStub) -> None:
        super().__init__(stub)
        self._streams: set = set()

    def _stream_cancelled(self, e: BaseException) -> Any:
        raise e

    async def _pause(self, delay: float) -> None:  # type: ignore[override]
        await asyncio.sleep(delay)  # the watch's pause between reconnections, as the client's


def start(after: int) -> hs.WatchBranchResponse:
    return hs.WatchBranchResponse(start=hs.WatchStart(incarnation="inc", after_sequence=after))


def commit(seq: int, kind: int = hs.EVENT_KIND_MESSAGE_ADDED) -> hs.WatchBranchResponse:
    return hs.WatchBranchResponse(
        commit=hs.BranchCommit(first_sequence=seq, last_sequence=seq, events=[hs.BranchEvent(sequence=seq, kind=kind)])
    )


UNAVAILABLE = ScriptedError(grpc.StatusCode.UNAVAILABLE, "connection reset (test)")
# What a reconnection finds after the deletion: the branch is gone.
NOT_FOUND = ScriptedError(grpc.StatusCode.NOT_FOUND, "branch not found (test)", "ERROR_REASON_BRANCH_NOT_FOUND")
DELETED_THEN_LOST: List[Script] = [([start(4), commit(5, hs.EVENT_KIND_BRANCH_DELETED)], UNAVAILABLE), ([], NOT_FOUND)]


def check_deleted(err: BranchDeletedError, stub: ScriptedStub) -> None:
    assert err.code == grpc.StatusCode.NOT_FOUND and err.reason == "ERROR_REASON_BRANCH_DELETED"
    assert err.metadata["branchId"] == "b" and err.meta_int("lastSequence") == 5
    assert stub.calls == 1, "no reconnection after the deletion: it could only find the branch gone"


def test_watch_raises_branch_deleted_when_the_connection_drops_after_the_deletion() -> None:
    """The rule (Branch.watch): BranchDeletedError after yielding the commit of the deletion. When
    the connection dropped between that commit and the stream's NOT_FOUND status, the stream ended
    UNAVAILABLE, the watch reconnected and raised what the reconnection found, BranchNotFoundError
    (or HistoryCompactedError). The Go client remembers the deletion it yielded and ends there
    (client/watch.go, deleted); so does this one (review of the clients, fault 5)."""
    stub = ScriptedStub(DELETED_THEN_LOST)
    it = Branch(FakeClient(stub), "b").watch(after=4, retry=RetryPolicy(max_attempts=3, initial_backoff=0))  # type: ignore[arg-type]
    c = next(it)
    assert [e.kind for e in c.events] == ["branch_deleted"]
    with pytest.raises(BranchDeletedError) as ei:
        next(it)
    check_deleted(ei.value, stub)


@pytest.mark.asyncio
async def test_async_watch_raises_branch_deleted_when_the_connection_drops_after_the_deletion() -> None:
    """As the sync test above, through AsyncBranch.watch (review of the clients, fault 5)."""
    stub = ScriptedStub(DELETED_THEN_LOST)
    it = AsyncBranch(AsyncFakeClient(stub), "b").watch(after=4, retry=RetryPolicy(max_attempts=3, initial_backoff=0))  # type: ignore[arg-type]
    c = await it.__anext__()
    assert [e.kind for e in c.events] == ["branch_deleted"]
    with pytest.raises(BranchDeletedError) as ei:
        await it.__anext__()
    check_deleted(ei.value, stub)


GONE: List[Script] = [([start(0), commit(1)], UNAVAILABLE), ([], UNAVAILABLE)]


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_watch_reconnects_max_attempts_times_in_a_row(max_attempts: int) -> None:
    """The rule (Branch.watch; the Go client's Watch and DefaultWatchRetry): ``retry`` bounds the
    reconnections in a row that deliver nothing, and watch() raises the last error after
    ``max_attempts`` of them. It gave up after max_attempts - 1 (review of the clients, fault 5)."""
    stub = ScriptedStub(GONE)
    resumes: List[int] = []
    it = Branch(FakeClient(stub), "b").watch(  # type: ignore[arg-type]
        after=0, retry=RetryPolicy(max_attempts=max_attempts, initial_backoff=0), on_resume=lambda cursor, err: resumes.append(cursor)
    )
    assert next(it).last_sequence == 1
    with pytest.raises(Exception) as ei:
        next(it)
    assert getattr(ei.value, "code", None) == grpc.StatusCode.UNAVAILABLE
    assert resumes == [1] * max_attempts
    assert stub.calls == 1 + max_attempts


@pytest.mark.asyncio
@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_async_watch_reconnects_max_attempts_times_in_a_row(max_attempts: int) -> None:
    """As the sync test above, through AsyncBranch.watch (review of the clients, fault 5)."""
    stub = ScriptedStub(GONE)
    resumes: List[int] = []
    it = AsyncBranch(AsyncFakeClient(stub), "b").watch(  # type: ignore[arg-type]
        after=0, retry=RetryPolicy(max_attempts=max_attempts, initial_backoff=0), on_resume=lambda cursor, err: resumes.append(cursor)
    )
    assert (await it.__anext__()).last_sequence == 1
    with pytest.raises(Exception) as ei:
        await it.__anext__()
    assert getattr(ei.value, "code", None) == grpc.StatusCode.UNAVAILABLE
    assert resumes == [1] * max_attempts
    assert stub.calls == 1 + max_attempts
