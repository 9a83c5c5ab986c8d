"""Store time (F01): with no clock injected, every decision is made on the server's ``now()``.

The process's own wall clock is shifted an hour either way (``jobcore.clock.datetime``,
which :class:`~jobcore.clock.SystemClock` reads): a driver on the store's clock must not
notice. An injected clock still stands in for the store's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.parity.plugin import START

import jobcore.clock
from jobcore.clock import ManualClock, StoreClock, SystemClock
from jobcore.records import JobState

SKEWS = {"+1h": timedelta(hours=1), "-1h": timedelta(hours=-1)}


def _store_now(pool: Any) -> datetime:
    with pool.connection() as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    stamp: datetime = row[0]
    return stamp.astimezone(timezone.utc)


def _near(value: datetime | None, expected: datetime, slack: float = 5.0) -> bool:
    return value is not None and abs((value - expected).total_seconds()) < slack


@pytest.fixture(params=sorted(SKEWS))
def skewed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """``shift()`` moves this process's wall clock (as jobcore reads it) by the parameter's offset."""
    offset = SKEWS[request.param]

    class Shifted(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + offset

    def shift() -> None:
        monkeypatch.setattr(jobcore.clock, "datetime", Shifted)
        assert abs((SystemClock().now() - datetime.now(timezone.utc) - offset).total_seconds()) < 1

    return shift


def test_a_client_whose_clock_is_off_decides_nothing_on_it(
    make: Callable[..., Any], pool: Any, skewed: Callable[[], None]
) -> None:
    """A driver in a process an hour off takes no live lease and nothing not yet due, writes
    leases that are live for their whole length, rescues nothing live, takes no held slot, and
    counts delays, retries and its own times from the store's now."""
    honest = make(clock=None)
    live = honest.enqueue("held", queue="f01")
    holder = honest.claim(["f01"], worker_id="w-honest", lease=60).claimed
    assert [c.job.id for c in holder] == [live.id]
    later = honest.enqueue("later", queue="f01", delay=timedelta(minutes=30))
    due = honest.enqueue("due", queue="f01")
    assert honest.leases.acquire("f01-slot", 1, "w-honest", 60)

    skewed()
    client = make(schema=honest.schema, migrate=False, clock=None)
    assert isinstance(client.clock, StoreClock)
    assert _near(client.clock.now(), _store_now(pool), 2.0), "driver.clock answers the store's time"

    before = _store_now(pool)
    taken = client.claim(["f01"], worker_id="w-skewed", limit=10, lease=30)
    assert [c.job.id for c in taken.claimed] == [due.id], "took a live lease or a job not yet due"
    assert taken.buried == ()
    lease = taken.claimed[0].job.lease_expires_at
    assert lease is not None
    assert 25 < (lease - before).total_seconds() < 35, "the lease was not counted from the store's now"
    assert _near(taken.claimed[0].job.attempted_at, before)
    assert client.heartbeat(taken.claimed[0].token, 40)
    renewed = client.introspect.get(due.id)
    assert renewed is not None
    assert renewed.lease_expires_at is not None
    assert 35 < (renewed.lease_expires_at - before).total_seconds() < 45

    rescued = client.introspect.rescue()
    assert (rescued.requeued, rescued.buried) == (0, ())
    assert not client.leases.acquire("f01-slot", 1, "w-skewed", 30)
    assert client.leases.acquire("f01-other", 1, "w-skewed", 30)
    assert client.leases.renew("f01-other", "w-skewed", 30)

    made = client.enqueue("delayed", queue="f01-delay", delay=60)
    assert made.state is JobState.SCHEDULED
    assert _near(made.created_at, before)
    assert made.run_at == made.created_at + timedelta(seconds=60)
    stored = client.introspect.get(made.id)
    assert stored is not None
    assert (stored.run_at, stored.created_at, stored.state) == (made.run_at, made.created_at, made.state)
    batch = client.enqueue_many([{"name": "b", "queue": "f01-delay", "delay": 60}, {"name": "b", "queue": "f01-now"}])
    assert [j.state for j in batch] == [JobState.SCHEDULED, JobState.READY]
    assert batch[0].run_at == batch[0].created_at + timedelta(seconds=60)
    assert batch[1].run_at == batch[1].created_at
    assert [client.introspect.get(j.id) for j in batch] == batch

    retried = client.nack(taken.claimed[0].token, "again")  # no retry_at: due at the store's now
    assert retried is not None
    assert retried.state is JobState.SCHEDULED
    assert _near(retried.run_at, before)
    assert _near(retried.errors[-1].at, before)
    assert client.claim(["f01"], worker_id="w-skewed", lease=30).claimed[0].job.id == due.id

    stats = client.introspect.stats()
    assert stats.oldest_due_age.get("f01-now", timedelta(0)) < timedelta(seconds=5)

    kept = client.introspect.get(live.id)
    assert kept is not None
    assert (kept.state, kept.claim_no) == (JobState.RUNNING, holder[0].token.claim_no)
    waiting = client.introspect.get(later.id)
    assert waiting is not None
    assert waiting.state is JobState.SCHEDULED
    assert honest.ack(holder[0].token, "mine") is not None


def test_an_injected_clock_stands_in_for_the_store(make: Callable[..., Any], pool: Any) -> None:
    """With a ManualClock injected, every time the driver writes is that clock's, years from the server's."""
    clock = ManualClock(START)
    driver = make(clock=clock)
    assert driver.clock is clock
    job = driver.enqueue("x", delay=10)
    assert (job.created_at, job.run_at, job.state) == (START, START + timedelta(seconds=10), JobState.SCHEDULED)
    assert driver.claim(["default"], worker_id="w", lease=30).claimed == ()
    clock.advance(seconds=10)
    taken = driver.claim(["default"], worker_id="w", lease=30).claimed[0]
    assert (taken.job.attempted_at, taken.job.lease_expires_at) == (
        START + timedelta(seconds=10), START + timedelta(seconds=40),
    )
    done = driver.ack(taken.token)
    assert done is not None
    assert done.finished_at == START + timedelta(seconds=10)
    assert _store_now(pool) < START  # the server's clock was never read for any of these
