"""The Exchange walk of docs/examples/exchange.sh, sync and asyncio (issue 20: "the exchange";
ADR-0006 D5): register three owners, send a direct message, one to nobody and a broadcast,
collect, receive and pop; recipient None is a broadcast and UNSET is undeliverable."""

from __future__ import annotations

import uuid

import pytest

from historyd import UNSET, Client, InboxHeartbeat, Message, OwnerAlreadyRegisteredError, OwnerNotRegisteredError
from historyd.aio import AsyncClient


def owners():
    return str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())


def test_exchange_sh_steps(server) -> None:
    A, B, C = owners()
    with Client(server.addr, tls=False) as client:
        x = client.exchange
        for o in (A, B, C):
            flow = x.register(o)
            assert flow["owner_id"] == o
        direct = x.send(A, B, {"text": "hello B"}, channel="demo")
        assert direct.kind == "generic" and direct.content == {"content": {"text": "hello B"}}
        assert direct.recipient == B and direct.channel == "demo"
        nobody = x.send(A, content="no recipient")  # recipient UNSET: undeliverable
        assert nobody.recipient is UNSET
        everyone = x.send(C, None, {"text": "hello all"})  # recipient None: a broadcast
        assert everyone.recipient is None

        report = x.collect(A, include_reached_owner_ids=True)
        assert report["delivered_count"] == 1 and report.get("drop_count") == 1
        by_id = {d["message_id"]: d for d in report["deliveries"]}
        assert by_id[direct.id]["reached_owner_ids"] == [B]
        assert by_id[nobody.id]["drops"][0]["reason"] == "unset_recipient"
        x.collect_all()

        inbox = list(x.receive(B))
        assert {m.id for m in inbox} >= {direct.id, everyone.id}
        assert [m.id for m in x.receive(B, sender=A)] == [direct.id]
        popped = x.pop(B, A)
        assert popped is not None and popped.id == direct.id
        assert x.pop(B, A) is None, "an empty inbox pops nothing"
        assert direct.id not in [m.id for m in x.receive(B)]

        dead = list(x.dead_letters(A))
        assert [d["message"].id for d in dead] == [nobody.id] and dead[0]["reason"] == "unset_recipient"
        assert {A, B, C} <= {o["owner_id"] for o in x.owners(page_size=1)}

        with pytest.raises(OwnerAlreadyRegisteredError) as ei:
            x.register(A)
        assert ei.value.metadata["ownerId"] == A
        left = x.unregister(C)
        assert left["owner_id"] == C
        with pytest.raises(OwnerNotRegisteredError):
            x.send(C, A, "gone")


def test_subscribe_inbox_delivers_collected_messages(server) -> None:
    A, B, _ = owners()
    with Client(server.addr, tls=False) as client:
        x = client.exchange
        x.register(A)
        x.register(B)
        sub = x.subscribe_inbox(B, heartbeats=True)
        first = next(sub)  # the first frame is a heartbeat: from it on, the stream is live
        assert isinstance(first, InboxHeartbeat)
        sent = x.send(A, B, {"n": 1})
        x.collect(A)
        got = next(sub)
        sub.close()
        assert isinstance(got, Message) and got.id == sent.id and got.content == {"content": {"n": 1}}


@pytest.mark.asyncio
async def test_async_exchange(server) -> None:
    A, B, C = owners()
    async with AsyncClient(server.addr, tls=False) as client:
        x = client.exchange
        for o in (A, B, C):
            await x.register(o)
        direct = await x.send(A, B, {"text": "hello B"})
        everyone = await x.send(C, None, "hi all")
        rep = await x.collect(A)
        assert rep["delivered_count"] == 1
        await x.collect(C)
        assert [m.id async for m in x.receive(B)] == [direct.id, everyone.id]
        assert [m.id async for m in x.receive(A)] == [everyone.id]
        popped = await x.pop(B, C)
        assert popped is not None and popped.content == {"content": "hi all"}
        with pytest.raises(OwnerAlreadyRegisteredError):
            await x.register(B)
