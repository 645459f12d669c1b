"""Conversions between Python values and historyd's wire model (docs/design.md#wire-model).

Any-JSON fields travel as JSON text (their names end in ``_json``); the client encodes Python values
with :func:`json.dumps` (insertion order kept, ints and floats distinct, as the rendered prompt
needs) and decodes them with :func:`json.loads`. Participants (sender, recipient) have three states:
a string, ``None`` (JSON null: LionAGI's explicit None, a broadcast as a recipient) and
:data:`UNSET` (absent: LionAGI's ``"unset"``). Output conversion is generic over the descriptors,
so a field added to the protos later shows up without a change here.
"""

from __future__ import annotations

import enum
import json
import uuid
import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from google.protobuf import json_format, struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as _PbMessage

from .v1 import envelope_pb2, history_service_pb2

__all__ = ["UNSET", "Unset", "Participant", "Message", "BranchInfo", "Commit", "Event", "Heartbeat", "InboxHeartbeat"]


class Unset(enum.Enum):
    """The type of :data:`UNSET`, the absent participant (LionAGI's ``"unset"``)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: An absent sender or recipient: never given (LionAGI's ``MessageRole.UNSET``). As a recipient of
#: an Exchange message it is undeliverable; ``None`` is a broadcast.
UNSET = Unset.UNSET

#: A sender or recipient: a string (a role name, an id, any text), ``None`` or :data:`UNSET`.
Participant = Union[str, uuid.UUID, None, Unset]


def dumps(value: Any) -> str:
    """JSON text of a Python value (key order kept; non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False)


def participant_value(p: Participant) -> Optional[struct_pb2.Value]:
    """The google.protobuf.Value of a participant: None for :data:`UNSET` (leave the field unset)."""
    if p is UNSET:
        return None
    if p is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if isinstance(p, uuid.UUID):
        return struct_pb2.Value(string_value=str(p))
    if isinstance(p, str):
        return struct_pb2.Value(string_value=p)
    raise TypeError(f"a participant is a str, a UUID, None or UNSET, not {type(p).__name__}")


def set_participant(msg: _PbMessage, name: str, p: Participant) -> None:
    """Sets msg.<name> to the participant p (leaves it unset for UNSET)."""
    v = participant_value(p)
    if v is not None:
        getattr(msg, name).CopyFrom(v)


def participant_of(msg: _PbMessage, name: str) -> Participant:
    """The participant in msg.<name>: UNSET when absent or ``"unset"`` (LionAGI's
    MessageRole.UNSET, which both mean), None for null, else the string."""
    if not msg.HasField(name):
        return UNSET
    v: struct_pb2.Value = getattr(msg, name)
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return UNSET if v.string_value == UNSET.value else v.string_value
    if kind in (None, "null_value"):
        return None
    return json_format.MessageToDict(v)  # not sent by historyd; kept rather than lost


def struct_of(d: Optional[Dict[str, Any]]) -> Optional[struct_pb2.Struct]:
    """A google.protobuf.Struct from a dict (None stays None). Numbers become doubles on the wire:
    use JSON-text fields where the int/float distinction matters."""
    if d is None:
        return None
    s = struct_pb2.Struct()
    s.update(d)
    return s


def _enum_short(fd: FieldDescriptor, number: int) -> Union[str, int]:
    """An enum value's name without the enum's prefix, lowercase (MESSAGE_ROLE_USER -> "user")."""
    ev = fd.enum_type.values_by_number.get(number)
    if ev is None:
        return number
    prefix = _enum_prefix(fd.enum_type.name)
    name = ev.name[len(prefix):] if ev.name.startswith(prefix) else ev.name
    return name.lower()


def _enum_prefix(enum_name: str) -> str:
    out = []
    for i, ch in enumerate(enum_name):
        if ch.isupper() and i > 0:
            out.append("_")
        out.append(ch.upper())
    return "".join(out) + "_"


