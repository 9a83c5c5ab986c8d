"""An in-process TCP proxy that injects network faults: freeze, thaw, cut, heal (Toxiproxy's model).

``Proxy(target_host, target_port).start()`` listens on a port of its own (``proxy.port``)
and forwards every connection to the target, two threads per connection, standard
library only. Between a client and its server it can:

* ``freeze()``: a network stall. Every socket stays open, nothing is forwarded either
  way (bytes already read are held back, not dropped), and new connections are
  accepted but not forwarded (nor connected to the target) until ``thaw()``. A client
  blocked on a reply waits as it would on a real stalled link: only its own timeouts
  end the wait.
* ``thaw()``: forwarding resumes, held bytes first, and connections accepted meanwhile
  are connected to the target.
* ``cut()``: every open connection is reset (RST, both sides), and new ones are reset
  as soon as they are accepted, until ``heal()``.
* ``lose_next_reply(after=0)``: the next connection that sends anything gets its request
  forwarded, and the first bytes the target sends back on it are dropped and the link
  reset (RST, both sides): the server did what was asked, and its answer is lost, as when
  a path breaks after the request went through. ``after`` lets that many replies through
  first (a call of several round trips loses a later one). Only one reply is lost;
  ``replies_lost`` counts them.
* ``close()``: stop listening and drop every connection.

``latency`` (an attribute, settable at any time) delays each forwarded chunk by that
many seconds in each direction, as a remote store's round trip would (Toxiproxy's
``latency`` toxic, without jitter).

A connection the target refuses is reset on the client side, as a refused connection
would be. The proxy is a test fixture: it trusts its caller and keeps no statistics
beyond byte counts (``forwarded``).
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from types import TracebackType

__all__ = ["Proxy"]

_CHUNK = 65536
_TICK = 0.05
"""Seconds a forwarding thread waits at most before it looks at the proxy's state again."""


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN (SO_LINGER on, zero timeout)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One client connection and (once connected) its upstream connection."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.dead = threading.Event()
        self.lock = threading.Lock()
        self.closed_halves = 0

    def kill(self, *, rst: bool) -> None:
        with self.lock:
            if self.dead.is_set():
                return
            self.dead.set()
            for sock in (self.client, self.upstream):
                if sock is None:
                    continue
                if rst:
                    _reset(sock)
                else:
                    with contextlib.suppress(OSError):
                        sock.close()


