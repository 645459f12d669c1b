"""Errors by reason, retries with client-made request ids, deadlines, token and TLS (issue 20:
"errors are exception classes per ErrorInfo reason carrying its metadata; retries for idempotent
calls with client-made request ids; deadlines; the same token and TLS options as the Go client")."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid

import grpc
import pytest

from conftest import Server
from historyd import (
    TLS,
    BranchAlreadyExistsError,
    BranchNotFoundError,
    Client,
    HistorydError,
    InvalidFieldError,
    MessageNotFoundError,
    NotAnActionRequestError,
    RetryPolicy,
    SequenceMismatchError,
    UnauthenticatedError,
)
from historyd import _requests as rq
from historyd.aio import AsyncClient
from historyd.v1 import exchange_service_pb2 as ex
from historyd.v1 import history_service_pb2 as hs

# Fast reconnection through the proxy (gRPC's own reconnect backoff starts at 1 s; its
# min_reconnect_backoff, 20 s by default, also holds back the reconnections of a channel whose
# connections were refused, and is the connect timeout, so not too short on a loaded machine).
FAST = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 2000), ("grpc.max_reconnect_backoff_ms", 100)]


@pytest.fixture()
def client(server):
    with Client(server.addr, tls=False) as c:
        yield c


@pytest.mark.parametrize(
    "call, cls, code, meta",
    [
        # (what is done, the class, the status code, the ErrorInfo metadata keys it must carry)
        (lambda c, b: c.get_branch(str(uuid.uuid4())), BranchNotFoundError, "NOT_FOUND", ["branchId"]),
        (lambda c, b: c.create_branch(branch_id=b.id), BranchAlreadyExistsError, "ALREADY_EXISTS", ["branchId"]),
        (lambda c, b: b.get_message(str(uuid.uuid4())), MessageNotFoundError, "NOT_FOUND", ["branchId", "messageId"]),
        (lambda c, b: b.respond(b.system, 1), NotAnActionRequestError, "INVALID_ARGUMENT", ["messageId"]),
        (lambda c, b: b.add_instruction("x", expected_head_sequence=99), SequenceMismatchError, "FAILED_PRECONDITION", ["headSequence"]),
        (lambda c, b: c.get_branch("not-a-uuid"), InvalidFieldError, "INVALID_ARGUMENT", ["field"]),
    ],
    ids=["branch-not-found", "branch-exists", "message-not-found", "not-an-action-request", "sequence-mismatch", "invalid-field"],
)
def test_error_classes_by_reason(client: Client, call, cls, code, meta) -> None:
    b = client.create_branch(system="S")
    with pytest.raises(cls) as ei:
        call(client, b)
    err = ei.value
    assert isinstance(err, HistorydError) and err.code.name == code
    assert err.reason == cls.REASON
    for key in meta:
        assert key in err.metadata, f"{cls.__name__} carries ErrorInfo metadata {key}: {err.metadata}"


def test_invalid_field_names_the_field(client: Client) -> None:
    with pytest.raises(InvalidFieldError) as ei:
        client.get_branch("not-a-uuid")
    assert ei.value.metadata["field"] == "branch_id"
    assert [f for f, _ in ei.value.field_violations] == ["branch_id"]
    b = client.create_branch()
    with pytest.raises(SequenceMismatchError) as ei2:
        b.add_instruction("x", expected_head_sequence=7)
    assert ei2.value.meta_int("headSequence") == 1


def test_mutations_get_one_request_id_for_all_attempts() -> None:
    """A mutation without a request id gets one (in a copy), the same for every attempt; reads
    are retried as they are; a mutation without a request_id field (Pop) is never retried."""
    req = hs.AddMessageRequest(branch_id="b")
    sent, ok = rq.prepare_retry("AddMessage", req)
    assert ok and uuid.UUID(sent.request_id) and req.request_id == ""
    given = hs.AddMessageRequest(branch_id="b", request_id="mine")
    assert rq.prepare_retry("AddMessage", given) == (given, True)
    assert rq.prepare_retry("ListMessages", hs.ListMessagesRequest()) [1]
    assert rq.prepare_retry("PopMessage", ex.PopMessageRequest())[1] is False
    assert rq.prepare_retry("Collect", ex.CollectRequest())[1] is False


def test_retries_ride_out_refused_connections(server, proxy) -> None:
    """UNAVAILABLE is retried for idempotent calls: the proxy drops the first two connections."""
    # The drops are armed before the client exists, so its first connection is one of them; the
    # attempts outlast gRPC's own reconnect backoff on a loaded machine (it flaked with 8).
    proxy.drop_next = 2
    with Client(proxy.addr, tls=False, options=FAST, retry=RetryPolicy(max_attempts=20, initial_backoff=0.05, max_backoff=0.5)) as c:
        b = c.create_branch(user="retry")
        assert b.info is not None and b.info.user == "retry"
        assert proxy.dropped == 2


def test_no_retry_for_pop(server, proxy) -> None:
    with Client(proxy.addr, tls=False, options=FAST) as c:
        proxy.drop_next = 1
        with pytest.raises(HistorydError) as ei:
            c.exchange.pop(str(uuid.uuid4()), str(uuid.uuid4()))
        assert ei.value.code == grpc.StatusCode.UNAVAILABLE and ei.value.reason is None


@pytest.fixture()
def blackhole():
    """An address whose connections the kernel accepts and nobody ever answers: a call to it can
    only end by its deadline."""
    s = socket.create_server(("127.0.0.1", 0))
    yield "127.0.0.1:%d" % s.getsockname()[1]
    s.close()


def test_deadline(blackhole) -> None:
    with Client(blackhole, tls=False, timeout=0.3) as c:
        with pytest.raises(HistorydError) as ei:
            c.get_branch(str(uuid.uuid4()))
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        with pytest.raises(HistorydError) as ei:
            c.create_branch(timeout=0.2)  # a per-call deadline, retries included
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.asyncio
async def test_async_errors_by_reason(server) -> None:
    async with AsyncClient(server.addr, tls=False) as c:
        with pytest.raises(BranchNotFoundError) as ei:
            await c.get_branch(str(uuid.uuid4()))
        assert "branchId" in ei.value.metadata
        b = await c.create_branch()
        with pytest.raises(SequenceMismatchError):
            await b.add_instruction("x", expected_head_sequence=5)


@pytest.mark.asyncio
async def test_async_deadline(blackhole) -> None:
    async with AsyncClient(blackhole, tls=False) as c:
        with pytest.raises(HistorydError) as ei:
            await c.get_branch(str(uuid.uuid4()), timeout=0.3)
        assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


# The rule (_requests.MAX_TIMEOUT): a long timeout is a long deadline. grpc turns the timeout into
# an absolute deadline, which past its clock's range (a timeout of about 7e9 s) is already gone: a
# client with timeout=1e10 or float("inf") failed every call DEADLINE_EXCEEDED at once (review of
# the clients 2, fault 6).
@pytest.mark.parametrize("timeout", [1e10, float("inf")])
def test_a_very_long_timeout_is_a_deadline_not_an_error(server, timeout: float) -> None:
    with Client(server.addr, tls=False, timeout=timeout) as c:
        b = c.create_branch()
        assert c.get_branch(b.id, timeout=timeout).id == b.id


@pytest.mark.asyncio
@pytest.mark.parametrize("timeout", [1e10, float("inf")])
async def test_async_a_very_long_timeout_is_a_deadline_not_an_error(server, timeout: float) -> None:
    async with AsyncClient(server.addr, tls=False, timeout=timeout) as c:
        b = await c.create_branch()
        assert (await c.get_branch(b.id, timeout=timeout)).id == b.id


def test_token(tmp_path) -> None:
    token = "py-client-token-0123456789abcdef"
    tokens = tmp_path / "tokens"
    tokens.write_text(token + "\n")
    s = Server(["--auth-tokens-file", str(tokens)])
    try:
        with Client(s.addr, tls=False) as anon, pytest.raises(UnauthenticatedError) as ei:
            anon.create_branch()
        assert ei.value.code == grpc.StatusCode.UNAUTHENTICATED
        with Client(s.addr, tls=False, token=token) as c:
            assert c.create_branch(user="t").info.user == "t"
    finally:
        assert s.stop() == 0


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_and_token(tmp_path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=historyd-test",
         "-addext", "subjectAltName=DNS:historyd.test,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    token = "py-client-token-0123456789abcdef"
    (tmp_path / "tokens").write_text(token + "\n")
    s = Server(["--tls-cert", str(cert), "--tls-key", str(key), "--auth-tokens-file", str(tmp_path / "tokens")])
    try:
        roots = cert.read_bytes()
        with Client(s.addr, tls=TLS(root_certificates=roots), token=token) as c:
            assert c.create_branch(user="tls").info.user == "tls"
        with Client(s.addr, tls=TLS(root_certificates=roots, server_name="historyd.test"), token=token) as c:
            assert c.create_branch(user="sni").info.user == "sni"
        with Client(s.addr, tls=False, token=token, retry=RetryPolicy(max_attempts=1), timeout=5) as plain:
            with pytest.raises(HistorydError) as ei:
                plain.create_branch()
            assert ei.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        assert s.stop() == 0
    assert os.path.exists(cert)


def test_every_reason_has_its_class() -> None:
    """Every ErrorReason of the stubs maps to a class named after it (one written out, or made at
    import for a reason added since), so a regenerated client types new reasons too."""
    from historyd import errors
    from historyd.v1 import error_reason_pb2

    for value in error_reason_pb2.ErrorReason.DESCRIPTOR.values:
        if value.number == 0:
            continue
        cls = errors._BY_REASON[value.name]
        assert cls.__name__ == errors._class_name(value.name) and cls.REASON == value.name
        assert getattr(errors, cls.__name__) is cls


def test_retry_after_a_lost_response_applies_the_write_once(server, proxy) -> None:
    """The server applied the write and its answer was lost (the proxy cuts the connection at the
    response): the client retries with the request id it made, and the server answers the retry
    with the first response instead of writing again (AIP-155; the Go client's retry rule)."""
    with Client(proxy.addr, tls=False, options=FAST) as c, Client(server.addr, tls=False) as direct:
        user = f"lost-{uuid.uuid4()}"
        proxy.lose_next_response = True
        b = c.create_branch(user=user)
        assert proxy.lost == 1, "the first answer was lost"
        assert [x.id for x in direct.list_branches() if x.info.user == user] == [b.id], "created once"

        proxy.lose_next_response = True
        m = c.branch(b.id).add_instruction("once")
        assert proxy.lost == 2
        assert [x.id for x in direct.branch(b.id).messages()] == [m.id], "added once"

        proxy.lose_next_response = True
        with pytest.raises(HistorydError) as ei:  # PopMessage has no request id: never retried
            c.exchange.pop(str(uuid.uuid4()), str(uuid.uuid4()))
        assert ei.value.code == grpc.StatusCode.UNAVAILABLE and proxy.lost == 3
