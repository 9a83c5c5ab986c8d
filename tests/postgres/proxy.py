"""A tiny TCP proxy for fault tests (Toxiproxy's model): forward, freeze, or never answer.

``Proxy((host, port))`` listens on 127.0.0.1 and forwards every connection upstream.
``freeze()`` stops forwarding in both directions (what was read is held, nothing is
written, sockets stay open: a stalled network path or a frozen peer); ``thaw()``
resumes, holding nothing back. ``Proxy(None)`` accepts connections and never answers
(a server that accepts TCP and then says nothing).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["Proxy", "through", "upstream_of"]


class Proxy:
    """Forwards 127.0.0.1:<port> to ``upstream``; see the module docstring."""

    def __init__(self, upstream: tuple[str, int] | None) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True, name="test-proxy").start()

    def freeze(self) -> None:
        """Stop forwarding: every connection stalls, new ones included."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again, what was held first."""
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._keep(client)
            if self.upstream is None:
                continue  # accepted, and never a byte back
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._keep(server)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True, name="test-proxy-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if self._closed:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def upstream_of(url: str) -> tuple[str, int]:
    """``(host, port)`` of a ``postgresql://`` URL."""
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def through(url: str, proxy: Proxy, **query: Any) -> str:
    """``url`` reaching the server through ``proxy``, with ``query`` options added."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
    options = [*parse_qsl(parts.query), *((k, str(val)) for k, val in query.items())]
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{proxy.port}", query=urlencode(options)))
