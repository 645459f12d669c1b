"""What the sync and asyncio clients share: options, the retry rule and the request builders.

Nothing here does I/O. Request builders take the API's Python values and return the wire request;
the two clients differ only in how they send it.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
from google.protobuf.message import Message as _PbMessage

from ._convert import UNSET, Message, Participant, dumps, enum_number, set_participant, struct_of
from .errors import HistorydError
from .v1 import envelope_pb2, exchange_service_pb2 as ex, history_service_pb2 as hs


#: The longest wait handed to grpc or to threading, in seconds (about 31 years): any longer
#: timeout, float("inf") included, waits this long instead. grpc makes a call's timeout an absolute
#: deadline, which past its clock's range (a timeout of about 7e9 s) has already passed, and fails
#: the call DEADLINE_EXCEEDED at once; threading raises OverflowError past threading.TIMEOUT_MAX
#: (292 years), which killed the appender's watchdog thread (review of the clients 2, fault 6).
MAX_WAIT = 1e9


def bounded_wait(seconds: Optional[float]) -> Optional[float]:
    """seconds, at most MAX_WAIT (float("inf") included); None stays None."""
    return None if seconds is None else min(seconds, MAX_WAIT)


#: The longest multiplier of a RetryPolicy: more is no backoff, and a float power of it overflows
#: soon enough as it is.
MAX_MULTIPLIER = 1e9
#: Keepalive's range, in seconds: gRPC takes its times as a 32-bit count of milliseconds.
KEEPALIVE_MIN, KEEPALIVE_MAX = 0.001, (2**31 - 1) / 1000


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def check_range(what: str, value: Any, lo: float, hi: float, unit: str = "a number") -> None:
    """Raises ValueError naming ``what`` and the range [lo, hi] unless value is in it (NaN is in
    none); TypeError, with the same words, for what is not a number."""
    text = f"{what} must be {unit} in [{_fmt(lo)}, {_fmt(hi)}], not {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(text)
    if not lo <= value <= hi:
        raise ValueError(text)


def check_timeout(what: str, value: Any) -> None:
    """Raises ValueError unless value is a timeout: None (none), or seconds in [0, inf] (any
    length is a deadline: see MAX_WAIT). A negative one failed every call at once, and NaN
    stopped the sync appender's watchdog thread."""
    if value is not None:
        check_range(what, value, 0.0, math.inf, "None or a number of seconds")


@dataclass(frozen=True)
class RetryPolicy:
    """How unary calls are retried (as the Go client's RetryPolicy): ``max_attempts`` attempts in
    all; pauses from ``initial_backoff`` seconds growing by ``multiplier`` up to ``max_backoff``,
    each jittered by ±``jitter`` of itself. Only UNAVAILABLE is retried, and only for calls that
    are safe to repeat: reads, and mutations with a request id (the client makes one when the
    caller gives none, and every attempt carries it, so the server applies the call once).
    ``RetryPolicy(max_attempts=1)`` turns retries off.

    The ranges, checked here (ValueError): ``initial_backoff`` and ``max_backoff`` in [0, 1e9]
    seconds (``max_backoff`` 0: no bound short of 1e9 s), ``multiplier`` in [1, 1e9], ``jitter``
    in [0, 1]. Out of them, a pause raised OverflowError or ValueError from time.sleep when it
    came."""

    max_attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        for name in ("initial_backoff", "max_backoff"):
            check_range(f"RetryPolicy.{name}", getattr(self, name), 0.0, MAX_WAIT, "a number of seconds")
        check_range("RetryPolicy.multiplier", self.multiplier, 1.0, MAX_MULTIPLIER)
        check_range("RetryPolicy.jitter", self.jitter, 0.0, 1.0)

    def backoff(self, attempt: int) -> float:
        """The pause after the attempt-th failed attempt (from 1), in seconds: at most twice
        max_backoff (its jitter), or twice MAX_WAIT when max_backoff is 0."""
        try:
            d = self.initial_backoff * self.multiplier ** (attempt - 1)
        except OverflowError:  # a float power past its range: past any bound below
            d = math.inf if self.initial_backoff > 0 else 0.0
        d = min(d, self.max_backoff if self.max_backoff > 0 else MAX_WAIT)
        return max(0.0, d * (1 + self.jitter * (2 * random.random() - 1)))


#: The unary calls' default policy: 5 attempts, 50 ms doubling to 2 s, ±20%.
DEFAULT_RETRY = RetryPolicy()
#: watch()'s reconnections: at most 10 in a row that deliver nothing, 100 ms doubling to 2 s.
DEFAULT_WATCH_RETRY = RetryPolicy(max_attempts=10, initial_backoff=0.1)


