"""A TCP proxy in front of one Kafka node, whose link can be cut and restored (bench/chaos.py).

The node advertises the proxy's port (``infra.kafka.advertise_through``), so every client and the
other nodes reach it only through here. ``cut()`` makes the link a black hole, as a pulled cable
does: bytes already in flight and new connections go nowhere, nothing is refused or reset, so
the peers see timeouts, not errors. ``restore()`` closes the connections the cut broke (their
streams lost bytes) and forwards new ones again. One thread, one selector, for all connections.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

CHUNK = 256 * 1024


class CuttableProxy:
    """Forwards ``127.0.0.1:listen_port`` to ``127.0.0.1:target_port`` until stopped."""

    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1") -> None:
        self.listen_port, self.target_port, self.host = listen_port, target_port, host
        self._selector = selectors.DefaultSelector()
        self._server = socket.create_server((host, listen_port), reuse_port=False)
        self._server.setblocking(False)
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._peers: dict[socket.socket, socket.socket | None] = {}  # a socket -> where its bytes go
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._restore = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"proxy-{listen_port}", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        self._cut.set()

    def restore(self) -> None:
        self._restore.set()
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sock in list(self._peers):
            self._drop(sock)
        self._selector.close()
        self._server.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._restore.is_set():
                self._restore.clear()
                for sock in list(self._peers):  # broken by the cut: the peers reconnect at once
                    self._drop(sock)
            for key, _ in self._selector.select(timeout=0.1):
                if key.fileobj is self._server:
                    self._accept()
                else:
                    self._pump(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except BlockingIOError:
            return
        client.setblocking(False)
        if self._cut.is_set():  # a black hole: accepted, never answered, dropped at restore
            self._peers[client] = None
            self._selector.register(client, selectors.EVENT_READ)
            return
        try:
            upstream = socket.create_connection((self.host, self.target_port), timeout=5)
        except OSError:
            client.close()  # the node itself is down: refused, as it would be without the proxy
            return
        upstream.setblocking(False)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ)
        self._peers[client], self._peers[upstream] = upstream, client

    def _pump(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        other = self._peers.get(sock)
        if other is None or self._cut.is_set():
            return  # swallowed by the cut
        try:
            other.setblocking(True)  # small frames: a blocking send of one chunk is brief
            other.sendall(data)
            other.setblocking(False)
        except OSError:
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        other = self._peers.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._peers.pop(s, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            s.close()
