"""Keepalive (Client(keepalive=...)): HTTP/2 pings find a connection gone silent, so a watch on it
resumes instead of waiting for a frame that cannot come; and the defaults suit historyd's
keepalive enforcement (--keepalive-min-time: a client pinging more often is sent GOAWAY)."""

from __future__ import annotations

import re
import subprocess
import threading
from typing import List

from conftest import Proxy, Server
from historyd import Client, HistorydError, Keepalive
from historyd._requests import channel_args

# Fast reconnection through the proxy, as test_watch.py's.
FAST = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 2000), ("grpc.max_reconnect_backoff_ms", 200)]


def test_keepalive_channel_options() -> None:
    _, opts = channel_args("h:1", False, None, True)
    got = dict(opts)
    assert got["grpc.keepalive_time_ms"] == 30000 and got["grpc.keepalive_timeout_ms"] == 20000
    assert got["grpc.keepalive_permit_without_calls"] == 0
    assert got["grpc.http2.max_pings_without_data"] == 0
    # an option the caller gives wins: it is not given twice
    _, opts = channel_args("h:1", False, [("grpc.keepalive_time_ms", 60000)], Keepalive(time=15))
    assert [v for k, v in opts if k == "grpc.keepalive_time_ms"] == [60000]
    assert channel_args("h:1", False, None, None)[1] == []


def test_keepalive_defaults_respect_the_servers_min_time(server: Server) -> None:
    """Keepalive()'s time is at or above the --keepalive-min-time historyd enforces by default."""
    helptext = subprocess.run([server.proc.args[0], "serve", "--help"], capture_output=True, text=True, timeout=30)
    text = helptext.stdout + helptext.stderr
    m = re.search(r"--keepalive-min-time\n.*?default (\d+)(s|m)\)", text, flags=re.S)
    assert m, "the server's --help names --keepalive-min-time with its default"
    assert Keepalive().time >= float(m.group(1)) * {"s": 1, "m": 60}[m.group(2)]
    m = re.search(r"--keepalive-permit-without-stream\n.*?default (\w+)\)", text, flags=re.S)
    assert m and m.group(1) == "false"
    assert Keepalive().permit_without_calls is False  # pings on an idle connection count as abuse


def test_keepalive_resumes_a_watch_whose_connection_went_silent() -> None:
    """A watch whose connection is black-holed (the proxy drops everything, no FIN, no RST) gets
    no frame and no error without keepalive. With it, the unanswered ping drops the connection
    within time + timeout, the watch resumes on a new one and delivers the commit written
    meanwhile. The server permits the fast pings (--keepalive-min-time 100ms).

    The watch is quiet for three pings first: gRPC core sends at most two pings while the client
    sends no data unless told otherwise (grpc.http2.max_pings_without_data), and a watch sends
    none, so with time and timeout alone the pings stopped and the silence went unnoticed."""
    srv = Server(["--keepalive-min-time", "100ms"])
    proxy = Proxy(srv.addr)
    try:
        with Client(srv.addr, tls=False) as writer, Client(
            proxy.addr, tls=False, options=FAST, keepalive=Keepalive(time=0.2, timeout=0.3)
        ) as watcher:
            b = writer.create_branch()
            resumed: List[HistorydError] = []
            it = watcher.branch(b.id).watch(after=0, on_resume=lambda _c, err: resumed.append(err))
            assert next(it).last_sequence == 1  # the watch is open, on its first connection
            assert proxy.wait_client_pings(3, timeout=5), f"the client stopped pinging after {proxy.client_pings}"
            proxy.freeze()
            writer.branch(b.id).add_instruction("while silent")
            got = []
            done = threading.Event()

            def read() -> None:
                got.append(next(it))
                done.set()

            threading.Thread(target=read, daemon=True).start()
            assert done.wait(timeout=10), "the watch never noticed its connection was gone"
            assert got[0].last_sequence == 2
            assert resumed and resumed[0].code.name == "UNAVAILABLE"
            it.close()
    finally:
        proxy.close()
        assert srv.stop() == 0
