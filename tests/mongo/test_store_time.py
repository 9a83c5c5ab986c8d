"""Rule F01 on the MongoDB driver: with no clock injected it decides on the server's clock.

A driver made with no ``clock`` reads the server's time (``hello``'s ``localTime``) and
carries it forward on this host's monotonic clock. Here the process's wall clock is
shifted in-process, an hour ahead and an hour behind (``time.time`` and
``datetime.now`` as ``jobcore.clock`` sees them): the driver takes no live lease, runs
nothing before its ``run_at``, writes no lease already lapsed, and rescue leaves live
leases alone. The server's own clock is untouched (it runs in another process).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from pymongo import MongoClient

from fixtures import mongo as fx
from jobcore import clock as clock_module
from jobcore.clock import ManualClock, StoreClock, SystemClock, utc
from jobcore.errors import BackendUnavailable
from jobcore.records import JobState

HOUR = timedelta(hours=1)


@contextlib.contextmanager
def wall_clock_off(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> Iterator[None]:
    """This process's wall clock moved by ``offset`` (what a driver deciding on it would read)."""
    real_time, real_ns, seconds = time.time, time.time_ns, offset.total_seconds()

    class Shifted(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return datetime.now(tz) + offset

    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + seconds)
        patch.setattr(time, "time_ns", lambda: real_ns() + int(seconds * 1e9))
        patch.setattr(clock_module, "datetime", Shifted)
        yield


def _server_now(driver: MongoDriver) -> datetime:
    found = driver._client.admin.command("hello")["localTime"]
    return found.replace(tzinfo=utc) if found.tzinfo is None else found


@pytest.fixture
def store_driver(server: fx.MongoServer, make: Callable[..., Any]) -> Iterator[Callable[[], MongoDriver]]:
    """``build()``: a driver on the server's own clock (none injected), all on one migrated database."""
    base = make()
    made: list[MongoDriver] = []

    def build() -> MongoDriver:
        driver = MongoDriver(base._client, database=base._jobs.database.name, **server.driver_options)
        made.append(driver)
        return driver

    yield build
    for driver in made:
        driver.close()


def test_the_default_clock_is_the_servers(store_driver: Callable[[], MongoDriver]) -> None:
    """With no clock injected, driver.clock is a StoreClock reading the server's time to within a round trip."""
    driver = store_driver()
    assert isinstance(driver.clock, StoreClock)
    before = _server_now(driver)
    now = driver.clock.now()
    after = _server_now(driver)
    slack = timedelta(milliseconds=50)
    assert before - slack <= now <= after + slack
    assert driver.clock.rtt is not None


@pytest.mark.parametrize("offset", [HOUR, -HOUR], ids=["ahead", "behind"])
def test_a_process_whose_wall_clock_is_off_still_decides_on_the_servers(
    store_driver: Callable[[], MongoDriver], monkeypatch: pytest.MonkeyPatch, offset: timedelta,
) -> None:
    """An hour off: no live lease taken, nothing claimed before its run_at, no lease written lapsed,
    no live lease rescued, no live slot taken, a delay counted from the server's time."""
    correct = store_driver()
    live = correct.enqueue("held", queue="f01")
    holder = correct.claim(["f01"], worker_id="w-correct", lease=60).claimed[0]
    later = correct.enqueue("later", queue="f01", delay=timedelta(minutes=30))
    due = correct.enqueue("due", queue="f01")
    assert correct.leases.acquire("f01-slot", 1, "w-correct", 60)

    with wall_clock_off(monkeypatch, offset):
        assert abs((SystemClock().now() - _server_now(correct)) - offset) < timedelta(seconds=5), "the shift took"
        skewed = store_driver()  # made, and first reads the server, while the wall clock is off
        before = _server_now(skewed)
        taken = skewed.claim(["f01"], worker_id="w-skewed", limit=10, lease=30)
        assert [c.job.id for c in taken.claimed] == [due.id], "took a live lease or a job not yet due"
        assert taken.buried == ()
        lease = taken.claimed[0].job.lease_expires_at
        assert lease is not None
        assert 25 < (lease - before).total_seconds() < 35, "the lease is not 30 s from the server's time"
        assert skewed.introspect.rescue().requeued == 0
        assert skewed.introspect.rescue().buried == ()
        assert not skewed.leases.acquire("f01-slot", 1, "w-skewed", 30)
        made = skewed.enqueue("delayed", queue="f01-delay", delay=60)
        assert abs((made.run_at - _server_now(skewed)).total_seconds() - 60) < 5
        assert abs((made.created_at - _server_now(skewed)).total_seconds()) < 5
        assert skewed.heartbeat(taken.claimed[0].token, 30)
        assert skewed.ack(taken.claimed[0].token) is not None

    kept = correct.introspect.get(live.id)
    assert kept is not None
    assert (kept.state, kept.claim_no) == (JobState.RUNNING, holder.token.claim_no)
    waiting = correct.introspect.get(later.id)
    assert waiting is not None
    assert waiting.state is JobState.SCHEDULED
    assert correct.ack(holder.token, "mine") is not None


def test_an_injected_clock_still_stands_in_for_the_servers(make: Callable[..., Any], clock: ManualClock) -> None:
    """A ManualClock injected decides everything, however far it is from the server's time."""
    driver = make()
    assert driver.clock is clock
    assert abs(_server_now(driver) - clock.now()) > timedelta(days=1)
    job = driver.enqueue("later", delay=30)
    assert job.created_at == clock.now()
    assert job.run_at == clock.now() + timedelta(seconds=30)
    assert driver.claim(["default"], worker_id="w", lease=10).claimed == ()
    clock.advance(seconds=30)
    taken = driver.claim(["default"], worker_id="w", lease=10).claimed[0]
    assert taken.job.lease_expires_at == clock.now() + timedelta(seconds=10)


def test_an_unreachable_server_makes_the_store_clock_a_coded_error(server: fx.MongoServer) -> None:
    """With no reading yet and no server, driver.clock.now() is JC_DB_UNAVAILABLE, not a pymongo error."""
    with MongoClient(f"mongodb://127.0.0.1:{fx.free_port()}/?directConnection=true") as client:
        driver = MongoDriver(client, call_timeout=0.5)
        with pytest.raises(BackendUnavailable) as caught:
            driver.clock.now()
        assert caught.value.code == "JC_DB_UNAVAILABLE"
