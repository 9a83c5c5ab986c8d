"""Faults on the MongoDB driver: bounded calls (F07) and recovery after a restart (F06).

A stalled network comes from :class:`~tests.mongo.proxy.Proxy` (connections stay
open, nothing passes); a restart from a second stand-in server stopped and started on
the same port and storage. Every wait here is real time, kept to a second or two by small
bounds.
"""

from __future__ import annotations

import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.mongo import CLOCK_READ_BOUND, MongoDriver
from jobcore.parity._proxy import Proxy
from jobcore.parity.plugin import START
from pymongo import MongoClient
from pymongo import errors as pe
from pymongo.uri_parser import parse_uri

from fixtures import mongo as fx
from jobcore.clock import ManualClock, StoreClock
from jobcore.errors import MAY_HAVE_LANDED, BackendError, BackendUnavailable, OptionInvalid

BOUND = 1.0
"""The call bound the stall tests give their drivers (seconds)."""
SLACK = 1.0
"""How much longer than its bound a call may take to answer."""


@pytest.fixture
def proxy(server: fx.MongoServer) -> Iterator[Proxy]:
    host, port = parse_uri(server.url)["nodelist"][0]
    made = Proxy(host, port).start()
    yield made
    made.close()


@pytest.fixture
def through(proxy: Proxy, server: fx.MongoServer) -> Iterator[Callable[..., MongoDriver]]:
    """``build(**options)``: a migrated driver reaching the server through the proxy, from a URI."""
    made: list[MongoDriver] = []

    def build(**options: Any) -> MongoDriver:
        options.setdefault("clock", ManualClock(START))
        options.setdefault("call_timeout", BOUND)
        driver = MongoDriver(_url(proxy), database=f"jc_test_{uuid.uuid4().hex[:16]}", **options)
        made.append(driver)
        driver.migrate()
        return driver

    yield build
    for driver in made:
        driver.close()
        server.client.drop_database(driver._jobs.database.name)


def _coded_within(call: Callable[[], Any], bound: float) -> BackendError:
    """Run ``call``; it must raise JC_DB_TIMEOUT or JC_DB_UNAVAILABLE within ``bound`` + SLACK."""
    began = time.monotonic()
    with pytest.raises(BackendError) as caught:
        call()
    took = time.monotonic() - began
    assert took < bound + SLACK, f"answered after {took:.2f}s, bound {bound}s"
    assert caught.value.code in {"JC_DB_TIMEOUT", "JC_DB_UNAVAILABLE"}
    assert isinstance(caught.value.__cause__, pe.PyMongoError)
    return caught.value


