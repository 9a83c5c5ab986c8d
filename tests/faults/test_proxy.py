"""fixtures.proxy: forwards both ways, freezes without closing, cuts with resets, loses one reply, heals and closes."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from jobcore.parity._proxy import Proxy


class EchoServer:
    """A loopback echo server counting the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with contextlib.suppress(OSError):
                    conn.sendall(data)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[Proxy]:
    with Proxy("127.0.0.1", echo.port) as running:
        yield running


def _connect(proxy: Proxy, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def _roundtrip(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _dropped(target: socket.socket | Proxy, tries: int = 20) -> bool:
    """Whether ``target`` (a socket, or a new connection through the proxy) is reset or ended."""
    if isinstance(target, Proxy):
        try:
            sock = _connect(target)
        except (ConnectionResetError, ConnectionRefusedError):
            return True
        with sock:
            return _dropped(sock, tries)
    try:
        target.settimeout(2.0)
        for _ in range(tries):  # a reset may land between two writes
            target.sendall(b"x")
            if target.recv(10) == b"":
                return True
            time.sleep(0.05)
    except (ConnectionResetError, BrokenPipeError):
        return True
    return False


def _answer(sock: socket.socket) -> bytes:
    """What comes back next on ``sock``: ``b""`` when the connection was ended or reset instead."""
    try:
        return sock.recv(100)
    except ConnectionResetError:
        return b""


def _wait_for(predicate: object, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_forwards_both_ways(proxy: Proxy) -> None:
    """Bytes sent through the proxy reach the server and its answer comes back, large ones too."""
    with _connect(proxy) as sock:
        assert _roundtrip(sock) == b"ping"
        big = bytes(range(256)) * 2000
        assert _roundtrip(sock, big) == big
    # the proxy counts a chunk after sending it, so the client may read it first
    assert _wait_for(lambda: proxy.forwarded["up"] == proxy.forwarded["down"] == 4 + len(big))


def test_latency_delays_each_direction(echo: EchoServer) -> None:
    """latency=L: a round trip through the proxy takes at least 2L (one L each way)."""
    with Proxy("127.0.0.1", echo.port, latency=0.05) as slow, _connect(slow) as sock:
        started = time.monotonic()
        assert _roundtrip(sock) == b"ping"
        assert time.monotonic() - started >= 0.1
        slow.latency = 0.0
        started = time.monotonic()
        assert _roundtrip(sock) == b"ping"
        assert time.monotonic() - started < 0.1


def test_freeze_holds_bytes_and_keeps_sockets_open_until_thaw(proxy: Proxy) -> None:
    """Frozen: nothing comes back and the socket stays open; thawed: the held bytes arrive."""
    with _connect(proxy) as sock:
        assert _roundtrip(sock) == b"ping"
        proxy.freeze()
        sock.sendall(b"held")
        sock.settimeout(0.4)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.thaw()
        sock.settimeout(2.0)
        assert sock.recv(10) == b"held"
        assert _roundtrip(sock) == b"ping"


def test_frozen_proxy_accepts_new_connections_but_forwards_them_only_after_thaw(
    proxy: Proxy, echo: EchoServer
) -> None:
    """A connection made while frozen is accepted, never reaches the server until thaw, then works."""
    proxy.freeze()
    with _connect(proxy) as sock:
        sock.sendall(b"early")
        sock.settimeout(0.4)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert echo.accepted == 0
        proxy.thaw()
        sock.settimeout(2.0)
        assert sock.recv(10) == b"early"
        assert echo.accepted == 1


def test_cut_resets_open_connections_and_refuses_new_ones_until_heal(proxy: Proxy) -> None:
    """cut(): open sockets see a reset (or EOF), new ones are dropped at once; heal() restores."""
    sock = _connect(proxy)
    assert _roundtrip(sock) == b"ping"
    proxy.cut()
    assert _dropped(sock)
    sock.close()
    assert _dropped(proxy)
    assert _dropped(proxy)
    proxy.heal()
    with _connect(proxy) as healed:
        assert _roundtrip(healed) == b"ping"


def test_lose_next_reply_forwards_the_request_and_resets_only_that_connection(proxy: Proxy) -> None:
    """lose_next_reply(): the next request reaches the server, its answer never comes back and
    that connection is reset; the other connections, and the next request, are untouched."""
    idle = _connect(proxy)
    asking = _connect(proxy)
    assert _roundtrip(idle) == b"ping"
    assert _wait_for(lambda: proxy.forwarded["down"] == 4)
    proxy.lose_next_reply()
    asking.sendall(b"charge")
    assert _answer(asking) == b""
    assert _wait_for(lambda: proxy.forwarded["up"] == 4 + 6)  # the request went through
    assert proxy.replies_lost == 1
    assert _roundtrip(idle) == b"ping"
    with _connect(proxy) as later:
        assert _roundtrip(later, b"again") == b"again"
    assert proxy.replies_lost == 1
    idle.close()
    asking.close()


def test_lose_next_reply_after_lets_earlier_replies_through(proxy: Proxy) -> None:
    """lose_next_reply(after=1): the first request is answered, the second one's reply is lost."""
    with _connect(proxy) as sock:
        proxy.lose_next_reply(after=1)
        assert _roundtrip(sock, b"first") == b"first"
        sock.sendall(b"second")
        assert _answer(sock) == b""
    assert _wait_for(lambda: proxy.forwarded["up"] == 5 + 6)
    assert proxy.replies_lost == 1


def test_cut_while_frozen_then_heal_and_thaw(proxy: Proxy) -> None:
    """A cut during a freeze still resets; after heal and thaw new connections work."""
    sock = _connect(proxy)
    assert _roundtrip(sock) == b"ping"
    proxy.freeze()
    proxy.cut()
    assert _dropped(sock)
    sock.close()
    proxy.heal()
    proxy.thaw()
    with _connect(proxy) as fresh:
        assert _roundtrip(fresh) == b"ping"


def test_unreachable_target_resets_the_client() -> None:
    """A target that refuses connections shows the client a reset, as a refused connect would."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = int(probe.getsockname()[1])
    with Proxy("127.0.0.1", dead_port, connect_timeout=1.0) as proxy:
        assert _dropped(proxy)


def test_close_stops_listening_and_drops_links(echo: EchoServer) -> None:
    """After close() the port refuses and open connections end."""
    proxy = Proxy("127.0.0.1", echo.port).start()
    port = proxy.port
    sock = _connect(proxy)
    assert _roundtrip(sock) == b"ping"
    proxy.close()
    sock.settimeout(2.0)
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(10) == b""
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()


def test_close_ends_a_freeze(echo: EchoServer) -> None:
    """close() while frozen returns promptly and leaves no forwarding thread behind."""
    proxy = Proxy("127.0.0.1", echo.port).start()
    sock = _connect(proxy)
    assert _roundtrip(sock) == b"ping"
    proxy.freeze()
    sock.sendall(b"held")
    started = time.monotonic()
    proxy.close()
    assert time.monotonic() - started < 2.0
    assert _wait_for(lambda: not any(t.name.startswith("proxy-") and t.is_alive() for t in threading.enumerate()))
    sock.close()
