"""The statement budget of the hot path (issue 7): a regression guard that cannot flake.

Every statement the driver sends goes through a psycopg cursor; the pool here gives the
driver a cursor class that records each statement it executes, and the driver passes its
rendered statement constants, so each one is recognised by identity of text. The tests
count statements, never time, so they pass or fail the same way on any machine; they
fail as soon as a change adds a round trip per job.

Budgets reached in issue 7:

* a claimed-and-settled job costs ``2 / batch`` statements: one ``CLAIM`` and one
  ``ACK_MANY`` per batch, every ack fenced on its own token inside that one statement;
* a job claimed held (F04, ``claim(start=False)``), started and settled costs ``3 / batch``:
  the ``START`` of a batch is one statement too (a worker holding claims starts what it is
  about to run together, right before running it: the price of never spending an attempt
  on a job it did not run);
* ``enqueue`` is one statement (``ENQUEUE_ONE`` without a key), ``enqueue_many`` one per
  call whatever its size (``ENQUEUE_MANY`` when no item has a key); ``nack`` and
  ``heartbeat`` one each, ``heartbeat_many`` one per batch;
* the worker sends nothing per job but its claims, its batched starts (when it holds
  claims) and its batched acks.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _sql, make_pool

from jobcore.registry import Registry
from jobcore.worker import Worker

JOBS = 100
CLAIM_AND_SETTLE_PER_BATCH = 2
"""Statements per claim batch settled by acks: one claim, one ack_many."""
HELD_CLAIM_START_AND_SETTLE_PER_BATCH = 3
"""Statements per batch claimed held, started and settled: one claim, one start, one ack_many."""


class Recorder:
    """The statements sent through one pool, in order (thread-safe)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.lock = threading.Lock()

    def note(self, query: Any) -> None:
        text = query if isinstance(query, bytes) else str(query).encode()
        with self.lock:
            self.sent.append(text)

    def take(self) -> list[bytes]:
        """The statements recorded since the last call (and forget them)."""
        with self.lock:
            sent, self.sent = self.sent, []
        return sent


def _cursor_class(recorder: Recorder) -> type[psycopg.Cursor[Any]]:
    class RecordingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            recorder.note(query)
            return super().execute(query, params, **kw)

        def executemany(self, query: Any, params_seq: Any, **kw: Any) -> Any:
            recorder.note(query)  # one statement per parameter set is still one call to count
            return super().executemany(query, params_seq, **kw)

    return RecordingCursor


@pytest.fixture
def counted(pg_url: str, make: Callable[..., Any]) -> Iterator[tuple[PostgresDriver, Recorder]]:
    """A driver on a pool whose cursors record every statement, warmed up (schema checked)."""
    recorder = Recorder()
    pool = make_pool(pg_url, min_size=1, max_size=4, cursor_factory=_cursor_class(recorder))
    try:
        driver = make(target=pool)
        driver.introspect.get("1")  # the one-off schema check, before anything is counted
        recorder.take()
        yield driver, recorder
    finally:
        pool.close()


def _names(driver: PostgresDriver, sent: list[bytes]) -> list[str]:
    """Each statement's constant name in ``_sql`` (``?`` for one the driver does not know)."""
    known = {value: name for name, value in vars(driver.q).items() if isinstance(value, bytes)}
    known[_sql.SESSION] = "SESSION"  # a new connection's set-up (UTC, generic plans, timeouts)
    return [known.get(text, "LISTEN" if b"LISTEN" in text[:40] else "?") for text in sent]


class Verbs:
    """The statements the verbs sent since the last :meth:`take`, by name.

    A connection the pool opens meanwhile sends its set-up (SESSION) through the same cursor
    class: psycopg_pool grows in the background when a checkout finds no idle connection,
    which a loaded machine made happen in CI. That is the pool's statement, not a verb's: it
    is counted apart (:attr:`setups`), at most once per connection the pool may add.
    """

    MOST_SETUPS = 3
    """The ``counted`` pool's max_size of 4, less the connection already open."""

    def __init__(self, counted: tuple[PostgresDriver, Recorder]) -> None:
        self.driver, self.recorder = counted
        self.setups = 0

    def take(self) -> list[str]:
        names = _names(self.driver, self.recorder.take())
        self.setups += names.count("SESSION")
        return [name for name in names if name != "SESSION"]


