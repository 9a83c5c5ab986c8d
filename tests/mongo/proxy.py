"""A small TCP proxy for the MongoDB fault tests: it forwards until told to stall.

Frozen, it keeps every connection open and passes nothing either way, and accepts new
connections without ever connecting them upstream: a network that stalled, not one that
failed (nothing is reset, so only client-side bounds can end a wait). Thawed, it passes
data again on the connections it kept. :meth:`cut` drops every open connection at once
(killed sessions, a restarted middlebox). It counts the connections clients closed, so
a test can see a timed-out connection being discarded.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["StallingProxy"]

_TICK = 0.01


class StallingProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; :meth:`freeze` stalls it, :meth:`thaw` lets it go."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.accepted = 0
        self.closed_by_client = 0
        threading.Thread(target=self._accept, name="stalling-proxy", daemon=True).start()

    def url(self, query: str = "directConnection=true") -> str:
        return f"mongodb://127.0.0.1:{self.port}/?{query}"

    def freeze(self) -> None:
        """Stop passing anything, on every connection, old and new."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Pass data again."""
        self._flowing.set()

    def cut(self) -> None:
        """Close every connection open now, both ends; new ones are served as usual."""
        with self._lock:
            cut, self._sockets = self._sockets, []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._keep(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # A connection accepted while frozen is connected upstream only once thawed.
        while not self._flowing.wait(_TICK):
            if self._closed.is_set():
                return
        try:
            upstream = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        self._keep(upstream)
        peer = {client: upstream, upstream: client}
        try:
            while not self._closed.is_set():
                if not self._flowing.is_set():
                    self._closed.wait(_TICK)  # leave the bytes in the kernel's buffers
                    continue
                ready, _, _ = select.select(list(peer), [], [], _TICK)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        if sock is client:
                            with self._lock:
                                self.closed_by_client += 1
                        return
                    peer[sock].sendall(data)
        except (OSError, ValueError):  # ValueError: select() on a socket cut() closed
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