CALLS: dict[str, Callable[[MongoDriver, Any], Any]] = {
    "claim": lambda d, t: d.claim(["default"], worker_id="w", limit=3, lease=30),
    "enqueue": lambda d, t: d.enqueue("stalled"),
    "heartbeat": lambda d, t: d.heartbeat(t, 30),
    "start": lambda d, t: d.start([t]),
    "ack": lambda d, t: d.ack(t),
    "get": lambda d, t: d.introspect.get("1"),
    "rescue": lambda d, t: d.introspect.rescue(),
    "acquire": lambda d, t: d.leases.acquire("k", 1, "h", 30),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_on_a_stalled_connection_answers_a_coded_error_within_its_bound(
    through: Callable[..., MongoDriver], proxy: Proxy, name: str,
) -> None:
    """The network stalls mid-use: each call answers JC_DB_TIMEOUT/UNAVAILABLE within the call bound,
    the stalled connection is dropped, and once the network flows the next call works."""
    driver = through()
    driver.enqueue("warm")
    token = driver.claim(["default"], worker_id="w", lease=30, start=False).claimed[0].token
    proxy.freeze()
    error = _coded_within(lambda: CALLS[name](driver, token), BOUND)
    assert f"{BOUND:g}s" in error.cause
    assert error.fix
    if error.code == "JC_DB_TIMEOUT":  # sent, unanswered: it may have been carried out
        assert MAY_HAVE_LANDED in error.fix
    proxy.thaw()
    deadline = time.monotonic() + 5
    while proxy.closed_by_client == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.closed_by_client >= 1, "the timed-out connection was kept"
    # A harmless call (the stalled request itself may land once the network flows: a write
    # that timed out on the client is not known not to have happened).
    assert driver.introspect.get(token.job_id) is not None


def test_a_handed_in_client_without_bounds_gets_the_call_bound(
    proxy: Proxy, server: fx.MongoServer,
) -> None:
    """A caller's MongoClient with no timeoutMS (pymongo would wait forever on a stalled socket) is bounded
    per call by call_timeout."""
    with MongoClient(_url(proxy)) as client:
        assert client.options.timeout is None
        assert client.options.pool_options.socket_timeout is None
        driver = MongoDriver(client, database=f"jc_test_{uuid.uuid4().hex[:16]}", clock=ManualClock(START),
                             call_timeout=BOUND, auto_migrate=True)
        try:
            driver.enqueue("warm")
            proxy.freeze()
            _coded_within(lambda: driver.claim(["default"], worker_id="w", lease=30), BOUND)
        finally:
            proxy.thaw()
            driver.close()
            server.client.drop_database(driver._jobs.database.name)


def test_a_server_that_accepts_and_never_answers_is_unavailable_within_the_bound(proxy: Proxy) -> None:
    """Connecting to a peer that accepts and says nothing: the first call, and the store clock's first
    reading, answer a coded error within the bound."""
    proxy.freeze()
    driver = MongoDriver(_url(proxy), database="jc_never", call_timeout=BOUND, connect_timeout=0.5)
    try:
        assert isinstance(driver.clock, StoreClock)
        _coded_within(lambda: driver.enqueue("never"), BOUND)
        _coded_within(driver.clock.now, BOUND)
        error = _coded_within(lambda: driver.capabilities, BOUND)
        assert isinstance(error, BackendUnavailable)
    finally:
        driver.close()


def test_the_store_clock_keeps_its_reading_through_a_stall(
    through: Callable[..., MongoDriver], proxy: Proxy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-reading of the server's clock due while the network stalls gives up within its own short
    bound and keeps the last reading; the call it was part of still answers within the call bound."""
    driver = through(clock=None, call_timeout=3.0)
    assert isinstance(driver.clock, StoreClock)
    first = driver.clock.now()
    monkeypatch.setattr(driver.clock, "_refresh", 0.0)  # every now() re-reads from here on
    proxy.freeze()
    began = time.monotonic()
    later = driver.clock.now()
    assert time.monotonic() - began < CLOCK_READ_BOUND + SLACK
    assert later >= first
    _coded_within(lambda: driver.enqueue("stalled"), 3.0)


def test_a_first_clock_reading_with_no_server_reports_its_own_bound() -> None:
    """With no server, the first call fails at the first reading of the server's clock: within
    that reading's own bound (CLOCK_READ_BOUND, not the 10 s call bound), and its error says
    how long it waited for a server (it used to say 10 s after waiting 2)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the driver dials it: refused at once
    driver = MongoDriver(f"mongodb://127.0.0.1:{port}/jc_nobody")
    try:
        assert isinstance(driver.clock, StoreClock)
        began = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            driver.enqueue("nowhere")
        assert time.monotonic() - began < CLOCK_READ_BOUND + SLACK
    finally:
        driver.close()
    assert f"waiting for a server {CLOCK_READ_BOUND:g}s" in caught.value.cause
    assert f"the driver waited {CLOCK_READ_BOUND:g}s for a server" in caught.value.fix
    # and no advice that cannot help: call_timeout= does not lengthen a clock reading's wait
    assert "call_timeout" not in caught.value.fix


def test_the_change_stream_outlives_a_stall(
    through: Callable[..., MongoDriver], proxy: Proxy, server: fx.MongoServer,
) -> None:
    """Wake-ups through a network that stalled longer than the call bound: the stream's polls time out,
    it reopens by itself once the network flows, and wake-ups resume."""
    driver = through()
    if "notify" not in driver.capabilities:
        pytest.skip("the server offers no change streams")
    woken = threading.Event()
    subscription = driver.subscribe(["default"], lambda queue: woken.set())
    direct = MongoDriver(server.client, database=driver._jobs.database.name, clock=driver.clock,
                         **server.driver_options)
    try:
        proxy.freeze()
        time.sleep(BOUND * 2.5)  # the fault itself: polls and reopens time out meanwhile
        proxy.thaw()
        deadline = time.monotonic() + 15
        while not woken.is_set() and time.monotonic() < deadline:
            direct.enqueue("wakes")
            woken.wait(0.5)
        assert woken.is_set(), "wake-ups did not resume after the stall"
        assert driver._hub is not None
        assert driver._hub._thread.is_alive()
    finally:
        subscription.close()
        direct.close()


@pytest.mark.parametrize(
    ("uri_query", "options", "call", "connect"),
    [
        ("", {}, 10.0, 5.0),
        ("timeoutMS=2500&connectTimeoutMS=700", {}, 2.5, 0.7),
        ("TIMEOUTMS=2500", {"call_timeout": 4}, 2.5, 5.0),
        ("", {"call_timeout": 3, "connect_timeout": 1.5}, 3.0, 1.5),
        ("timeoutMS=0", {}, None, 5.0),
    ],
    ids=["defaults", "uri-sets-both", "uri-wins-any-case", "keywords", "uri-switches-off"],
)
def test_a_client_made_from_a_uri_is_bounded_unless_the_uri_says_otherwise(
    uri_query: str, options: dict[str, Any], call: float | None, connect: float,
) -> None:
    """call_timeout/connect_timeout become timeoutMS/connectTimeoutMS unless the URI sets them itself."""
    driver = MongoDriver(f"mongodb://127.0.0.1:9/?{uri_query}", clock=ManualClock(START), **options)
    try:
        assert driver._bounds.call == call
        assert driver._bounds.connect == connect
        assert driver._client.options.pool_options.connect_timeout == connect
    finally:
        driver.close()


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "5", None])
def test_a_bound_that_is_not_a_positive_duration_is_refused(value: Any) -> None:
    """call_timeout and connect_timeout must be positive finite durations (JC_OPTION_INVALID)."""
    for name in ("call_timeout", "connect_timeout"):
        with pytest.raises(OptionInvalid) as caught:
            MongoDriver("mongodb://127.0.0.1:9/", **{name: value})
        assert name in caught.value.cause