def test_enqueue_is_one_statement_single_or_batch(counted: tuple[PostgresDriver, Recorder]) -> None:
    """One job, one statement; a batch of any size, one statement; keyed ones too."""
    driver, _ = counted
    sent = Verbs(counted)
    verbs = sent.take

    driver.enqueue("budget", {"n": 0})
    assert verbs() == ["ENQUEUE_ONE"]
    driver.enqueue("budget", {"n": 1}, key="k1")
    assert verbs() == ["ENQUEUE"]
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(JOBS)])
    assert verbs() == ["ENQUEUE_UNIFORM"]
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}, "priority": i % 3} for i in range(JOBS)])
    assert verbs() == ["ENQUEUE_MANY"]
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}, "key": f"b{i}"} for i in range(JOBS)])
    assert verbs() == ["ENQUEUE"]
    assert sent.setups <= Verbs.MOST_SETUPS


@pytest.mark.parametrize("landed_only", [False, True], ids=["jobs", "landed_only"])
@pytest.mark.parametrize("batch", [1, 10, 100])
def test_a_claimed_and_settled_job_costs_two_statements_per_batch(
    counted: tuple[PostgresDriver, Recorder], batch: int, landed_only: bool
) -> None:
    """claim(limit=batch) + ack_many (answering jobs, or landed flags as the worker asks):
    2 / batch statements per job, each ack fenced on its token."""
    driver, _ = counted
    sent = Verbs(counted)
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(JOBS)])
    sent.take()
    settled = 0
    while settled < JOBS:
        claimed = driver.claim(["default"], worker_id="w-budget", limit=batch, lease=60).claimed
        pairs = [(c.token, None) for c in claimed]
        if landed_only:
            assert driver.ack_many(pairs, landed_only=True) == [True] * len(claimed)
        else:
            assert all(a is not None for a in driver.ack_many(pairs))
        settled += len(claimed)
    names = sent.take()
    batches = math.ceil(JOBS / batch)
    assert names == ["CLAIM", "ACK_MANY_LANDED" if landed_only else "ACK_MANY"] * batches
    assert len(names) / JOBS == CLAIM_AND_SETTLE_PER_BATCH / batch
    # the fence is inside that one statement: a stale token of the same job settles nothing
    driver.enqueue("budget", None)
    token = driver.claim(["default"], worker_id="w-budget", lease=60).claimed[0].token
    stale = attrs.evolve(token, claim_no=token.claim_no - 1)
    sent.take()
    answers = driver.ack_many([(stale, "stale"), (token, "ok")])
    assert answers[0] is None
    assert answers[1] is not None
    assert answers[1].result == "ok"
    assert sent.take() == ["ACK_MANY"]
    assert sent.setups <= Verbs.MOST_SETUPS


@pytest.mark.parametrize("batch", [1, 10, 100])
def test_a_held_claim_started_and_settled_costs_three_statements_per_batch(
    counted: tuple[PostgresDriver, Recorder], batch: int
) -> None:
    """claim(start=False) + start + ack_many(landed_only): 3 / batch statements per job."""
    driver, _ = counted
    sent = Verbs(counted)
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(JOBS)])
    sent.take()
    settled = 0
    while settled < JOBS:
        claimed = driver.claim(["default"], worker_id="w-budget", limit=batch, lease=60, start=False).claimed
        assert driver.start([c.token for c in claimed]) == [True] * len(claimed)
        assert driver.ack_many([(c.token, None) for c in claimed], landed_only=True) == [True] * len(claimed)
        settled += len(claimed)
    names = sent.take()
    assert names == ["CLAIM", "START", "ACK_MANY_LANDED"] * math.ceil(JOBS / batch)
    assert len(names) / JOBS == HELD_CLAIM_START_AND_SETTLE_PER_BATCH / batch
    assert sent.setups <= Verbs.MOST_SETUPS


def test_nack_and_heartbeat_are_one_statement_each(counted: tuple[PostgresDriver, Recorder]) -> None:
    driver, _ = counted
    sent = Verbs(counted)
    driver.enqueue("budget", None)
    token = driver.claim(["default"], worker_id="w-budget", lease=60).claimed[0].token
    sent.take()
    assert driver.heartbeat(token, 60)
    assert driver.nack(token, "boom") is not None
    assert sent.take() == ["HEARTBEAT", "NACK"]
    assert sent.setups <= Verbs.MOST_SETUPS


