"""Typed exceptions for historyd's errors (docs/design.md#errors).

Every non-OK status historyd sends carries a ``google.rpc.ErrorInfo`` (domain ``"historyd"``)
whose ``reason`` names the cause (proto/historyd/v1/error_reason.proto). The client raises the
exception class of that reason, carrying the ErrorInfo's ``metadata`` (lowerCamel keys such as
``branchId``, ``headSequence``), the gRPC status code, the message text and the field violations of
a ``google.rpc.BadRequest``. Switch on the class (or ``reason``), never on the message text. A
reason this client does not know yet (a newer server) raises :class:`HistorydError` itself with
``reason`` set; an error without ErrorInfo (a broken connection) has ``reason`` ``None``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type

import grpc

from ._rpc import error_details_pb2, status_pb2
from .v1 import error_reason_pb2

__all__ = [
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
    "from_item_status",
]

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


class HistorydError(Exception):
    """A failed historyd call.

    Attributes:
        code: the gRPC status code.
        reason: the ErrorInfo reason (``"ERROR_REASON_BRANCH_NOT_FOUND"``...), or None without one.
        metadata: the ErrorInfo metadata (string values, lowerCamel keys).
        message: the status message (for people; do not parse it).
        field_violations: ``(field, description)`` pairs of a google.rpc.BadRequest.
    """

    #: The reason a subclass stands for.
    REASON: Optional[str] = None

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
        field_violations: Optional[List[tuple]] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason if reason is not None else self.REASON
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.message = message
        self.field_violations: List[tuple] = list(field_violations or [])

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        meta = f" {self.metadata}" if self.metadata else ""
        return f"{self.code.name}{reason}: {self.message}{meta}"

    def meta_int(self, key: str) -> Optional[int]:
        """A metadata value as an int (sequences are decimal text), or None when absent."""
        v = self.metadata.get(key)
        return int(v) if v is not None and v.isdigit() else None



# One class per ErrorReason (error_reason.proto). Written out rather than made from the enum, so
# that they can be imported and type-checked; _BY_REASON below also covers reasons added later.
class BranchNotFoundError(HistorydError):
    """NOT_FOUND: the branch does not exist. Metadata: branchId."""

    REASON = "ERROR_REASON_BRANCH_NOT_FOUND"


class BranchAlreadyExistsError(HistorydError):
    """ALREADY_EXISTS: a create, fork or import named an existing branch id. Metadata: branchId."""

    REASON = "ERROR_REASON_BRANCH_ALREADY_EXISTS"


class MessageNotFoundError(HistorydError):
    """NOT_FOUND: the message is not in the branch. Metadata: branchId, messageId."""

    REASON = "ERROR_REASON_MESSAGE_NOT_FOUND"


class MessageAlreadyExistsError(HistorydError):
    """ALREADY_EXISTS: a message id is used where a new one is required. Metadata: messageId."""

    REASON = "ERROR_REASON_MESSAGE_ALREADY_EXISTS"


class OwnerNotRegisteredError(HistorydError):
    """FAILED_PRECONDITION: the Exchange owner is not registered. Metadata: ownerId."""

    REASON = "ERROR_REASON_OWNER_NOT_REGISTERED"


class OwnerAlreadyRegisteredError(HistorydError):
    """ALREADY_EXISTS: the Exchange owner is registered already. Metadata: ownerId."""

    REASON = "ERROR_REASON_OWNER_ALREADY_REGISTERED"


class LionClassMismatchError(HistorydError):
    """INVALID_ARGUMENT: metadata.lion_class names another class than the content kind's."""

    REASON = "ERROR_REASON_LION_CLASS_MISMATCH"


class UnknownLionClassError(HistorydError):
    """INVALID_ARGUMENT: a lion_class is not on the accepted list."""

    REASON = "ERROR_REASON_UNKNOWN_LION_CLASS"


class InvalidFieldError(HistorydError):
    """INVALID_ARGUMENT: a malformed field; metadata ``field`` and ``field_violations`` name it."""

    REASON = "ERROR_REASON_INVALID_FIELD"


class InvalidProgressionError(HistorydError):
    """INVALID_ARGUMENT: a progression is not valid for the branch."""

    REASON = "ERROR_REASON_INVALID_PROGRESSION"


class MessageKindChangeError(HistorydError):
    """INVALID_ARGUMENT: an update would change a message's kind. Metadata: messageId."""

    REASON = "ERROR_REASON_MESSAGE_KIND_CHANGE"


class NotAnActionRequestError(HistorydError):
    """INVALID_ARGUMENT: the answered message is not an ActionRequest. Metadata: messageId."""

    REASON = "ERROR_REASON_NOT_AN_ACTION_REQUEST"


class HistoryCompactedError(HistorydError):
    """OUT_OF_RANGE: a watch cursor is no longer retained, or belongs to another incarnation of the
    branch. Re-read the branch and watch from its head. Metadata: oldestSequence, headSequence."""

    REASON = "ERROR_REASON_HISTORY_COMPACTED"


class SubscriberTooSlowError(HistorydError):
    """RESOURCE_EXHAUSTED: a stream fell behind and was ended (watch() resumes by itself).
    Metadata: lastSequence."""

    REASON = "ERROR_REASON_SUBSCRIBER_TOO_SLOW"