# -- F06: recovery after a restart ---------------------------------------------------------------


def test_the_first_call_after_every_connection_was_cut_succeeds(
    through: Callable[..., MongoDriver], proxy: Proxy,
) -> None:
    """Every connection of the driver dropped at once (killed sessions): the next calls simply work,
    each within a second."""
    driver = through(call_timeout=5.0)
    job = driver.enqueue("survives")
    driver.claim(["default"], worker_id="w", lease=30, start=False)
    for _ in range(3):
        proxy.cut()
        proxy.heal()  # only the connections open now are reset
        began = time.monotonic()
        assert driver.introspect.get(job.id) is not None
        assert driver.enqueue("after").state == "ready"
        took = time.monotonic() - began
        assert took < 1.0, f"the first calls after the cut took {took:.2f}s"


@pytest.fixture(params=[False, True], ids=["replica-set", "standalone"])
def restartable(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[dict[str, Any]]:
    """A stand-in server of its own, on a fixed port and storage so it can be stopped and started again;
    advertised as a one-node replica set (pymongo retries writes) or as a standalone server (it does not)."""
    if fx.secantus_binary() is None:
        pytest.skip("secantusd-py is not installed")
    port, storage, standalone = fx.free_port(), str(tmp_path / "restart"), request.param
    process, url, _ = fx.start_secantus(port, storage, standalone=standalone)
    state: dict[str, Any] = {
        "process": process, "url": url, "port": port, "storage": storage, "standalone": standalone,
    }
    yield state
    state["process"].terminate()
    state["process"].wait(timeout=15)


def _restart(state: dict[str, Any]) -> float:
    """Start the server again; answers the monotonic instant it first accepted a TCP connection.

    The server is started from this (the main) thread: the fixture asks Linux to stop it
    when the thread that spawned it ends. A helper thread watches the port.
    """
    accepted: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", state["port"]), timeout=0.05).close()
            except OSError:
                time.sleep(0.002)
                continue
            accepted.append(time.monotonic())
            return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    state["process"] = fx.start_secantus(state["port"], state["storage"], standalone=state["standalone"])[0]
    watcher.join(60)
    assert accepted, "the server did not come back"
    return accepted[0]


def test_the_first_call_after_a_restart_succeeds_within_a_second(restartable: dict[str, Any]) -> None:
    """Server stopped (calls answer JC_DB_UNAVAILABLE), then started again: the driver's first call once it
    accepts connections succeeds within about a second, a call already waiting succeeds as it comes back,
    and wake-ups resume."""
    driver = MongoDriver(restartable["url"], database="jc_recover", call_timeout=2.0, auto_migrate=True)  # store clock
    woken = threading.Event()
    subscription = driver.subscribe(["default"], lambda queue: woken.set()) if "notify" in driver.capabilities else None
    try:
        first, second = driver.enqueue("survives"), driver.enqueue("waits")
        restartable["process"].terminate()
        restartable["process"].wait(timeout=15)
        _coded_within(lambda: driver.claim(["default"], worker_id="w", lease=30), 2.0)

        # A claim that is waiting for a server when it comes back (its own driver, a long bound).
        patient = MongoDriver(restartable["url"], database="jc_recover", call_timeout=30.0)
        waiting: dict[str, Any] = {}

        def claim_while_down() -> None:
            try:
                waiting["result"] = patient.claim(["default"], worker_id="w1", lease=30)
            except Exception as exc:
                waiting["error"] = exc
            waiting["at"] = time.monotonic()

        thread = threading.Thread(target=claim_while_down, daemon=True)
        thread.start()
        time.sleep(0.3)
        accepted = _restart(restartable)
        began = time.monotonic()
        taken = driver.claim(["default"], worker_id="w2", lease=30).claimed
        took = time.monotonic() - began
        thread.join(30)
        patient.close()
        assert took < 1.0, f"the first call after the restart took {took:.2f}s"
        assert "at" in waiting, "the waiting claim never returned"
        assert "error" not in waiting, f"the waiting claim failed: {waiting.get('error')!r}"
        assert waiting["at"] - accepted < 1.5, f"the waiting claim returned {waiting['at'] - accepted:.2f}s after"
        ids = {c.job.id for c in taken} | {c.job.id for c in waiting["result"].claimed}
        assert ids == {first.id, second.id}
        if subscription is not None:
            woken.clear()
            deadline = time.monotonic() + 10
            while not woken.is_set() and time.monotonic() < deadline:
                driver.enqueue("wakes")
                woken.wait(0.5)
            assert woken.is_set(), "wake-ups did not resume after the restart"
    finally:
        if subscription is not None:
            subscription.close()
        driver.close()


def _url(proxy: Proxy) -> str:
    """A direct ``mongodb://`` URL through ``proxy``."""
    return f"mongodb://{proxy.host}:{proxy.port}/?directConnection=true"
