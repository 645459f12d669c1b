"""The pipelined append stream through the synchronous client (issue 21: "the Python and
TypeScript clients wrap it too"), against the real binary."""

from __future__ import annotations

import uuid

import pytest

from historyd import BranchNotFoundError, Client


@pytest.fixture()
def client(server):
    with Client(server.addr, tls=False) as c:
        yield c


def test_appender_order_and_failures(client: Client) -> None:
    a = client.create_branch()
    b = client.create_branch()
    missing = str(uuid.uuid4())
    with client.appender(window=8) as ap:
        futures = []
        for i in range(100):
            branch = missing if i == 50 else (b.id if i % 3 == 0 else a.id)
            futures.append((branch, ap.append_instruction(branch, f"m{i}")))
        seqs = {a.id: 1, b.id: 1}
        for i, (branch, fut) in enumerate(futures):
            if branch == missing:
                with pytest.raises(BranchNotFoundError):
                    fut.result(timeout=30)
                continue
            msg = fut.result(timeout=30)
            seqs[branch] += 1
            assert msg.sequence == seqs[branch], f"item {i}: items on a branch apply in the order appended"
            assert msg.content["instruction"] == f"m{i}"
    texts = [m.content["instruction"] for m in a.messages()]
    assert texts == [f"m{i}" for i in range(100) if i != 50 and i % 3 != 0]
    with pytest.raises(RuntimeError):
        ap.append_instruction(a.id, "late")


def test_appender_omit_content(client: Client) -> None:
    """AddMessageRequest.omit_content through the appender: the answer is the message less its
    content; the branch holds it whole."""
    a = client.create_branch()
    with client.appender(window=4) as ap:
        acks = [ap.append_instruction(a.id, f"long {i}", omit_content=True) for i in range(5)]
        msgs = [f.result(timeout=30) for f in acks]
    for i, m in enumerate(msgs):
        assert m.kind is None and m.content == {}, f"item {i} came back with its content"
        assert m.id and m.sequence == i + 2 and m.metadata["lion_class"].endswith("Instruction")
    assert [m.content["instruction"] for m in a.messages()] == [f"long {i}" for i in range(5)]


def test_appender_cancel_cannot_take_back_a_sent_item(client: Client) -> None:
    """The rule (Appender.append): an item is sent when append returns, so its future is running
    and cancel() returns False; the future gives the message the server wrote. cancel() returned
    True for an item in flight, which the server applied all the same, and its answer was dropped
    (review of the clients, fault 3)."""
    b = client.create_branch()
    with client.appender(window=4) as ap:
        fut = ap.append_instruction(b.id, "sent")
        assert fut.running() or fut.done()
        assert not fut.cancel(), "cancel() of an item already sent must say it cannot take it back"
        assert not fut.cancelled()
        msg = fut.result(timeout=30)
    assert msg.content["instruction"] == "sent"
    assert [m.content["instruction"] for m in b.messages() if m.kind == "instruction"] == ["sent"]


def test_appender_futures_carry_the_request_id(client: Client) -> None:
    """The rule (Appender.append; README "Reference"): each future's ``request_id`` is the item's,
    the caller's or the one filled in, as the asyncio AppendFuture's is, so an item given up on
    (or failed unsent) can be appended again safely. The sync futures had none: a caller who
    gave no request_id could not learn the one its item was sent with."""
    b = client.create_branch()
    rid = str(uuid.uuid4())
    with client.appender(window=4) as ap:
        given = ap.append_instruction(b.id, "given", request_id=rid)
        made = ap.append_instruction(b.id, "made")
        unsent = ap.append_instruction(b.id, "unsent", timeout=0)  # its deadline passed: not sent
        assert getattr(given, "request_id", None) == rid
        assert str(uuid.UUID(getattr(made, "request_id", ""))) == made.request_id, "a UUID filled in"
        assert getattr(unsent, "request_id", "") not in ("", rid, made.request_id)
        first = made.result(timeout=30)
        again = ap.append_instruction(b.id, "made", request_id=made.request_id)
        assert again.request_id == made.request_id
        assert again.result(timeout=30).id == first.id, "appended again with its request_id: applied once"
    assert [m.content["instruction"] for m in b.messages() if m.kind == "instruction"] == ["given", "made"]
