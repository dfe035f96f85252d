"""A TCP relay on loopback that can freeze: a faithful stand-in for a server stopped with SIGSTOP.

    with TcpRelay("127.0.0.1", 5432) as relay:   # connect to 127.0.0.1:relay.port instead
        relay.freeze()                           # nothing moves either way; new connections hang
        relay.thaw()

A stopped server's kernel still accepts connections and acknowledges bytes, but
no answer ever comes: frozen, the relay still accepts and reads (so the client's
writes succeed) and forwards nothing in either direction until thawed. Unlike
stopping the machine's shared PostgreSQL, it freezes only the connections made
through it.
"""

from __future__ import annotations

import select
import socket
import threading
from types import TracebackType


class TcpRelay:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._running = threading.Event()
        self._running.set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="tcp-relay", daemon=True).start()

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        self._running.wait()
        try:
            server = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        pending = {client: b"", server: b""}  # bytes read from each side, held while frozen
        peer = {client: server, server: client}
        with client, server:
            while not self._closed:
                readable, _, _ = select.select([client, server], [], [], 0.05)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pending[sock] += data
                if self._running.is_set():
                    for sock, data in pending.items():
                        if data:
                            peer[sock].sendall(data)
                            pending[sock] = b""

    def close(self) -> None:
        self._closed = True
        self._running.set()
        self._listener.close()

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
