"""Test fixtures: the real historyd binary, and a TCP proxy that can cut connections.

The binary is $HISTORYD_BIN, else bin/historyd of the repository (`make python-test` builds it and
sets HISTORYD_BIN). It listens on 127.0.0.1:0, and the address comes from its JSON "serving" log
line on stderr, as clients/node's tests read it (README "Configuration").
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import signal
import socket
import subprocess
import threading
from typing import Iterator, List, Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


class Server:
    """A running historyd process."""

    def __init__(self, extra_args: Optional[List[str]] = None) -> None:
        bin_path = os.environ.get("HISTORYD_BIN") or str(REPO / "bin" / "historyd")
        if not os.path.exists(bin_path):
            raise RuntimeError(f"historyd binary not found at {bin_path}: run `make python-test` or set HISTORYD_BIN")
        self.proc = subprocess.Popen(
            # --store memory: parallel servers must never share the default ./data (issue 14); extra_args
            # come after and win.
            [bin_path, "--listen", "127.0.0.1:0", "--log-format", "json", "--store", "memory", *(extra_args or [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # Its flags alone configure it: a HISTORYD_* variable of the shell (one of another
            # engine is refused at start) must not reach it.
            env={k: v for k, v in os.environ.items() if not k.startswith("HISTORYD_")},
        )
        self.logs: List[str] = []
        lines: "queue.Queue[Optional[str]]" = queue.Queue()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.logs.append(line.rstrip("\n"))
                lines.put(line)
            lines.put(None)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        self.addr = ""
        while not self.addr:
            try:
                line = lines.get(timeout=START_TIMEOUT)
            except queue.Empty:
                self.proc.kill()
                raise RuntimeError("historyd did not log 'serving' in time:\n" + "\n".join(self.logs))
            if line is None:
                raise RuntimeError(f"historyd exited ({self.proc.wait()}) before serving:\n" + "\n".join(self.logs))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "serving" and entry.get("address"):
                self.addr = entry["address"]

    def stop(self) -> int:
        """SIGTERM, then the exit code (SIGKILL after STOP_TIMEOUT)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=STOP_TIMEOUT)
        return self.proc.returncode


class Proxy:
    """A TCP proxy in front of addr: cut() closes every connection through it (a forced
    disconnect the client sees as UNAVAILABLE) and keeps accepting new ones; the next
    ``drop_next`` connections are closed as soon as they are accepted (counted in ``dropped``);
    freeze() black-holes the open connections (a peer gone silent, no FIN and no RST)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._frozen: set = set()  # sockets whose data is read and dropped
        #: HTTP/2 PING frames the clients sent (not their ACKs of the server's), counted as they pass.
        self.client_pings = 0
        self._pinged = threading.Condition(self._lock)
        self._threads: List[threading.Thread] = []
        self.connections = 0
        self.drop_next = 0
        self.dropped = 0
        #: When set, the next response (an HTTP/2 HEADERS frame from the server on a stream) is not
        #: forwarded: the connection is cut instead, so the call was applied and its answer lost.
        self.lose_next_response = False
        self.lost = 0
        self._closed = False
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                drop = self.drop_next > 0
                if drop:
                    self.drop_next -= 1
                    self.dropped += 1
            if drop:
                down.close()
                continue
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._closed:
                    down.close()
                    up.close()
                    return
                self.connections += 1
                self._socks += [down, up]
                for a, b, pump in ((down, up, self._pump_requests), (up, down, self._pump_responses)):
                    t = threading.Thread(target=pump, args=(a, b), daemon=True)
                    self._threads.append(t)
                    t.start()

    def _is_frozen(self, src: socket.socket) -> bool:
        with self._lock:
            return src in self._frozen

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        """Client to server, forwarded as it comes; a copy is parsed into HTTP/2 frames (after the
        client's 24-byte preface) to count the client's PING frames."""
        buf, preface = b"", 24
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self._is_frozen(src):
                    continue
                dst.sendall(data)
                buf += data
                if preface:
                    n = min(preface, len(buf))
                    buf, preface = buf[n:], preface - n
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[0:3], "big"):
                    length, ftype, flags = int.from_bytes(buf[0:3], "big"), buf[3], buf[4]
                    if ftype == 0x6 and not flags & 0x1:  # PING, not an ACK
                        with self._lock:
                            self.client_pings += 1
                            self._pinged.notify_all()
                    buf = buf[9 + length :]
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump_responses(self, src: socket.socket, dst: socket.socket) -> None:
        """Server to client, frame by frame (HTTP/2 frames after the 0-length preface: the server
        sends none), so that lose_next_response can stop at a response's HEADERS frame."""
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self._is_frozen(src):
                    continue
                buf += data
                out = b""
                while len(buf) >= 9:
                    length = int.from_bytes(buf[0:3], "big")
                    if len(buf) < 9 + length:
                        break
                    ftype, stream = buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    with self._lock:
                        lose = self.lose_next_response and ftype == 0x1 and stream != 0
                        if lose:
                            self.lose_next_response = False
                            self.lost += 1
                    if lose:
                        if out:
                            dst.sendall(out)
                        raise OSError("response lost on purpose")
                    out += buf[: 9 + length]
                    buf = buf[9 + length :]
                if out:
                    dst.sendall(out)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait_client_pings(self, n: int, timeout: float) -> bool:
        """Whether the clients have sent n PING frames within timeout seconds."""
        with self._lock:
            return self._pinged.wait_for(lambda: self.client_pings >= n, timeout=timeout)

    def freeze(self) -> None:
        """Black-holes every open connection: they stay open and what either side sends is read
        and dropped, as when the peer's host is gone or a NAT entry expired; only keepalive pings
        tell a client. New connections are forwarded as usual."""
        with self._lock:
            self._frozen.update(self._socks)

    def cut(self) -> None:
        """Closes every open connection."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in _accept
        except OSError:
            pass
        self.listener.close()
        self.cut()
        for t in self._threads + [self._accepter]:
            t.join(timeout=5)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    code = s.stop()
    assert code == 0, "historyd exits 0 on SIGTERM (README 'Configuration': shutdown)\n" + "\n".join(s.logs[-20:])


@pytest.fixture()
def proxy(server: Server) -> Iterator[Proxy]:
    p = Proxy(server.addr)
    yield p
    p.close()