@dataclass(frozen=True)
class TLS:
    """TLS settings: ``root_certificates`` (PEM bytes; None: the system roots), a client
    certificate for mutual TLS (``certificate_chain`` and ``private_key``, PEM bytes), and
    ``server_name`` to verify instead of the address's host."""

    root_certificates: Optional[bytes] = None
    certificate_chain: Optional[bytes] = None
    private_key: Optional[bytes] = None
    server_name: Optional[str] = None


@dataclass(frozen=True)
class Keepalive:
    """HTTP/2 keepalive pings (``Client(keepalive=...)``): while a call is open, the client pings
    a connection that has been quiet for ``time`` seconds and drops it when the ping is not
    answered within ``timeout``; the calls on it fail UNAVAILABLE (a watch resumes, unary calls
    are retried by their policy). Without it a connection whose peer vanished (a host gone, a
    NAT entry dropped) keeps a watch or an appender waiting until the OS gives up on the socket,
    which can take hours.

    historyd disconnects a client that pings more often than its ``--keepalive-min-time`` (10 s by
    default) with GOAWAY ``too_many_pings``, and by default counts any ping on a connection with
    no call open as one too many (``--keepalive-permit-without-stream=false``): keep ``time`` at
    or above the server's min time, and ``permit_without_calls`` False unless the server permits
    it. The defaults (30 s, 20 s, False) suit a server with its defaults.

    ``time`` and ``timeout`` are checked here (ValueError): seconds in [0.001, 2147483.647], as
    gRPC takes them in 32-bit milliseconds (out of it, the client raised OverflowError)."""

    time: float = 30.0
    timeout: float = 20.0
    permit_without_calls: bool = False

    def __post_init__(self) -> None:
        for name in ("time", "timeout"):
            check_range(f"Keepalive.{name}", getattr(self, name), KEEPALIVE_MIN, KEEPALIVE_MAX, "a number of seconds")

    def channel_options(self) -> List[Tuple[str, int]]:
        """The grpcio channel options that ask for these pings."""
        ms = max(1, int(self.time * 1000))
        return [
            ("grpc.keepalive_time_ms", ms),
            ("grpc.keepalive_timeout_ms", max(1, int(self.timeout * 1000))),
            ("grpc.keepalive_permit_without_calls", int(self.permit_without_calls)),
            # gRPC core otherwise sends at most 2 pings, 5 minutes apart at best, while the client
            # sends no data: a watch only receives, so its keepalive would stop after two pings.
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.min_time_between_pings_ms", ms),
        ]


# Calls that change nothing: always safe to retry (the Go client's readOnly list).
READ_ONLY = frozenset(
    {
        "GetBranch",
        "ListBranches",
        "GetMessage",
        "ListMessages",
        "GetLastMessage",
        "ToChatMessages",
        "ExportBranch",
        "ListOwners",
        "Receive",
        "ListDeadLetters",
    }
)


def channel_args(
    addr: str,
    tls: Union[bool, TLS],
    options: Optional[Sequence[Tuple[str, Any]]],
    keepalive: Union[bool, Keepalive, None] = None,
) -> Tuple[Optional[grpc.ChannelCredentials], List[Tuple[str, Any]]]:
    """The credentials (None: plaintext) and channel options of a client: ``options`` first, then
    the keepalive options that ``options`` does not set itself."""
    opts = list(options or [])
    if keepalive:
        given = {k for k, _ in opts}
        ka = keepalive if isinstance(keepalive, Keepalive) else Keepalive()
        opts += [(k, v) for k, v in ka.channel_options() if k not in given]
    if tls is False:
        return None, opts
    cfg = tls if isinstance(tls, TLS) else TLS()
    creds = grpc.ssl_channel_credentials(cfg.root_certificates, cfg.private_key, cfg.certificate_chain)
    if cfg.server_name:
        opts.append(("grpc.ssl_target_name_override", cfg.server_name))
    return creds, opts