def enum_number(enum_type: Any, value: Union[str, int, None]) -> int:
    """The number of an enum value given as its number, its full name or its short lowercase name
    ("instructions" for MESSAGE_VIEW_INSTRUCTIONS)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    desc = enum_type.DESCRIPTOR
    prefix = _enum_prefix(desc.name)
    for name in (value, prefix + value.upper()):
        ev = desc.values_by_name.get(name)
        if ev is not None:
            return ev.number
    names = ", ".join(v.name[len(prefix):].lower() for v in desc.values if v.number != 0)
    raise ValueError(f"unknown {desc.name} {value!r}: one of {names}")


def to_py(msg: _PbMessage) -> Dict[str, Any]:
    """A dict of the fields set in msg, generically: `_json` fields decoded (the suffix dropped),
    Struct as dict, Value participants as str/None, enums as short lowercase names, Timestamps as
    datetimes, historyd Messages as :class:`Message`, other messages recursively."""
    out: Dict[str, Any] = {}
    for fd, value in msg.ListFields():
        name = fd.name
        if fd.label == FieldDescriptor.LABEL_REPEATED:
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                out[name] = dict(value)
                continue
            out[_strip_json(name)] = [_field_value(fd, v) for v in value]
        else:
            if fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Value":
                out[name] = participant_of(msg, name)
                continue
            out[_strip_json(name)] = _field_value(fd, value)
    return out


def _strip_json(name: str) -> str:
    return name[: -len("_json")] if name.endswith("_json") else name


def _field_value(fd: FieldDescriptor, value: Any) -> Any:
    if fd.name.endswith("_json") and isinstance(value, str):
        return json.loads(value) if value else None
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return _enum_short(fd, value)
    if fd.message_type is None:
        return value
    full = fd.message_type.full_name
    if full == "historyd.v1.Message":
        return Message.from_proto(value)
    if full in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"):
        return json_format.MessageToDict(value)
    if full == "google.protobuf.Timestamp":
        return value.ToDatetime()
    if full == "historyd.v1.MessageIds":
        return list(value.ids)
    if full == "historyd.v1.Branch":
        return BranchInfo.from_proto(value)
    return to_py(value)


def rendered_of(r: envelope_pb2.Rendered) -> Any:
    """A rendering as text, a list of content parts ({type, text} / {type, image_url}), or, for a
    rendering that is not text (Rendered.json), its JSON value; None where rendering failed."""
    which = r.WhichOneof("value")
    if which == "text":
        return r.text
    if which == "parts":
        return [json_format.MessageToDict(p, preserving_proto_field_name=True) for p in r.parts.parts]
    if which == "json":
        return json.loads(r.json)
    return None


@dataclass
class Message:
    """One LionAGI message as historyd returns it.

    ``kind`` is the content's kind (``"system"``, ``"instruction"``, ``"assistant_response"``,
    ``"action_request"``, ``"action_response"`` or ``"generic"``); ``content`` its fields as Python
    values (JSON-text fields decoded, e.g. ``arguments``, ``output``, ``prompt_context``);
    ``rendered`` the prompt text (or content parts, or the JSON value of a rendering that is not
    text), present on reads and on writes made with
    ``include_rendered``. ``proto`` is the wire message, for anything else.
    """

    id: str
    kind: Optional[str]
    role: str
    sender: Participant
    recipient: Participant
    channel: Optional[str]
    created_at: Optional[float]
    metadata: Dict[str, Any]
    content: Dict[str, Any]
    rendered: Any
    render_error: str
    sequence: int
    proto: envelope_pb2.Message = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: envelope_pb2.Message) -> "Message":
        kind = m.WhichOneof("content")
        content = to_py(getattr(m, kind)) if kind else {}
        role_fd = m.DESCRIPTOR.fields_by_name["role"]
        return cls(
            id=m.id,
            kind=kind,
            role=str(_enum_short(role_fd, m.role)),
            sender=participant_of(m, "sender"),
            recipient=participant_of(m, "recipient"),
            channel=m.channel if m.HasField("channel") else None,
            created_at=m.created_at if m.HasField("created_at") else None,
            metadata=json_format.MessageToDict(m.metadata) if m.HasField("metadata") else {},
            content=content,
            rendered=rendered_of(m.rendered) if m.HasField("rendered") else None,
            render_error=m.rendered.render_error,
            sequence=m.sequence,
            proto=m,
        )


@dataclass
class BranchInfo:
    """What historyd says about a branch (HistoryService's Branch message)."""

    id: str
    created_at: float
    metadata: Dict[str, Any]
    name: Optional[str]
    user: Optional[str]
    incarnation: str
    head_sequence: int
    message_count: int
    system_id: Optional[str]
    parent_branch_id: Optional[str]
    fork_point: Optional[str]
    progression_selected: bool
    proto: history_service_pb2.Branch = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, b: history_service_pb2.Branch) -> "BranchInfo":
        def opt(name: str) -> Optional[str]:
            return getattr(b, name) if b.HasField(name) else None

        return cls(
            id=b.id,
            created_at=b.created_at,
            metadata=json_format.MessageToDict(b.metadata) if b.HasField("metadata") else {},
            name=opt("name"),
            user=opt("user"),
            incarnation=b.incarnation,
            head_sequence=b.head_sequence,
            message_count=b.message_count,
            system_id=opt("system_id"),
            parent_branch_id=opt("parent_branch_id"),
            fork_point=opt("fork_point"),
            progression_selected=b.progression_selected,
            proto=b,
        )


@dataclass
class Event:
    """One change to a branch: ``kind`` is ``"branch_created"``, ``"message_added"``,
    ``"message_replaced"``, ``"system_set"``, ``"messages_cleared"``, ``"progression_set"`` or
    ``"branch_deleted"``; the other fields are set when the kind has them."""

    sequence: int
    kind: str
    message: Optional[Message] = None
    index: Optional[int] = None
    branch: Optional[BranchInfo] = None
    messages: List[Message] = field(default_factory=list)
    progression: Optional[List[str]] = None

    @classmethod
    def from_proto(cls, e: history_service_pb2.BranchEvent) -> "Event":
        kind_fd = e.DESCRIPTOR.fields_by_name["kind"]
        return cls(
            sequence=e.sequence,
            kind=str(_enum_short(kind_fd, e.kind)),
            message=Message.from_proto(e.message) if e.HasField("message") else None,
            index=e.index if e.HasField("index") else None,
            branch=BranchInfo.from_proto(e.branch) if e.HasField("branch") else None,
            messages=[Message.from_proto(m) for m in e.messages],
            progression=list(e.progression.ids) if e.HasField("progression") else None,
        )


@dataclass
class Commit:
    """One commit of a watched branch: its events, and ``last_sequence``, the cursor to resume
    after."""

    first_sequence: int
    last_sequence: int
    events: List[Event]

    @classmethod
    def from_proto(cls, c: history_service_pb2.BranchCommit) -> "Commit":
        return cls(c.first_sequence, c.last_sequence, [Event.from_proto(e) for e in c.events])


@dataclass
class Heartbeat:
    """A watch stream's bookmark: every event up to ``head_sequence`` has been delivered."""

    head_sequence: int


@dataclass
class InboxHeartbeat:
    """An inbox stream's sign of life; the first one says the subscription is live: messages that
    land in the inbox from then on are streamed."""

    time: datetime.datetime
