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
