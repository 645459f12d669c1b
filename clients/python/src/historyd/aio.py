"""The asyncio client (grpc.aio): :class:`AsyncClient`, :class:`AsyncBranch` and
:class:`AsyncExchange`, the same API as the synchronous one with coroutines and async iterators.
Create an AsyncClient inside a running event loop."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar, Union

import grpc
from google.protobuf.message import Message as _PbMessage

from . import _requests as rq
from ._convert import UNSET, BranchInfo, Commit, Heartbeat, InboxHeartbeat, Message, Participant, to_py
from ._requests import DEFAULT_RETRY, DEFAULT_WATCH_RETRY, TLS, Keepalive, RetryPolicy
from .aio_appender import AppendFuture, AsyncAppender
from .client import deleted_error, is_deletion, resumable
from .errors import HistorydError, from_rpc_error
from .v1 import exchange_service_pb2 as ex
from .v1 import exchange_service_pb2_grpc as ex_grpc
from .v1 import history_service_pb2 as hs
from .v1 import history_service_pb2_grpc as hs_grpc

__all__ = ["AsyncClient", "AsyncBranch", "AsyncExchange", "AsyncAppender", "AppendFuture"]

T = TypeVar("T")
_DEFAULT: Any = object()


class AsyncClient:
    """A connection to historyd for asyncio (grpc.aio); create it inside a running event loop.

    Args:
        addr: ``host:port`` (any gRPC target).
        token: a bearer token, sent as ``authorization: Bearer <token>`` on every call (for a server
            started with ``--auth-tokens-file``).
        tls: ``True`` (the default, as the Go client): TLS 1.2+ with the system roots; a
            :class:`TLS` for custom roots, a client certificate (mutual TLS) or a server name;
            ``False``: plaintext, as to ``make run``.
        timeout: the default deadline of each unary call, in seconds (retries included); None: none.
        retry: the retry policy of unary calls (:data:`DEFAULT_RETRY`).
        options: extra gRPC channel options.
        keepalive: HTTP/2 keepalive pings while calls are open: ``True`` for :class:`Keepalive`'s
            defaults (a ping after 30 s of quiet, 20 s to answer), a :class:`Keepalive`, or
            None (the default: no pings). Keep its ``time`` at or above the server's
            ``--keepalive-min-time`` (10 s): historyd disconnects a client that pings more often.

    Use as an async context manager, or await :meth:`close`.
    """

    def __init__(
        self,
        addr: str,
        *,
        token: Optional[str] = None,
        tls: Union[bool, TLS] = True,
        timeout: Optional[float] = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        keepalive: Union[bool, Keepalive, None] = None,
    ) -> None:
        rq.check_timeout("AsyncClient(timeout=)", timeout)
        creds, opts = rq.channel_args(addr, tls, options, keepalive)
        self._channel = grpc.aio.secure_channel(addr, creds, opts) if creds else grpc.aio.insecure_channel(addr, opts)
        self._metadata = rq.call_metadata(token)
        self.timeout = timeout
        self.retry = retry
        #: The generated stubs, for calls this API does not wrap.
        self.history_stub = hs_grpc.HistoryServiceStub(self._channel)
        self.exchange_stub = ex_grpc.ExchangeServiceStub(self._channel)
        #: The agent-to-agent AsyncExchange.
        self.exchange = AsyncExchange(self)
        # The calls open (unary calls, watches, inbox subscriptions, appenders' streams), which
        # close() cancels itself: grpc.aio's channel close cancels the calls it finds at the top
        # of a task's stack, which a stream being read is not, and such a stream waited forever.
        self._streams: Set[Any] = set()
        self._closed = False
        # Set by close(): a watch pausing between reconnections wakes on it and ends.
        self._closing = asyncio.Event()

    async def close(self) -> None:
        """Closes the channel. The calls in flight (a call pausing between retries and a watch
        pausing between reconnections too, inbox subscriptions, an appender's appends waiting
        for a place) raise HistorydError CANCELLED ("the client was closed"), not
        asyncio.CancelledError: their tasks are not cancelled. An appender's items in flight
        raise AppendStreamBrokenError CANCELLED. A call, stream or append made afterwards raises
        HistorydError CANCELLED at once, sending nothing."""
        self._closed = True
        self._closing.set()
        for call in list(self._streams):
            call.cancel()
        await self._channel.close()

    def _closed_error(self) -> HistorydError:
        """The error of a call on this client once close() ran: grpc.aio's would be a UsageError
        ('Channel is closed.'), which is not the documented HistorydError."""
        return rq.closed_error()

    def _stream_cancelled(self, e: BaseException) -> HistorydError:
        """The error of a call of this client that raised asyncio.CancelledError, grpc.aio's end
        of a call cancelled here: HistorydError CANCELLED when close() cancelled it; e is raised
        again when the client is open or the task itself is being cancelled (Task.cancelling,
        Python 3.11; before it, a task cancelled while close() runs gets the HistorydError)."""
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)
        if not self._closed or (cancelling is not None and cancelling()):
            raise e
        return self._closed_error()

    async def _pause(self, delay: float) -> None:
        """Sleeps delay seconds, or until close() runs."""
        try:
            await asyncio.wait_for(self._closing.wait(), delay)
        except asyncio.TimeoutError:
            pass

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- calls ---------------------------------------------------------------------------------

    async def _call(self, stub: Any, method: str, req: _PbMessage, timeout: Optional[float] = _DEFAULT) -> Any:
        """Sends one unary call with the deadline and the retry policy; raises HistorydError."""
        timeout = self.timeout if timeout is _DEFAULT else timeout
        rq.check_timeout("the call's timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        req, may_retry = rq.prepare_retry(method, req)
        fn = getattr(stub, method)
        attempt = 0
        while True:
            attempt += 1
            rq.check_open(self)  # closed, during the pause below say: the channel is gone
            left = None if deadline is None else rq.bounded_wait(max(0.0, deadline - time.monotonic()))
            call = fn(req, timeout=left, metadata=self._metadata)
            self._streams.add(call)  # close() cancels it
            try:
                return await call
            except asyncio.CancelledError as e:  # close() cancelled the call, or the task was cancelled
                raise self._stream_cancelled(e) from None
            except grpc.RpcError as e:
                if self._closed:
                    raise self._closed_error() from e
                err = from_rpc_error(e)
                if not (may_retry and attempt < self.retry.max_attempts and rq.retryable_code(err.code)):
                    raise err from e
                pause = self.retry.backoff(attempt)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise err from e
            finally:
                self._streams.discard(call)
            await self._pause(pause)  # close() ends it early

    async def _h(self, method: str, req: _PbMessage, timeout: Optional[float] = _DEFAULT) -> Any:
        return await self._call(self.history_stub, method, req, timeout)

    async def _x(self, method: str, req: _PbMessage, timeout: Optional[float] = _DEFAULT) -> Any:
        return await self._call(self.exchange_stub, method, req, timeout)

    async def _pages(self, fetch: Callable[[str], Awaitable[Tuple[List[T], str]]]) -> AsyncIterator[T]:
        token = ""
        while True:
            items, token = await fetch(token)
            for item in items:
                yield item
            if not token:
                return

    # -- branches ------------------------------------------------------------------------------

    async def create_branch(
        self,
        *,
        system: Optional[str] = None,
        user: Optional[str] = None,
        name: Optional[str] = None,
        system_datetime: Union[bool, str, None] = None,
        system_sender: Optional[str] = None,
        branch_id: Optional[str] = None,
        metadata: Optional[Dict[str, Any]] = None,
        request_id: Optional[str] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> "AsyncBranch":
        """Creates a branch, as LionAGI's ``Branch(user=, name=, system=)``: with a system (its
        text, or ``system=""`` for LionAGI's default text), the System's sender is
        ``system_sender``, else ``user``, else ``"system"``. ``branch_id`` None: a server-made id."""
        req = rq.create_branch(
            system=system,
            system_datetime=system_datetime,
            system_sender=system_sender,
            user=user,
            name=name,
            branch_id=branch_id,
            metadata=metadata,
            request_id=request_id,
        )
        resp = await self._h("CreateBranch", req, timeout)
        b = AsyncBranch(self, resp.branch.id, BranchInfo.from_proto(resp.branch))
        b.system = Message.from_proto(resp.system) if resp.HasField("system") else None
        return b

    def appender(self, window: int = 64, *, timeout: Optional[float] = _DEFAULT) -> "AsyncAppender":
        """An :class:`~historyd.aio_appender.AsyncAppender`: AddMessage pipelined over one
        AppendMessages stream, up to ``window`` items in flight (issue 21). ``timeout`` is how
        long each item may wait for its answer once sent, in seconds (default: this client's
        ``timeout``; None: none; the wait for a place in the window is not counted): an item
        unanswered by then cancels the stream and fails ``DEADLINE_EXCEEDED``, so a stalled server
        holds no item forever. An item's own deadline (``append(req, timeout=)``) replaces it for
        that item. Cancelling a sent item's future, or its own deadline passing, gives up on that
        item alone (its ``request_id`` appends it again); the stream goes on, and the given-up
        item holds its place at most ``timeout`` more."""
        return AsyncAppender(self, window, self.timeout if timeout is _DEFAULT else timeout)

    def branch(self, branch_id: str) -> "AsyncBranch":
        """A handle on an existing branch (no call is made)."""
        return AsyncBranch(self, str(branch_id))

    async def get_branch(self, branch_id: str, *, timeout: Optional[float] = _DEFAULT) -> "AsyncBranch":
        """The branch, described (raises BranchNotFoundError)."""
        resp = await self._h("GetBranch", hs.GetBranchRequest(branch_id=str(branch_id)), timeout)
        return AsyncBranch(self, resp.branch.id, BranchInfo.from_proto(resp.branch))

    def list_branches(self, *, page_size: int = 0) -> AsyncIterator["AsyncBranch"]:
        """Every branch, in id order, page after page."""

        async def fetch(token: str) -> Tuple[List[AsyncBranch], str]:
            resp = await self._h("ListBranches", hs.ListBranchesRequest(page_size=page_size, page_token=token))
            return [AsyncBranch(self, b.id, BranchInfo.from_proto(b)) for b in resp.branches], resp.next_page_token

        return self._pages(fetch)

    async def import_branch(
        self,
        data: Union[str, bytes, Dict[str, Any], List[Any]],
        *,
        branch_id: Optional[str] = None,
        new_branch_id: bool = False,
        db_meta_key: Optional[str] = None,
        request_id: Optional[str] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> "AsyncBranch":
        """Creates a branch from LionAGI data: a ``Branch.to_dict()`` (any mode), a
        ``Pile.to_dict()`` or a list of message dicts, as a Python value or JSON text. The payload's
        id is kept unless ``branch_id`` or ``new_branch_id`` say otherwise. ``db_meta_key`` is the
        metadata key of a db-mode payload written with a custom one; a key that names a field of the
        dicts (``id``, ``messages``, ``chat_model``, ...) is refused, INVALID_ARGUMENT."""
        req = hs.ImportBranchRequest(
            data=rq.import_data(data),
            branch_id=str(branch_id or ""),
            new_branch_id=new_branch_id,
            db_meta_key=db_meta_key or "",
            request_id=request_id or "",
        )
        resp = await self._h("ImportBranch", req, timeout)
        return AsyncBranch(self, resp.branch.id, BranchInfo.from_proto(resp.branch))


class AsyncBranch:
    """A branch of historyd: LionAGI's ``Branch`` over the wire, for asyncio.

    Every write returns the message as written; ``head_sequence`` follows the branch's head as the
    responses report it. Writes take ``request_id`` (made by the client when omitted, so retries
    are applied once), ``expected_head_sequence`` (optimistic concurrency: SequenceMismatchError
    when the head moved) and ``include_rendered`` (the prompt text in the returned message).
    """

    def __init__(self, client: AsyncClient, branch_id: str, info: Optional[BranchInfo] = None) -> None:
        self.client = client
        #: The branch's id.
        self.id = branch_id
        #: The last description read (create, get, import, fork, refresh), or None.
        self.info = info
        #: The System the create call returned, when this handle made the branch.
        self.system: Optional[Message] = None
        #: The newest head sequence a response reported.
        self.head_sequence: int = info.head_sequence if info else 0

    def __repr__(self) -> str:
        return f"AsyncBranch({self.id!r})"

    def _seen(self, head: int) -> None:
        self.head_sequence = max(self.head_sequence, head)

    async def refresh(self, *, timeout: Optional[float] = _DEFAULT) -> BranchInfo:
        """Reads the branch's description again (GetBranch)."""
        resp = await self.client._h("GetBranch", hs.GetBranchRequest(branch_id=self.id), timeout)
        self.info = BranchInfo.from_proto(resp.branch)
        self._seen(self.info.head_sequence)
        return self.info

    async def _add(self, req: hs.AddMessageRequest, timeout: Optional[float]) -> Message:
        resp = await self.client._h("AddMessage", req, timeout)
        self._seen(resp.head_sequence)
        return Message.from_proto(resp.message)

    async def add_instruction(
        self,
        instruction: Any = None,
        *,
        context: Any = None,
        guidance: Any = None,
        sender: Participant = None,
        recipient: Participant = None,
        handle_context: Optional[str] = None,
        plain_content: Optional[str] = None,
        tool_schemas: Optional[Sequence[Any]] = None,
        response_format: Optional[Dict[str, Any]] = None,
        images: Optional[Sequence[str]] = None,
        image_detail: Optional[str] = None,
        metadata: Optional[Dict[str, Any]] = None,
        update: Union[str, Message, None] = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        include_rendered: bool = False,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Adds an Instruction (the user turn), as LionAGI's ``add_message(instruction=...)``.

        ``instruction`` and ``guidance`` are text or any JSON value; ``context`` is any JSON value
        (a list extends the prompt context item by item, anything else is one item);
        ``handle_context`` is ``"extend"`` (default) or ``"replace"``; ``update`` names an existing
        Instruction to update in place instead of adding one (then ``instruction`` must be None)."""
        req = rq.add_message(
            self.id,
            sender=sender,
            recipient=recipient,
            metadata=metadata,
            request_id=request_id,
            expected_head_sequence=expected_head_sequence,
            include_rendered=include_rendered,
            target_id=update.id if isinstance(update, Message) else update,
        )
        req.instruction.CopyFrom(
            rq.instruction_input(
                instruction,
                context=context,
                guidance=guidance,
                handle_context=handle_context,
                plain_content=plain_content,
                tool_schemas=tool_schemas,
                response_format=response_format,
                images=images,
                image_detail=image_detail,
            )
        )
        return await self._add(req, timeout)

    async def add_assistant_response(
        self,
        response: Any,
        *,
        sender: Participant = None,
        recipient: Participant = None,
        metadata: Optional[Dict[str, Any]] = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        include_rendered: bool = False,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Adds an AssistantResponse: ``response`` is the display text, or a raw provider response
        (a dict: OpenAI chat, Anthropic messages, ...) whose text the server extracts as LionAGI's
        ``from_response`` does, keeping the raw value in ``metadata["model_response"]``."""
        req = rq.add_message(
            self.id,
            sender=sender,
            recipient=recipient,
            metadata=metadata,
            request_id=request_id,
            expected_head_sequence=expected_head_sequence,
            include_rendered=include_rendered,
        )
        req.assistant_response.CopyFrom(rq.assistant_input(response))
        return await self._add(req, timeout)

    async def add_action_request(
        self,
        function: str,
        arguments: Optional[Dict[str, Any]] = None,
        *,
        sender: Participant = None,
        recipient: Participant = None,
        metadata: Optional[Dict[str, Any]] = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        include_rendered: bool = False,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Adds an ActionRequest (a tool call) of ``function`` with ``arguments`` (a dict)."""
        req = rq.add_message(
            self.id,
            sender=sender,
            recipient=recipient,
            metadata=metadata,
            request_id=request_id,
            expected_head_sequence=expected_head_sequence,
            include_rendered=include_rendered,
        )
        req.action_request.CopyFrom(rq.action_request_input(function, arguments))
        return await self._add(req, timeout)

    async def set_system(
        self,
        system: Optional[str] = None,
        *,
        system_datetime: Union[bool, str, None] = None,
        sender: Participant = None,
        recipient: Participant = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        include_rendered: bool = False,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Sets the branch's System at index 0, replacing the previous one (None: LionAGI's default
        text; ``system_datetime=True`` stamps the current UTC minute)."""
        req = rq.add_message(
            self.id,
            sender=sender,
            recipient=recipient,
            metadata=None,
            request_id=request_id,
            expected_head_sequence=expected_head_sequence,
            include_rendered=include_rendered,
        )
        req.system.CopyFrom(rq.system_input(system, system_datetime))
        return await self._add(req, timeout)

    async def respond(
        self,
        request: Union[str, Message],
        output: Any = None,
        *,
        error: Optional[str] = None,
        sender: Participant = None,
        recipient: Participant = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        include_rendered: bool = False,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Answers an ActionRequest (LionAGI's ``create_action_response``) with ``output`` (any JSON
        value) or ``error``; returns the new ActionResponse. The request gets its id as
        ``action_response_id``; both are written in one commit."""
        req = rq.create_action_response(
            self.id,
            request,
            output,
            error=error,
            sender=sender,
            recipient=recipient,
            request_id=request_id,
            expected_head_sequence=expected_head_sequence,
            include_rendered=include_rendered,
        )
        resp = await self.client._h("CreateActionResponse", req, timeout)
        self._seen(resp.head_sequence)
        return Message.from_proto(resp.action_response)

    async def get_message(self, message_id: Union[str, Message], *, timeout: Optional[float] = _DEFAULT) -> Message:
        """One message of the branch (raises MessageNotFoundError)."""
        mid = message_id.id if isinstance(message_id, Message) else str(message_id)
        resp = await self.client._h("GetMessage", hs.GetMessageRequest(branch_id=self.id, message_id=mid), timeout)
        self._seen(resp.head_sequence)
        return Message.from_proto(resp.message)

    def messages(
        self,
        view: Optional[str] = None,
        *,
        selected: bool = False,
        descending: bool = False,
        page_size: int = 0,
    ) -> AsyncIterator[Message]:
        """The branch's messages in order (the system first), page after page: all of them, one
        ``view`` (``"instructions"``, ``"assistant_responses"``, ``"actions"``,
        ``"action_requests"``, ``"action_responses"``) or the ``selected`` progression."""

        async def fetch(token: str) -> Tuple[List[Message], str]:
            req = hs.ListMessagesRequest(
                branch_id=self.id,
                page_size=page_size,
                page_token=token,
                descending=descending,
                view=rq.view_number(view),
                selected=selected,
            )
            resp = await self.client._h("ListMessages", req)
            self._seen(resp.head_sequence)
            return [Message.from_proto(m) for m in resp.messages], resp.next_page_token

        return self.client._pages(fetch)

    async def last_message(self, view: Optional[str] = None, *, timeout: Optional[float] = _DEFAULT) -> Optional[Message]:
        """The last message of a view (``"instructions"``: LionAGI's last_instruction...), or None."""
        resp = await self.client._h("GetLastMessage", hs.GetLastMessageRequest(branch_id=self.id, view=rq.view_number(view)), timeout)
        self._seen(resp.head_sequence)
        return Message.from_proto(resp.message) if resp.HasField("message") else None

    async def to_chat_messages(
        self,
        *,
        order: Optional[Iterable[Union[str, Message]]] = None,
        selected: bool = False,
        format: Optional[str] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> Any:
        """The chat projection (LionAGI's ``to_chat_msgs``): ``[{"role", "content"}, ...]`` of the
        full order, of ``order``, or of the selected progression. ``format`` picks another
        projection where the server has one (``"openai"``); None or ``"lionagi"`` is this one."""
        req = rq.to_chat_messages(self.id, order, selected, format)
        resp = await self.client._h("ToChatMessages", req, timeout)
        self._seen(resp.head_sequence)
        return rq.chat_messages(resp)

    async def export(self, mode: str = "json", *, db_meta_key: Optional[str] = None, timeout: Optional[float] = _DEFAULT) -> Dict[str, Any]:
        """The branch as LionAGI's ``Branch.to_dict(mode=...)`` dict (``"json"``, ``"python"`` or
        ``"db"``), ready for LionAGI's ``Branch.from_dict`` or :meth:`AsyncClient.import_branch`.
        ``db_meta_key`` is db mode's metadata key (default ``node_metadata``); one that names a
        field of the dicts is refused, INVALID_ARGUMENT."""
        req = hs.ExportBranchRequest(branch_id=self.id, mode=rq.mode_number(mode), db_meta_key=db_meta_key or "")
        resp = await self.client._h("ExportBranch", req, timeout)
        self._seen(resp.head_sequence)
        return json.loads(resp.data)

    async def clear_messages(self, *, request_id: Optional[str] = None, expected_head_sequence: Optional[int] = None, timeout: Optional[float] = _DEFAULT) -> int:
        """Removes every message but the system; returns the new head sequence."""
        req = hs.ClearMessagesRequest(branch_id=self.id)
        rq._base(req, request_id, expected_head_sequence)
        resp = await self.client._h("ClearMessages", req, timeout)
        self._seen(resp.head_sequence)
        return resp.head_sequence

    async def set_progression(
        self,
        progression: Optional[Iterable[Union[str, Message]]],
        *,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> int:
        """Sets the selected progression (None unsets it); returns the new head sequence."""
        req = hs.SetProgressionRequest(branch_id=self.id)
        rq._base(req, request_id, expected_head_sequence)
        ids = rq._ids(progression)
        if ids is not None:
            req.progression.CopyFrom(ids)
        resp = await self.client._h("SetProgression", req, timeout)
        self._seen(resp.head_sequence)
        return resp.head_sequence

    async def fork(
        self,
        message: Union[str, Message, None] = None,
        *,
        name: Optional[str] = None,
        new_branch_id: Optional[str] = None,
        request_id: Optional[str] = None,
        expected_head_sequence: Optional[int] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> "AsyncBranch":
        """Copies the branch up to and including ``message`` (None: all of it) into a new branch."""
        req = hs.ForkBranchRequest(
            branch_id=self.id,
            message_id=(message.id if isinstance(message, Message) else str(message or "")),
            new_branch_id=str(new_branch_id or ""),
        )
        rq._base(req, request_id, expected_head_sequence)
        if name is not None:
            req.name = name
        resp = await self.client._h("ForkBranch", req, timeout)
        return AsyncBranch(self.client, resp.branch.id, BranchInfo.from_proto(resp.branch))

    async def delete(self, *, request_id: Optional[str] = None, expected_head_sequence: Optional[int] = None, timeout: Optional[float] = _DEFAULT) -> int:
        """Deletes the branch; returns the sequence of its BRANCH_DELETED event."""
        req = hs.DeleteBranchRequest(branch_id=self.id)
        rq._base(req, request_id, expected_head_sequence)
        resp = await self.client._h("DeleteBranch", req, timeout)
        return resp.last_sequence

    async def watch(
        self,
        after: Optional[int] = None,
        *,
        incarnation: Optional[str] = None,
        kinds: Optional[Iterable[str]] = None,
        include_rendered: bool = False,
        heartbeats: bool = False,
        batch_commits: bool = False,
        retry: RetryPolicy = DEFAULT_WATCH_RETRY,
        on_resume: Optional[Callable[[int, HistorydError], None]] = None,
    ) -> AsyncIterator[Union[Commit, Heartbeat]]:
        """The branch's commits, as they happen, resuming by itself.

        ``after`` is the cursor: the last sequence you have (0: everything retained; None: from
        now). When the stream ends because the connection broke, the server restarts or the
        watcher fell behind, the iterator opens a new stream after the last sequence received, with
        the branch's incarnation, so each event comes exactly once, in order; ``retry`` bounds
        reconnections in a row that deliver nothing, and ``on_resume(cursor, error)`` is called
        before each. ``heartbeats=True`` also yields the :class:`Heartbeat` bookmarks.
        ``batch_commits=True`` lets the server send the commits a lagging watcher is behind on
        several to a frame (issue 21); they are yielded one at a time all the same.

        After ``retry.max_attempts`` reconnections in a row that deliver nothing (no commit, no
        heartbeat), it raises the last error, as the Go client's Watch does.

        Raises :class:`HistoryCompactedError` when the cursor is no longer retained (or the branch
        was re-created under its id: re-read it and watch from its head), and
        :class:`BranchDeletedError` after yielding the commit of the deletion, even when the
        connection drops before the stream's own end. Closing the iterator (``await it.aclose()``,
        or ``contextlib.aclosing``) cancels the stream.
        """
        stub = self.client.history_stub
        metadata = self.client._metadata
        kind_numbers = rq.kinds_numbers(kinds)
        cursor, inc, attempt = after, incarnation, 0
        deleted_at: Optional[int] = None  # the sequence of the BRANCH_DELETED commit yielded
        while True:
            rq.check_open(self.client)  # closed, during the pause below say: the channel is gone
            req = hs.WatchBranchRequest(branch_id=self.id, kinds=kind_numbers, include_rendered=include_rendered, batch_commits=batch_commits)
            if cursor is not None:
                req.after_sequence = cursor
            if inc:
                req.incarnation = inc
            call = stub.WatchBranch(req, metadata=metadata)
            self.client._streams.add(call)
            try:
                async for frame in call:
                    which = frame.WhichOneof("frame")
                    if which == "start":
                        inc = frame.start.incarnation
                        if cursor is None:
                            cursor = frame.start.after_sequence
                    elif which == "commit":
                        cursor, attempt = frame.commit.last_sequence, 0
                        self._seen(cursor)
                        if is_deletion(frame.commit):
                            deleted_at = cursor
                        yield Commit.from_proto(frame.commit)
                    elif which == "commits":  # batch_commits (issue 21): each in order
                        for c in frame.commits.commits:
                            cursor, attempt = c.last_sequence, 0
                            self._seen(cursor)
                            if is_deletion(c):
                                deleted_at = cursor
                            yield Commit.from_proto(c)
                    elif which == "heartbeat":
                        cursor, attempt = frame.heartbeat.head_sequence, 0
                        if heartbeats:
                            yield Heartbeat(frame.heartbeat.head_sequence)
                err: HistorydError = HistorydError("the watch stream ended with OK", code=grpc.StatusCode.UNAVAILABLE)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
            except asyncio.CancelledError as e:
                err = self.client._stream_cancelled(e)
            finally:
                call.cancel()
                self.client._streams.discard(call)
            if deleted_at is not None:  # nothing can follow the deletion: no reconnection
                raise deleted_error(self.id, deleted_at, err)
            if not resumable(err):
                raise err
            attempt += 1
            if attempt > max(retry.max_attempts, 1):  # max_attempts reconnections, as Go's Watch
                raise err
            if on_resume is not None:
                on_resume(cursor if cursor is not None else 0, err)
            await self.client._pause(retry.backoff(attempt))  # close() ends it early


class AsyncExchange:
    """LionAGI's Exchange over historyd, for asyncio: owners register, send to one owner (a recipient id), to
    every other owner (``recipient=None``) or to nobody (:data:`UNSET`, kept as a dead letter);
    ``collect`` moves an owner's outbox to the recipients' inboxes."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def register(self, owner_id: str, *, timeout: Optional[float] = _DEFAULT) -> Dict[str, Any]:
        """Registers an owner; returns its (empty) flow as a dict. OwnerAlreadyRegisteredError if it is."""
        return to_py((await self.client._x("Register", ex.RegisterRequest(owner_id=str(owner_id)), timeout)).flow)

    async def unregister(self, owner_id: str, *, omit_dead_letters: bool = False, timeout: Optional[float] = _DEFAULT) -> Dict[str, Any]:
        """Unregisters an owner; returns what it held (outbox, inboxes, dead letters)."""
        req = ex.UnregisterRequest(owner_id=str(owner_id), omit_dead_letters=omit_dead_letters)
        return to_py((await self.client._x("Unregister", req, timeout)).flow)

    def owners(self, *, page_size: int = 0) -> AsyncIterator[Dict[str, Any]]:
        """The registered owners with their counts, page after page."""

        async def fetch(token: str) -> Tuple[List[Dict[str, Any]], str]:
            resp = await self.client._x("ListOwners", ex.ListOwnersRequest(page_size=page_size, page_token=token))
            return [to_py(o) for o in resp.owners], resp.next_page_token

        return self.client._pages(fetch)

    async def send(
        self,
        sender: str,
        recipient: Participant = UNSET,
        content: Any = None,
        *,
        channel: Optional[str] = None,
        request_id: Optional[str] = None,
        timeout: Optional[float] = _DEFAULT,
    ) -> Message:
        """Puts a message with ``content`` (any JSON value) in the sender's outbox. ``recipient``:
        an owner id, None (broadcast) or UNSET (undeliverable: a dead letter at collect)."""
        return Message.from_proto((await self.client._x("Send", rq.send(sender, recipient, content, channel, request_id), timeout)).message)

    async def collect(self, owner_id: str, *, include_reached_owner_ids: bool = False, timeout: Optional[float] = _DEFAULT) -> Dict[str, Any]:
        """Delivers the owner's outbox; returns the delivery report as a dict."""
        req = ex.CollectRequest(owner_id=str(owner_id), include_reached_owner_ids=include_reached_owner_ids)
        return to_py(await self.client._x("Collect", req, timeout))

    async def collect_all(self, *, include_reached_owner_ids: bool = False, timeout: Optional[float] = _DEFAULT) -> Dict[str, Any]:
        """Delivers every owner's outbox; returns the report as a dict."""
        req = ex.CollectAllRequest(include_reached_owner_ids=include_reached_owner_ids)
        return to_py(await self.client._x("CollectAll", req, timeout))

    def receive(self, owner_id: str, sender: Optional[str] = None, *, page_size: int = 0) -> AsyncIterator[Message]:
        """The owner's inbox (from one sender, or all), oldest first, without removing anything."""

        async def fetch(token: str) -> Tuple[List[Message], str]:
            req = ex.ReceiveRequest(owner_id=str(owner_id), page_size=page_size, page_token=token)
            if sender is not None:
                req.sender = str(sender)
            resp = await self.client._x("Receive", req)
            return [Message.from_proto(m) for m in resp.messages], resp.next_page_token

        return self.client._pages(fetch)

    async def pop(self, owner_id: str, sender: str, *, timeout: Optional[float] = _DEFAULT) -> Optional[Message]:
        """Removes and returns the oldest message from ``sender`` in the owner's inbox, or None.
        Never retried: a retry after a lost answer would pop a second message."""
        resp = await self.client._x("PopMessage", ex.PopMessageRequest(owner_id=str(owner_id), sender=str(sender)), timeout)
        return Message.from_proto(resp.message) if resp.HasField("message") else None

    def dead_letters(self, owner_id: str, *, page_size: int = 0) -> AsyncIterator[Dict[str, Any]]:
        """The owner's dead letters: ``{message, recipient, reason, dead_at}`` dicts."""

        async def fetch(token: str) -> Tuple[List[Dict[str, Any]], str]:
            req = ex.ListDeadLettersRequest(owner_id=str(owner_id), page_size=page_size, page_token=token)
            resp = await self.client._x("ListDeadLetters", req)
            return [to_py(d) for d in resp.dead_letters], resp.next_page_token

        return self.client._pages(fetch)

    async def subscribe_inbox(self, owner_id: str, sender: Optional[str] = None, *, heartbeats: bool = False) -> AsyncIterator[Union[Message, InboxHeartbeat]]:
        """The messages delivered to the owner's inbox from the stream's first frame on; with
        ``heartbeats=True`` the :class:`InboxHeartbeat` frames too (the first says the stream is
        live, which a caller that collects right after subscribing needs to know). Closing
        the iterator cancels the stream; a broken stream raises (inbox messages stay in the inbox
        until popped, so re-read with :meth:`receive` and subscribe again)."""
        req = ex.SubscribeInboxRequest(owner_id=str(owner_id))
        if sender is not None:
            req.sender = str(sender)
        rq.check_open(self.client)
        call = self.client.exchange_stub.SubscribeInbox(req, metadata=self.client._metadata)
        self.client._streams.add(call)
        try:
            async for frame in call:
                which = frame.WhichOneof("event")
                if which == "message":
                    yield Message.from_proto(frame.message)
                elif which == "heartbeat" and heartbeats:
                    yield InboxHeartbeat(frame.heartbeat.time.ToDatetime())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        except asyncio.CancelledError as e:
            raise self.client._stream_cancelled(e) from None
        finally:
            call.cancel()
            self.client._streams.discard(call)
