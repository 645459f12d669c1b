"""historyd: a Python client of historyd, the LionAGI message-protocol service.

Synchronous::

    from historyd import Client
    with Client("127.0.0.1:50051", tls=False) as client:
        branch = client.create_branch(system="You are terse.", user="alice")
        branch.add_instruction("What is 30 + 12?", context={"a": 30, "b": 12})

asyncio: :class:`historyd.aio.AsyncClient`, the same API with ``await`` and ``async for``.
The generated stubs are ``historyd.v1.*_pb2`` and ``*_pb2_grpc`` (from proto/ of the repository).
"""

from ._convert import UNSET, BranchInfo, Commit, Event, Heartbeat, InboxHeartbeat, Message, Participant, Unset
from ._requests import DEFAULT_RETRY, DEFAULT_WATCH_RETRY, TLS, Keepalive, RetryPolicy
from .aio import AsyncBranch, AsyncClient, AsyncExchange
from .client import Branch, Client, Exchange
from .errors import (
    HistorydError,
    BranchNotFoundError,
    BranchAlreadyExistsError,
    MessageNotFoundError,
    MessageAlreadyExistsError,
    OwnerNotRegisteredError,
    OwnerAlreadyRegisteredError,
    LionClassMismatchError,
    UnknownLionClassError,
    InvalidFieldError,
    InvalidProgressionError,
    MessageKindChangeError,
    NotAnActionRequestError,
    HistoryCompactedError,
    SubscriberTooSlowError,
    SequenceMismatchError,
    MemoryBudgetExceededError,
    TooManyStreamsError,
    OutboxFullError,
    BranchDeletedError,
    UnauthenticatedError,
    InternalError,
    ServerShuttingDownError,
    MalformedRequestError,
    OwnerHoldsTooMuchError,
    FrameTooLargeError,
    from_rpc_error,
)

from .appender import Appender, AppendFuture, AppendStreamBrokenError

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Branch",
    "Exchange",
    "AsyncClient",
    "AsyncBranch",
    "AsyncExchange",
    "Message",
    "BranchInfo",
    "Commit",
    "Event",
    "Heartbeat",
    "InboxHeartbeat",
    "Participant",
    "UNSET",
    "Unset",
    "TLS",
    "Keepalive",
    "RetryPolicy",
    "DEFAULT_RETRY",
    "DEFAULT_WATCH_RETRY",
    "HistorydError",
    "BranchNotFoundError",
    "BranchAlreadyExistsError",
    "MessageNotFoundError",
    "MessageAlreadyExistsError",
    "OwnerNotRegisteredError",
    "OwnerAlreadyRegisteredError",
    "LionClassMismatchError",
    "UnknownLionClassError",
    "InvalidFieldError",
    "InvalidProgressionError",
    "MessageKindChangeError",
    "NotAnActionRequestError",
    "HistoryCompactedError",
    "SubscriberTooSlowError",
    "SequenceMismatchError",
    "MemoryBudgetExceededError",
    "TooManyStreamsError",
    "OutboxFullError",
    "BranchDeletedError",
    "UnauthenticatedError",
    "InternalError",
    "ServerShuttingDownError",
    "MalformedRequestError",
    "OwnerHoldsTooMuchError",
    "FrameTooLargeError",
    "from_rpc_error",
    "Appender",
    "AppendFuture",
    "AppendStreamBrokenError",
]
