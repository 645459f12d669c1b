"""The asyncio API (grpc.aio) over the conversation of docs/examples/conversation.sh (issue 20:
"for Python both the sync and asyncio APIs")."""

from __future__ import annotations

import pytest

from historyd import UNSET, MessageNotFoundError
from historyd.aio import AsyncBranch, AsyncClient

from test_conversation import RAW


@pytest.mark.asyncio
async def test_async_conversation(server) -> None:
    async with AsyncClient(server.addr, tls=False) as client:
        b = await client.create_branch(system="You are a careful calculator.", user="alice", name="demo")
        assert isinstance(b, AsyncBranch) and b.system is not None and b.system.sender == "alice"
        ins = await b.add_instruction("What is 30 + 12?", context={"a": 30, "b": 12}, sender="alice", recipient="assistant")
        ans = await b.add_assistant_response(RAW)
        call = await b.add_action_request("add", {"a": 30, "b": 12})
        result = await b.respond(call, 42)
        assert result.content["output"] == 42

        msgs = [m async for m in b.messages(page_size=2)]
        assert [m.id for m in msgs] == [b.system.id, ins.id, ans.id, call.id, result.id]
        assert [m.kind async for m in b.messages("action_requests")] == ["action_request"]
        last = await b.last_message("instructions")
        assert last is not None and last.id == ins.id
        chat = await b.to_chat_messages()
        assert chat[1] == {"role": "user", "content": "Instruction: What is 30 + 12?\nContext:\n- a: 30\n  b: 12"}
        assert chat[4]["content"] == "Function: add\nArguments:\n  a: 30\n  b: 12\nOutput: 42"

        data = await b.export()
        assert [m["id"] for m in data["messages"]["collections"]] == [m.id for m in msgs]
        assert data["messages"]["collections"][2]["metadata"]["model_response"] == RAW
        copy = await client.import_branch(data, new_branch_id=True)
        assert (await copy.export())["messages"]["collections"] == data["messages"]["collections"]
        assert (await copy.refresh()).message_count == 5
        assert copy.id in [x.id async for x in client.list_branches()]

        fork = await b.fork(ins)
        assert fork.info is not None and fork.info.message_count == 2
        await b.set_progression([ins])
        assert [m.id async for m in b.messages(selected=True)] == [ins.id]
        await b.clear_messages()
        with pytest.raises(MessageNotFoundError):
            await b.get_message(ins.id)
        assert (await b.get_message(b.system.id)).recipient == b.id
        assert await b.delete() == b.head_sequence + 1


@pytest.mark.asyncio
async def test_async_participants(server) -> None:
    async with AsyncClient(server.addr, tls=False) as client:
        x = client.exchange
        a, bb = "a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002"
        for o in (a, bb):
            try:
                await x.unregister(o)
            finally:
                await x.register(o)
        nobody = await x.send(a)
        everyone = await x.send(a, None)
        assert nobody.recipient is UNSET and everyone.recipient is None