class SequenceMismatchError(HistorydError):
    """FAILED_PRECONDITION: expected_head_sequence differs from the head. Metadata: headSequence."""

    REASON = "ERROR_REASON_SEQUENCE_MISMATCH"


class MemoryBudgetExceededError(HistorydError):
    """RESOURCE_EXHAUSTED: the write would exceed the server's memory budget."""

    REASON = "ERROR_REASON_MEMORY_BUDGET_EXCEEDED"


class TooManyStreamsError(HistorydError):
    """RESOURCE_EXHAUSTED: the server's limit of open streams is reached."""

    REASON = "ERROR_REASON_TOO_MANY_STREAMS"


class OutboxFullError(HistorydError):
    """RESOURCE_EXHAUSTED: the sender's outbox is full; collect first. Metadata: ownerId."""

    REASON = "ERROR_REASON_OUTBOX_FULL"


class BranchDeletedError(HistorydError):
    """NOT_FOUND: the branch was deleted while the call or watch was in progress.
    Metadata: branchId, lastSequence."""

    REASON = "ERROR_REASON_BRANCH_DELETED"


class UnauthenticatedError(HistorydError):
    """UNAUTHENTICATED: no valid token (Client(token=...))."""

    REASON = "ERROR_REASON_UNAUTHENTICATED"


class InternalError(HistorydError):
    """INTERNAL: an unexpected server error."""

    REASON = "ERROR_REASON_INTERNAL"


class ServerShuttingDownError(HistorydError):
    """UNAVAILABLE: the server is shutting down and ended a stream (watch() resumes by itself)."""

    REASON = "ERROR_REASON_SERVER_SHUTTING_DOWN"


class MalformedRequestError(HistorydError):
    """INVALID_ARGUMENT: the request did not decode."""

    REASON = "ERROR_REASON_MALFORMED_REQUEST"


class OwnerHoldsTooMuchError(HistorydError):
    """FAILED_PRECONDITION: Unregister refused, what the owner holds does not fit one response."""

    REASON = "ERROR_REASON_OWNER_HOLDS_TOO_MUCH"


class FrameTooLargeError(HistorydError):
    """RESOURCE_EXHAUSTED: a watch commit does not fit one frame. Metadata: commitLastSequence."""

    REASON = "ERROR_REASON_FRAME_TOO_LARGE"


_BY_REASON: Dict[str, Type[HistorydError]] = {
    c.REASON: c for c in HistorydError.__subclasses__() if c.REASON  # type: ignore[misc]
}


def _class_name(reason: str) -> str:
    """ERROR_REASON_BRANCH_NOT_FOUND -> BranchNotFoundError."""
    words = reason[len("ERROR_REASON_") :].split("_")
    return "".join(w.capitalize() for w in words) + "Error"


# Reasons the stubs know and the classes above do not (added to error_reason.proto since, and
# regenerated with make gen-clients) get a class too, made here: importable from historyd.errors
# by the same naming rule, so a new reason is typed without a change to this file.
for _value in error_reason_pb2.ErrorReason.DESCRIPTOR.values:
    if _value.number != 0 and _value.name not in _BY_REASON:
        _cls = type(
            _class_name(_value.name),
            (HistorydError,),
            {"REASON": _value.name, "__doc__": f"The error of reason {_value.name} (error_reason.proto).", "__module__": __name__},
        )
        globals()[_cls.__name__] = _cls
        __all__.append(_cls.__name__)
        _BY_REASON[_value.name] = _cls


def _details(trailing: Any) -> Optional[bytes]:
    for key, value in trailing or ():
        if key == _DETAILS_KEY:
            return value
    return None


def from_rpc_error(err: grpc.RpcError) -> HistorydError:
    """The typed exception of a failed call (sync or grpc.aio), decoded from its
    grpc-status-details-bin trailer."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    try:
        raw = _details(err.trailing_metadata()) if hasattr(err, "trailing_metadata") else None
    except Exception:  # a call that never started has no trailers
        raw = None
    return _typed(code, message or "", status_pb2.Status.FromString(raw) if raw else None)


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def from_item_status(item_status: Any) -> HistorydError:
    """The typed exception of a failed AppendMessages item: its ItemStatus has google.rpc.Status's
    fields and numbers (history_service.proto), so its bytes decode as one."""
    st = status_pb2.Status.FromString(item_status.SerializeToString())
    return _typed(_CODES.get(st.code, grpc.StatusCode.UNKNOWN), st.message, st)


def _typed(code: Any, message: str, st: Any) -> HistorydError:
    reason = None
    metadata: Dict[str, str] = {}
    violations: List[tuple] = []
    if st is not None:
        for any_ in st.details:
            if any_.type_url == _ERROR_INFO:
                info = error_details_pb2.ErrorInfo.FromString(any_.value)
                reason, metadata = info.reason, dict(info.metadata)
            elif any_.type_url == _BAD_REQUEST:
                br = error_details_pb2.BadRequest.FromString(any_.value)
                violations = [(v.field, v.description) for v in br.field_violations]
    cls = _BY_REASON.get(reason or "", HistorydError)
    return cls(message, code=code, reason=reason, metadata=metadata, field_violations=violations)
