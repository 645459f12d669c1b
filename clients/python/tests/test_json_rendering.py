"""A message whose rendering is not text (an Instruction whose plain_content is a JSON object, an
AssistantResponse whose value is not a string) is rendered and projected as JSON (Rendered.json,
ChatMessage.content_json); the client gives that value parsed, as it gives text as text."""

from __future__ import annotations

import pytest

from historyd import Client

INSTRUCTION_ID = "00000000-0000-4000-8000-0000000000a1"


def _message(id_: str, lion_class: str, role: str, content: dict) -> dict:
    return {
        "id": id_,
        "created_at": 1700000000.5,
        "metadata": {"lion_class": "lionagi.protocols.messages." + lion_class},
        "content": content,
        "embedding": None,
        "sender": None,
        "recipient": None,
        "channel": None,
        "role": role,
    }


@pytest.fixture()
def client(server):
    with Client(server.addr, tls=False) as c:
        yield c


def test_json_renderings_are_values(client: Client) -> None:
    b = client.import_branch(
        [
            _message(INSTRUCTION_ID, "instruction.Instruction", "user", {"plain_content": {"a": 1.5}}),
            _message(
                "00000000-0000-4000-8000-0000000000a2",
                "assistant_response.AssistantResponse",
                "assistant",
                {"assistant_response": [1, "b"]},
            ),
        ],
        new_branch_id=True,
    )
    assert b.to_chat_messages() == [
        {"role": "user", "content": {"a": 1.5}},
        {"role": "assistant", "content": [1, "b"]},
    ]
    m = b.get_message(INSTRUCTION_ID)
    assert (m.rendered, m.render_error) == ({"a": 1.5}, "")