def test_a_batch_of_heartbeats_is_one_statement(counted: tuple[PostgresDriver, Recorder]) -> None:
    driver, _ = counted
    sent = Verbs(counted)
    driver.enqueue_many([{"name": "budget"}] * 50)
    tokens = [c.token for c in driver.claim(["default"], worker_id="w-budget", limit=50, lease=60).claimed]
    sent.take()
    assert driver.heartbeat_many(tokens, 60) == [True] * 50
    assert sent.take() == ["HEARTBEAT_MANY"]


def test_the_worker_sends_only_claims_and_batched_acks(counted: tuple[PostgresDriver, Recorder]) -> None:
    """Nothing per job but claims, starts and acks: no heartbeat, lease or lookup round trip per
    job, and no more claims, starts or acks than jobs (they batch, never split). A worker that
    holds its claims (``deferred_start``) starts what its free runners take, one statement for
    all of them."""
    driver, recorder = counted
    registry = Registry()
    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    @registry.job(name="budget")
    def budget(payload: int) -> None:
        return None

    def on_settled(_job: Any, outcome: str) -> None:
        with lock:
            count[0] += outcome == "completed"
            if count[0] == JOBS:
                done.set()

    budget.enqueue_many(list(range(JOBS)), driver=driver)
    recorder.take()
    worker = Worker(
        ["default"],
        driver=driver,
        registry=registry,
        concurrency=4,
        lease=600,
        poll_interval=0.05,
        rescue_interval=None,
        on_settled=on_settled,
        retention=None,
        scheduler=False,
    ).start()
    try:
        assert done.wait(30), f"only {count[0]} of {JOBS} jobs completed"
    finally:
        assert worker.stop(10)
    recorder_sent = recorder.take()
    names = _names(driver, recorder_sent)
    unknown = [text[:80] for text, name in zip(recorder_sent, names, strict=True) if name == "?"]
    assert not unknown
    assert names.count("LISTEN") == 1  # the wake-up subscription, once per worker
    assert names.count("SESSION") <= 1 + 3  # once per new connection: the LISTEN one, and at most the pool's 3 more
    assert {"LISTEN", "CLAIM", "ACK_MANY"} <= set(names) <= {"SESSION", "LISTEN", "CLAIM", "START", "ACK_MANY"}
    assert names.count("ACK_MANY") <= JOBS
    assert names.count("START") <= JOBS  # runners start what is waiting together; never one job twice
    assert names.count("CLAIM") - 1 <= JOBS  # at most one claim per job, plus the poll that found none


def test_progress_is_one_statement_and_the_worker_throttles_it(counted: tuple[PostgresDriver, Recorder]) -> None:
    """``progress`` is one PROGRESS statement; a handler reporting 10,000 times over about a
    second costs at most one PROGRESS per ``progress_interval`` plus the final one, and nothing
    else per report (the job without reports, above, costs none)."""
    driver, recorder = counted
    sent = Verbs(counted)
    driver.enqueue("budget", None)
    token = driver.claim(["default"], worker_id="w-budget", lease=60).claimed[0].token
    sent.take()
    assert driver.progress(token, 0.5, "half")
    assert sent.take() == ["PROGRESS"]
    assert driver.ack(token) is not None

    registry = Registry()
    interval, updates = 0.1, 10_000
    span: list[float] = []
    finished = threading.Event()

    @registry.job(name="reporting")
    def reporting(payload: int, ctx: Any) -> None:
        began = time.monotonic()
        for n in range(1, updates + 1):
            ctx.progress(n / updates, f"row {n}")
            if n % 100 == 0:
                time.sleep(0.01)
        span.append(time.monotonic() - began)

    job = reporting.enqueue(1, driver=driver)
    recorder.take()
    worker = Worker(
        ["default"], driver=driver, registry=registry, lease=600, poll_interval=0.05, rescue_interval=None,
        retention=None, scheduler=False, progress_interval=interval,
        on_settled=lambda _job, _outcome: finished.set(),
    ).start()
    try:
        assert finished.wait(30)
    finally:
        assert worker.stop(10)
    names = _names(driver, recorder.take())
    writes = names.count("PROGRESS")
    assert 2 <= writes <= span[0] / interval + 2, (writes, span)
    assert set(names) <= {"SESSION", "LISTEN", "CLAIM", "START", "ACK_MANY", "PROGRESS"}
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.progress is not None
    assert (stored.progress.value, stored.progress.message) == (1.0, f"row {updates}")