class Proxy:
    """A TCP proxy in front of ``target_host:target_port`` (see the module docstring).

    Args:
        target_host: Where connections are forwarded.
        target_port: The target's port.
        listen_host: Address the proxy listens on (default loopback).
        listen_port: Port to listen on (default 0: a free one, read it from ``port``).
        connect_timeout: Seconds to wait for the target when connecting a new link.
        latency: Seconds each forwarded chunk is held, in each direction (default none).
    """

    def __init__(
        self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1", listen_port: int = 0,
        connect_timeout: float = 5.0, latency: float = 0.0,
    ) -> None:
        self.target = (target_host, int(target_port))
        self.listen_host = listen_host
        self._listen_port = listen_port
        self.connect_timeout = connect_timeout
        self.latency = latency
        self._flowing = threading.Event()
        self._flowing.set()
        self._cut = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.forwarded = {"up": 0, "down": 0}
        """Bytes forwarded client to target (``up``) and back (``down``)."""
        self.accepted = 0
        """Connections accepted so far."""
        self.closed_by_client = 0
        """Connections the client closed (seen once data flows: a frozen link reads nothing)."""
        self.replies_lost = 0
        """Replies dropped by :meth:`lose_next_reply`."""
        self._losing = False
        self._asked: _Link | None = None
        self._let_through = 0

    # -- control ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (after :meth:`start`)."""
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        return int(self._listener.getsockname()[1])

    @property
    def host(self) -> str:
        return self.listen_host

    def start(self) -> Proxy:
        """Listen and accept in a background thread; answers itself."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.listen_host, self._listen_port))
        listener.listen(128)
        self._listener = listener
        self._spawn(self._accept_loop, "proxy-accept")
        return self

    def freeze(self) -> None:
        """Stall every connection, open ones and new ones (see the module docstring)."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Resume forwarding; connections accepted while frozen get connected to the target."""
        self._flowing.set()

    @property
    def frozen(self) -> bool:
        return not self._flowing.is_set()

    def cut(self) -> None:
        """Reset every open connection; reset new ones on accept until :meth:`heal`."""
        with self._lock:
            self._cut = True
            links = list(self._links)
        for link in links:
            link.kill(rst=True)

    def lose_next_reply(self, after: int = 0) -> None:
        """Drop the reply to the next request any connection sends (past the ``after`` next
        replies), and reset that connection."""
        with self._lock:
            self._losing, self._asked, self._let_through = True, None, after

    def heal(self) -> None:
        """Accept and forward new connections again after :meth:`cut`."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop listening, drop every connection and wait for the proxy's threads."""
        self._closed.set()
        self._flowing.set()  # wake threads waiting out a freeze so they can see the close
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.kill(rst=False)
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(2.0)

    def __enter__(self) -> Proxy:
        return self.start() if self._listener is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else "cut" if self._cut else "frozen" if self.frozen else "flowing"
        where = f":{self.port}" if self._listener is not None and not self._closed.is_set() else ""
        return f"Proxy({where} -> {self.target[0]}:{self.target[1]}, {state}, {len(self._links)} links)"

    # -- threads ---------------------------------------------------------------------

    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], _TICK)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except (OSError, ValueError):  # closed under us
                return
            with self._lock:
                self.accepted += 1
                refuse = self._cut or self._closed.is_set()
                link = _Link(client)
                if not refuse:
                    self._links.add(link)
            if refuse:
                _reset(client)
                continue
            self._spawn(self._serve, "proxy-link", link)

    def _wait_flowing(self, link: _Link) -> bool:
        """Wait out a freeze; answers False when the link died or the proxy closed meanwhile."""
        while not self._flowing.wait(_TICK):
            if link.dead.is_set() or self._closed.is_set():
                return False
        return not (link.dead.is_set() or self._closed.is_set())

    def _serve(self, link: _Link) -> None:
        try:
            if not self._wait_flowing(link):  # accepted while frozen: not forwarded until thawed
                return
            try:
                upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
            except OSError:
                link.kill(rst=True)  # as a refused connection looks to the client
                return
            upstream.settimeout(None)
            with link.lock:
                if link.dead.is_set():
                    _reset(upstream)
                    return
                link.upstream = upstream
            self._spawn(self._pump, "proxy-down", link, upstream, link.client, "down")
            self._pump(link, link.client, upstream, "up")
        finally:
            if link.dead.is_set():
                with self._lock:
                    self._links.discard(link)

    def _reply_lost(self, link: _Link) -> bool:
        """Drop the reply ``link`` just received when it is the one :meth:`lose_next_reply` wants."""
        with self._lock:
            if not (self._losing and self._asked is link):
                return False
            self._asked = None
            if self._let_through > 0:  # this one goes through; the next request's reply is the one
                self._let_through -= 1
                return False
            self._losing = False
            self.replies_lost += 1
        link.kill(rst=True)
        return True

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket, direction: str) -> None:
        """Forward ``src`` to ``dst`` until EOF, an error or the link's death; honours freezes."""
        try:
            while True:
                if not self._wait_flowing(link):
                    return
                ready, _, _ = select.select([src], [], [], _TICK)
                if not ready:
                    continue
                data = src.recv(_CHUNK)
                if not data:  # EOF: pass the half-close on, end the link once both halves ended
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    with link.lock:
                        link.closed_halves += 1
                        both = link.closed_halves >= 2
                    if direction == "up":
                        with self._lock:
                            self.closed_by_client += 1
                    if both:
                        link.kill(rst=False)
                    return
                if self.latency > 0 and link.dead.wait(self.latency):
                    return
                if not self._wait_flowing(link):  # frozen after the read: hold the bytes back
                    return
                if direction == "down" and self._asked is link and self._reply_lost(link):
                    return
                if direction == "up" and self._losing and self._asked is None:
                    with self._lock:  # marked before the request goes on, so its reply cannot slip by
                        if self._losing and self._asked is None:
                            self._asked = link
                dst.sendall(data)
                with self._lock:
                    self.forwarded[direction] += len(data)
        except (OSError, ValueError):
            link.kill(rst=True)  # one side failed: the other sees a reset, as through a broken path
        finally:
            if link.dead.is_set():
                with self._lock:
                    self._links.discard(link)