def call_metadata(token: Optional[str]) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The metadata every call sends: the bearer token, when there is one."""
    return (("authorization", f"Bearer {token}"),) if token else None


def prepare_retry(method: str, req: _PbMessage) -> Tuple[_PbMessage, bool]:
    """Whether method may be retried, and the request each attempt sends: a mutation with a
    ``request_id`` field gets a UUID there when empty (in a copy), so every attempt carries the
    same one. Generic over the descriptors, so RPCs added later are covered."""
    if method in READ_ONLY:
        return req, True
    fd = req.DESCRIPTOR.fields_by_name.get("request_id")
    if fd is None or fd.type != fd.TYPE_STRING or fd.label == fd.LABEL_REPEATED:
        return req, False
    if getattr(req, "request_id"):
        return req, True
    c = type(req)()
    c.CopyFrom(req)
    c.request_id = str(uuid.uuid4())
    return c, True


def closed_error() -> HistorydError:
    """The error of a call on a client that close() closed, in flight then or made after: grpc's
    own were ValueError or CANCELLED 'Channel closed!' (sync), and asyncio.CancelledError or
    UsageError (grpc.aio), none of them the documented HistorydError."""
    return HistorydError("the client was closed", code=grpc.StatusCode.CANCELLED)


def check_open(client: Any) -> None:
    """Raises closed_error() once the client (sync or asyncio) was closed: nothing is sent then."""
    if getattr(client, "_closed", False):
        raise closed_error()


_T = TypeVar("_T")


def open_call(client: Any, make: Callable[[], _T]) -> _T:
    """make() (a gRPC call on the sync client's channel), once check_open passed. A close() on
    another thread between the check and the call makes grpc raise ValueError ('Cannot invoke RPC
    on closed channel!'), which is closed_error() here, as for a call made after close()."""
    check_open(client)
    try:
        return make()
    except ValueError as e:
        if getattr(client, "_closed", False):
            raise closed_error() from e
        raise


def retryable_code(code: Optional[grpc.StatusCode]) -> bool:
    """Whether a failed attempt is worth another: the connection broke or the server is going."""
    return code == grpc.StatusCode.UNAVAILABLE


def _ids(ids: Optional[Iterable[Union[str, Message]]]) -> Optional[hs.MessageIds]:
    if ids is None:
        return None
    return hs.MessageIds(ids=[i.id if isinstance(i, Message) else str(i) for i in ids])


def _base(req: _PbMessage, request_id: Optional[str], expected_head_sequence: Optional[int]) -> None:
    if request_id:
        req.request_id = request_id
    if expected_head_sequence is not None:
        req.expected_head_sequence = expected_head_sequence


def _text_or_json(msg: _PbMessage, text_field: str, value: Any) -> None:
    """A field that is text or any JSON: a str goes to text_field, anything else to its _json twin."""
    if value is None:
        return
    if isinstance(value, str):
        setattr(msg, text_field, value)
    else:
        setattr(msg, text_field + "_json", dumps(value))


def context_items(context: Any) -> List[str]:
    """LionAGI's context: a list extends the prompt context item by item, anything else is one item."""
    if context is None:
        return []
    items = context if isinstance(context, (list, tuple)) else [context]
    return [dumps(i) for i in items]


def create_branch(
    *,
    system: Optional[str],
    system_datetime: Union[bool, str, None],
    system_sender: Optional[str],
    user: Optional[str],
    name: Optional[str],
    branch_id: Optional[str],
    metadata: Optional[Dict[str, Any]],
    request_id: Optional[str],
) -> hs.CreateBranchRequest:
    req = hs.CreateBranchRequest(branch_id=str(branch_id or ""), request_id=request_id or "")
    if name is not None:
        req.name = name
    if user is not None:
        req.user = user
    if system_sender is not None:
        req.system_sender = system_sender
    if metadata is not None:
        req.metadata.CopyFrom(struct_of(metadata))
    if system is not None or system_datetime:
        req.system.CopyFrom(system_input(system, system_datetime))
    return req


def system_input(system: Optional[str], system_datetime: Union[bool, str, None]) -> hs.SystemInput:
    si = hs.SystemInput()
    if system is not None:
        si.system_message = system
    if system_datetime is True:
        si.datetime_now = True
    elif isinstance(system_datetime, str):
        si.datetime_text = system_datetime
    return si


def add_message(
    branch_id: str,
    *,
    sender: Participant,
    recipient: Participant,
    metadata: Optional[Dict[str, Any]],
    request_id: Optional[str],
    expected_head_sequence: Optional[int],
    include_rendered: bool,
    target_id: Optional[str] = None,
) -> hs.AddMessageRequest:
    req = hs.AddMessageRequest(branch_id=branch_id, include_rendered=include_rendered, target_id=target_id or "")
    _base(req, request_id, expected_head_sequence)
    set_participant(req, "sender", sender)
    set_participant(req, "recipient", recipient)
    if metadata is not None:
        req.metadata.CopyFrom(struct_of(metadata))
    return req


def instruction_input(
    instruction: Any,
    *,
    context: Any,
    guidance: Any,
    handle_context: Optional[str],
    plain_content: Optional[str],
    tool_schemas: Optional[Sequence[Any]],
    response_format: Optional[Dict[str, Any]],
    images: Optional[Sequence[str]],
    image_detail: Optional[str],
) -> hs.InstructionInput:
    ii = hs.InstructionInput()
    _text_or_json(ii, "instruction", instruction)
    _text_or_json(ii, "guidance", guidance)
    ii.context_json.extend(context_items(context))
    if handle_context is not None:
        ii.handle_context = enum_number(hs.ContextMode, handle_context)
    if plain_content is not None:
        ii.plain_content = plain_content
    if tool_schemas is not None:
        schemas = tool_schemas if isinstance(tool_schemas, (list, tuple)) else [tool_schemas]
        ii.tool_schemas_json.extend(dumps(s) for s in schemas)
    if response_format is not None:
        ii.response_format_json = dumps(response_format)
    if images:
        ii.images.extend(images)
    if image_detail is not None:
        ii.image_detail = image_detail
    return ii


def assistant_input(response: Any) -> hs.AssistantResponseInput:
    """A str is the display text; a dict (or list) is a raw provider response, parsed by the
    server as LionAGI's from_response does, the raw value kept in metadata.model_response."""
    ai = hs.AssistantResponseInput()
    if isinstance(response, str):
        ai.text = response
    else:
        ai.raw_response_json = dumps(response)
    return ai


def action_request_input(function: str, arguments: Optional[Dict[str, Any]]) -> hs.ActionRequestInput:
    return hs.ActionRequestInput(function=function, arguments_json=dumps(arguments) if arguments is not None else "")


def create_action_response(
    branch_id: str,
    request: Union[str, Message],
    output: Any,
    *,
    error: Optional[str],
    sender: Participant,
    recipient: Participant,
    request_id: Optional[str],
    expected_head_sequence: Optional[int],
    include_rendered: bool,
) -> hs.CreateActionResponseRequest:
    req = hs.CreateActionResponseRequest(
        branch_id=branch_id,
        action_request_id=request.id if isinstance(request, Message) else str(request),
        output_json=dumps(output),
        include_rendered=include_rendered,
    )
    _base(req, request_id, expected_head_sequence)
    if error is not None:
        req.error = error
    set_participant(req, "sender", sender)
    set_participant(req, "recipient", recipient)
    return req


def to_chat_messages(branch_id: str, order: Optional[Iterable[Union[str, Message]]], selected: bool, format: Optional[str]) -> hs.ToChatMessagesRequest:
    req = hs.ToChatMessagesRequest(branch_id=branch_id, selected=selected)
    o = _ids(order)
    if o is not None:
        req.order.CopyFrom(o)
    if format is not None:
        fd = req.DESCRIPTOR.fields_by_name.get("format")
        if fd is None or fd.enum_type is None:
            if format.lower() == "lionagi":
                return req
            raise ValueError(
                f"format={format!r}: these stubs have no ToChatMessagesRequest.format; regenerate them (make gen-clients)"
            )
        setattr(req, "format", _enum_by_short(fd.enum_type, format))
    return req


def _enum_by_short(enum_desc: Any, value: Union[str, int]) -> int:
    if isinstance(value, int):
        return value
    for ev in enum_desc.values:
        if ev.name == value or ev.name.lower().endswith("_" + value.lower()):
            return ev.number
    raise ValueError(f"unknown {enum_desc.name} {value!r}")


def chat_messages(resp: hs.ToChatMessagesResponse) -> Any:
    """The projection as Python values: a list of ``{"role", "content"}`` dicts (content: text,
    parts, the JSON value of a rendering that is not text, or None where rendering failed), or, for a format whose response carries JSON text
    (a `_json` field set), that JSON decoded."""
    for fd, value in resp.ListFields():
        if fd.name.endswith("_json") and isinstance(value, str) and value:
            return json.loads(value)
    out = []
    for cm in resp.messages:
        which = cm.WhichOneof("content")
        if which == "text":
            content: Any = cm.text
        elif which == "parts":
            from google.protobuf import json_format

            content = [json_format.MessageToDict(p, preserving_proto_field_name=True) for p in cm.parts.parts]
        elif which == "content_json":
            content = json.loads(cm.content_json)
        else:
            content = None
        out.append({"role": cm.role, "content": content})
    return out


def import_data(data: Union[str, bytes, Dict[str, Any], List[Any]]) -> str:
    """LionAGI JSON text from a dict, a list or text."""
    if isinstance(data, bytes):
        return data.decode("utf-8")
    if isinstance(data, str):
        return data
    return dumps(data)


def send(sender: str, recipient: Participant, content: Any, channel: Optional[str], request_id: Optional[str]) -> ex.SendRequest:
    req = ex.SendRequest(sender=str(sender), content_json=dumps(content), request_id=request_id or "")
    set_participant(req, "recipient", recipient)
    if channel is not None:
        req.channel = channel
    return req


def view_number(view: Union[str, int, None]) -> int:
    return enum_number(hs.MessageView, view)


def mode_number(mode: Union[str, int, None]) -> int:
    return enum_number(hs.SerializationMode, mode)


def kinds_numbers(kinds: Optional[Iterable[Union[str, int]]]) -> List[int]:
    return [enum_number(hs.EventKind, k) for k in (kinds or [])]


_ = (UNSET, envelope_pb2)  # re-exported names used by type hints in the clients
