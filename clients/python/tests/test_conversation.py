"""The conversation of docs/examples/conversation.sh through the synchronous client, against the
real binary (issue 20: "the conversation"; ADR-0006 D3). Prompt texts are compared byte for byte
(testdata/lionagi-0.27.0/README.md: rendered text is what a model sees)."""

from __future__ import annotations

import uuid

import pytest

import historyd
from historyd import UNSET, Client

# conversation.sh's raw OpenAI chat completion: from_response takes the text from
# choices[].message.content and keeps the raw value in metadata.model_response (ADR-0006 D2).
RAW = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "I will call add."}, "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
}


@pytest.fixture()
def client(server):
    with Client(server.addr, tls=False) as c:
        yield c


def test_conversation_sh_steps(client: Client) -> None:
    # create: the System's sender is the user, its recipient the branch (CreateBranch doc).
    b = client.create_branch(system="You are a careful calculator.", user="alice", name="demo")
    assert b.info is not None and b.info.user == "alice" and b.info.name == "demo"
    assert b.info.head_sequence == 1, "BRANCH_CREATED is sequence 1"
    assert b.system is not None and b.system.sender == "alice" and b.system.recipient == b.id
    assert b.system.content == {"system_message": "You are a careful calculator."}

    # instruction: context is a Python value; the client sends it as JSON text, key order kept.
    ins = b.add_instruction(
        "What is 30 + 12?", context={"a": 30, "b": 12}, sender="alice", recipient="assistant", include_rendered=True
    )
    assert ins.kind == "instruction" and ins.role == "user"
    assert ins.content == {"instruction": "What is 30 + 12?", "prompt_context": [{"a": 30, "b": 12}]}
    assert ins.rendered == "Instruction: What is 30 + 12?\nContext:\n- a: 30\n  b: 12"
    assert ins.sequence == 2 and b.head_sequence == 2

    # a write renders only when asked (AddMessageRequest.include_rendered)
    ans = b.add_assistant_response(RAW)
    assert ans.rendered is None
    assert ans.content == {"assistant_response": "I will call add."}
    assert ans.metadata["model_response"]["id"] == "chatcmpl-1"

    call = b.add_action_request("add", {"a": 30, "b": 12}, include_rendered=True)
    assert call.content == {"function": "add", "arguments": {"a": 30, "b": 12}}
    assert call.rendered == "Function: add\nArguments:\n  a: 30\n  b: 12"

    result = b.respond(call, 42, include_rendered=True)
    assert result.kind == "action_response"
    assert result.content["output"] == 42 and result.content["action_request_id"] == call.id
    assert result.rendered == "Function: add\nArguments:\n  a: 30\n  b: 12\nOutput: 42"
    assert b.get_message(call).content["action_response_id"] == result.id, "the request gets the response's id"

    # list: the system first, then the order of the writes; reads always render.
    msgs = list(b.messages())
    assert [m.kind for m in msgs] == ["system", "instruction", "assistant_response", "action_request", "action_response"]
    assert all(m.rendered is not None for m in msgs)
    assert [m.id for m in b.messages(page_size=2)] == [m.id for m in msgs], "pages are followed to the end"
    assert [m.id for m in b.messages("actions")] == [call.id, result.id]
    assert [m.id for m in b.messages(view="instructions")] == [ins.id]
    assert [m.id for m in b.messages(descending=True)] == [m.id for m in reversed(msgs)]
    last = b.last_message("assistant_responses")
    assert last is not None and last.id == ans.id

    chat = b.to_chat_messages()
    assert chat == [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": "Instruction: What is 30 + 12?\nContext:\n- a: 30\n  b: 12"},
        {"role": "assistant", "content": "I will call add."},
        {"role": "action", "content": "Function: add\nArguments:\n  a: 30\n  b: 12"},
        {"role": "action", "content": "Function: add\nArguments:\n  a: 30\n  b: 12\nOutput: 42"},
    ]
    assert b.to_chat_messages(order=[ins, ans.id]) == chat[1:3]
    assert b.to_chat_messages(order=[]) == [], "an explicitly empty order gives none"

    # export: LionAGI's Branch.to_dict; the raw response's ints stay ints (JSON text end to end).
    data = b.export()
    assert data["id"] == b.id and data["user"] == "alice" and data["name"] == "demo"
    assert data["metadata"]["lion_class"] == "lionagi.session.branch.Branch"
    coll = data["messages"]["collections"]
    assert [m["id"] for m in coll] == [m.id for m in msgs]
    assert coll[2]["metadata"]["model_response"] == RAW
    assert data["messages"]["progression"]["order"] == [m.id for m in msgs]
    # db mode renames the metadata key at the top of each LionAGI to_dict call only (issue 13
    # item 6): the Branch, its Pile and its system; the Pile's items keep "metadata".
    db = b.export("db")
    assert "node_metadata" in db and "metadata" not in db
    assert "node_metadata" in db["messages"]
    assert "metadata" in db["messages"]["collections"][0]

    # import the export back under a new id: the same messages, as LionAGI's from_dict reads them.
    copy = client.import_branch(data, new_branch_id=True)
    assert copy.id != b.id
    again = copy.export()
    assert again["messages"]["collections"] == coll
    assert client.import_branch(__import__("json").dumps(data), branch_id=str(uuid.uuid4())).info.message_count == 5


def test_selected_progression_fork_clear(client: Client) -> None:
    b = client.create_branch(system="S")
    one = b.add_instruction("one")
    two = b.add_instruction("two")
    b.set_progression([two, one])
    assert [m.id for m in b.messages(selected=True)] == [two.id, one.id]
    assert [c["content"] for c in b.to_chat_messages(selected=True)] == ["Instruction: two", "Instruction: one"]
    b.set_progression(None)
    fork = b.fork(one, name="forked")
    assert fork.info is not None and fork.info.parent_branch_id == b.id and fork.info.message_count == 2
    head = b.clear_messages()
    assert head == b.head_sequence and [m.kind for m in b.messages()] == ["system"]
    assert b.refresh().message_count == 1
    assert fork.id in [x.id for x in client.list_branches(page_size=1)]


def test_participants_none_versus_unset(client: Client) -> None:
    """LionAGI's None versus absent: a write's sender None is JSON null; an imported message whose
    sender is "unset" (never given) reads back as UNSET, and None stays None (docs/design.md#wire-model)."""
    b = client.create_branch()
    m = b.add_instruction("hi", sender=None, recipient="assistant")
    assert m.sender is None and m.recipient == "assistant"
    data = b.export()
    data["messages"]["collections"][0]["sender"] = "unset"
    copy = client.import_branch(data, new_branch_id=True)
    (read,) = list(copy.messages())
    assert read.sender is UNSET and read.recipient == "assistant"
    assert copy.export()["messages"]["collections"][0]["sender"] == "unset"
    assert b.export()["messages"]["collections"][0]["sender"] is None
    with pytest.raises(TypeError):
        b.add_instruction("x", sender=3)  # type: ignore[arg-type]


def test_request_ids_make_writes_idempotent(client: Client) -> None:
    rid = str(uuid.uuid4())
    a = client.create_branch(user="u", request_id=rid)
    b = client.create_branch(user="u", request_id=rid)
    assert a.id == b.id, "a repeated request id returns the first response (AIP-155)"
    m1 = a.add_instruction("once", request_id=rid)
    m2 = a.add_instruction("once", request_id=rid)
    assert m1.id == m2.id and a.refresh().message_count == 1


def test_version() -> None:
    assert historyd.__version__
