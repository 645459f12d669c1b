"""export() of branches built through the client against the LionAGI 0.27.0 reference vectors
(issue 20: "the Python client's export() of a conversation built through it equals, as a JSON
value, the reference vectors' expectation for the same steps where the vectors cover them").

The vectors have no whole Branch.to_dict, but they record, for LionAGI calls that the client's
steps stand for, each message's class, sender, recipient, channel and content dict (scenario step
results), its metadata and its rendered prompt (the step's `read`). Each case below replays one
record's steps through the client, exports the branch, and compares the exported message with
the record as JSON values (placeholders such as <m> and <id:1> bound to the ids the steps made),
and the rendered prompt byte for byte (testdata/lionagi-0.27.0/README.md "How to compare")."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Callable, Dict, Tuple

import pytest

from historyd import Branch, Client

REPO = pathlib.Path(__file__).resolve().parents[3]


def vectors_path() -> pathlib.Path:
    """$HISTORYD_VECTORS (a directory holding the file, or the file) overrides the repository's
    copy, as for the Go and Node tests; an override that names nothing fails."""
    override = os.environ.get("HISTORYD_VECTORS")
    if override:
        p = pathlib.Path(override)
        p = p / "lionagi-0.27.0.jsonl" if p.is_dir() else p
        assert p.is_file(), f"HISTORYD_VECTORS={override} names no vectors file"
        return p
    return REPO / "testdata" / "lionagi-0.27.0" / "lionagi-0.27.0.jsonl"


RECORDS: Dict[str, Dict[str, Any]] = {}
for line in vectors_path().read_text().splitlines():
    r = json.loads(line)
    RECORDS[r["name"]] = r

# record name -> the client's steps on a fresh branch; they return (the message compared, the
# placeholder bindings).
Steps = Callable[[Branch], Tuple[Any, Dict[str, str]]]


def one(m: Any) -> Tuple[Any, Dict[str, str]]:
    return m, {"<m>": m.id}


def respond(output: Any) -> Steps:
    def steps(b: Branch) -> Tuple[Any, Dict[str, str]]:
        req = b.add_action_request("f")
        resp = b.respond(req, output)
        return resp, {"<m>": resp.id, "<id:1>": req.id}

    return steps


CASES: Dict[str, Steps] = {
    "create_message: context scalar": lambda b: one(b.add_instruction("x", context="c")),
    "create_message: instruction non-str JSON": lambda b: one(b.add_instruction({"a": 1})),
    "create_message: metadata -> metadata.extra": lambda b: one(b.add_instruction("x", metadata={"k": "v"})),
    "create_message: tool_schemas dict -> [dict]": lambda b: one(b.add_instruction("x", tool_schemas={"a": {}})),
    "create_message: tool_schemas {'tools': [...]} unwrapped": lambda b: one(
        b.add_instruction("x", tool_schemas={"tools": [{"n": 1}]})
    ),
    "create_message: action_function + action_arguments={}": lambda b: one(b.add_action_request("f", {})),
    "create_message: instruction + action_request + action_output -> instruction silently dropped": respond(1),
    "create_message: action_output=0": respond(0),
    "create_message: action_output=''": respond(""),
    "create_message: action_output=[]": respond([]),
    "create_message: action_output={}": respond({}),
    "create_message: action_output=False": respond(False),
    "create_system(system_datetime='2024')": lambda b: one(b.set_system("S", system_datetime="2024")),
    "create_system() default": lambda b: one(b.set_system()),
}


def bind(value: Any, names: Dict[str, str]) -> Any:
    """The record's value with its placeholders replaced by the ids they stand for."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [bind(v, names) for v in value]
    if isinstance(value, dict):
        return {k: bind(v, names) for k, v in value.items()}
    return value


def class_name(exported: Dict[str, Any]) -> str:
    return exported["metadata"]["lion_class"].rsplit(".", 1)[1]


@pytest.fixture(scope="module")
def client(server):
    with Client(server.addr, tls=False) as c:
        yield c


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_matches_vector(client: Client, name: str) -> None:
    record = RECORDS[name]
    assert record["expect"] == "match"
    (step,) = record["output"]
    b = client.create_branch()
    written, names = CASES[name](b)
    exported = {m["id"]: m for m in b.export()["messages"]["collections"]}[written.id]
    want = bind(step["result"], names)
    got = {
        "id": exported["id"],
        "class": class_name(exported),
        "sender": exported["sender"],
        "recipient": exported["recipient"],
        "channel": exported["channel"],
        "content": exported["content"],
    }
    assert got == want
    read = step.get("read", {})
    if "m.metadata" in read:
        meta = {k: v for k, v in exported["metadata"].items() if k != "lion_class"}
        assert meta == read["m.metadata"]
    if "m.rendered" in read:
        (chat,) = b.to_chat_messages(order=[written.id])
        assert chat["content"] == read["m.rendered"], "the prompt text, byte for byte"


def test_branch_scenario_export(client: Client) -> None:
    """Record "Branch(system, user) + to_dict/from_dict": Branch(system="You are S", user="alice"),
    then add_message(instruction="hi", sender="alice"): the System's sender is the user and its
    recipient the branch; the messages are the system, then the instruction."""
    record = RECORDS["Branch(system, user) + to_dict/from_dict"]
    assert record["expect"] == "match"
    b = client.create_branch(system="You are S", user="alice")
    ins = b.add_instruction("hi", sender="alice")
    data = b.export()
    system, instruction = data["messages"]["collections"]
    names = {"<b>": b.id, "<ins>": ins.id, "<id:1>": system["id"]}
    out = bind(record["output"], names)
    assert data["id"] == out[0]["result"]["id"] and data["user"] == "alice"
    assert {"b.system.sender": system["sender"], "b.system.recipient": system["recipient"]} == out[0]["read"]
    assert data["messages"]["progression"]["order"] == out[3]["result"]
    assert {
        "id": instruction["id"],
        "class": class_name(instruction),
        "sender": instruction["sender"],
        "recipient": instruction["recipient"],
        "channel": instruction["channel"],
        "content": instruction["content"],
    } == out[2]["result"]
