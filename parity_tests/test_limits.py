"""Edge scenarios for the limits table of ``docs/rules.md``, one per row, on every driver.

Each takes the limit exactly (accepted, with what the store then holds checked) and one
step past it (refused with its code, and nothing written). The step is the smallest the
argument's type has: one byte, character, row or unit, one millisecond for durations
(microsecond where the limit is a millisecond). ``tests/test_limits_table.py`` checks
that every row of the table links its scenario here.

Scenarios that must store more rows than the limit (a default cap of 10000 prune rows,
1000 bulk rows, 1000 claimed) first time a small batch: on a store too slow to write that
many rows within :data:`HEAVY_BUDGET` seconds (the pure-Python MongoDB-wire test server)
that part is skipped with the measured rate, and runs on a real server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._support import LEASE, all_jobs, claim_one, finished_job, refused

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobFilter, JobSpec, JobState, RetentionPolicy

MS = timedelta(milliseconds=1)
ZERO = RetentionPolicy(done=0, failed=0, cancelled=0, dead=0)
HEAVY_BUDGET = 20.0
"""Seconds a scenario may spend writing the rows past a cap before it is skipped as too slow."""


class L:
    """The limits as ``docs/rules.md`` publishes them, written out here rather than read from
    :mod:`jobcore.validate`: a driver (or a change to the shared checks) that moves a limit
    fails these scenarios. ``tests/test_limits_table.py`` checks them against the page."""

    MAX_PAYLOAD_BYTES = 1_048_576
    MAX_ERROR_TEXT_BYTES = 16_384
    MAX_JSON_DEPTH = 64
    MAX_NAME_LENGTH = 200
    MAX_ENQUEUE_BATCH = 10_000
    MAX_ENQUEUE_BATCH_BYTES = 33_554_432
    MAX_PARENTS = 1000
    MAX_CLAIM_BATCH = 1000
    MAX_BULK_ROWS = 1000
    DEFAULT_PAGE = 100
    MAX_PAGE = 200
    DEFAULT_MAX_ATTEMPTS = 20
    MAX_ATTEMPTS = 1000
    PRIORITY_MIN = -2_147_483_648
    PRIORITY_MAX = 2_147_483_647
    MIN_LEASE = timedelta(milliseconds=1)
    MAX_LEASE = timedelta(days=7)
    MAX_DELAY = timedelta(days=36_500)
    MAX_SPREAD = timedelta(hours=1)
    MAX_PRUNE_ROWS = 100_000
    DEFAULT_PRUNE_ROWS = 10_000
    DEFAULT_PRUNE_BATCH = 500
    MAX_LEASE_SLOTS = 1_000_000
    MAX_PROGRESS_MESSAGE = 500
    MAX_QUEUES = 100
    MAX_CHART_MINUTES = 1440


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _afford(
    driver: JobDriver, rows: int, move: Callable[[JobFilter], Any], *, per_row_grows: bool = False, sample: int = 50,
) -> None:
    """Skip the rest of the scenario when this store would take longer than HEAVY_BUDGET to
    write ``rows`` and ``move`` them (timed on a probe of ``sample`` rows in their own queue).

    ``per_row_grows``: moving a row costs in proportion to the rows waiting (a store that
    sorts the due set for each row it claims), so the projection grows with the square.
    ``sample``: a larger probe for a scenario of many thousand rows, where a store whose bulk
    moves slow down as its collection grows (the MongoDB stand-in) looks quick at 50.
    """
    probe = JobFilter(queue="probe")
    began = time.monotonic()
    for start in range(0, sample, 1000):
        driver.enqueue_many([JobSpec(name="probe", queue="probe")] * min(1000, sample - start))
    while getattr(move(probe), "remaining", 0):  # a bulk verb moves at most its batch a call
        pass
    projected = (time.monotonic() - began) / sample * rows * (rows / sample if per_row_grows else 1)
    driver.introspect.cancel_many(probe)
    driver.introspect.remove_many(probe)
    if projected > HEAVY_BUDGET:
        pytest.skip(f"this store writes and moves {rows} rows in about {projected:.0f}s (budget {HEAVY_BUDGET:.0f}s)")


def _fill(driver: JobDriver, rows: int, **spec: Any) -> None:
    for start in range(0, rows, 1000):
        driver.enqueue_many([JobSpec(name="fill", **spec)] * min(1000, rows - start))


# --- MAX_PAYLOAD_BYTES ------------------------------------------------------------------


def test_E03_S01_payload_and_result_of_exactly_max_payload_bytes(driver: JobDriver) -> None:
    """A payload or result of MAX_PAYLOAD_BYTES of JSON is stored whole; one byte more is refused, unwritten."""
    fits = "x" * (L.MAX_PAYLOAD_BYTES - 2)  # the two quotes make it exactly the limit
    with refused("JC_PAYLOAD_INVALID"):
        driver.enqueue("p", fits + "x")
    assert all_jobs(driver) == []
    job = driver.enqueue("p", fits)
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    with refused("JC_PAYLOAD_INVALID"):
        driver.ack(token, fits + "x")
    assert driver.introspect.get(job.id) == before
    done = driver.ack(token, fits)
    assert done is not None
    assert (done.payload, done.result) == (fits, fits)


# --- MAX_ERROR_TEXT_BYTES ---------------------------------------------------------------


def test_S02_O01_error_text_of_exactly_max_error_text_bytes(driver: JobDriver) -> None:
    """An error text or cancel reason of MAX_ERROR_TEXT_BYTES is recorded whole; one byte more is refused."""
    fits = "é" * (L.MAX_ERROR_TEXT_BYTES // 2)  # two bytes a character
    over = fits[:-1] + "xyz"
    assert len(fits.encode()) == L.MAX_ERROR_TEXT_BYTES == len(over.encode()) - 1
    job = driver.enqueue("a", max_attempts=3)
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    with refused("JC_PAYLOAD_INVALID"):
        driver.nack(token, ValueError(over))
    assert driver.introspect.get(job.id) == before
    retried = driver.nack(token, ValueError(fits))
    assert retried is not None
    assert retried.last_error is not None
    assert retried.last_error.message == fits
    with refused("JC_PAYLOAD_INVALID"):
        driver.introspect.cancel(job.id, over)
    assert state_is(driver, job.id, JobState.SCHEDULED)
    cancelled = driver.introspect.cancel(job.id, fits)
    assert cancelled is not None
    assert cancelled.last_error is not None
    assert cancelled.last_error.message == fits


def state_is(driver: JobDriver, job_id: str, state: JobState) -> bool:
    job = driver.introspect.get(job_id)
    return job is not None and job.state is state


# --- MAX_JSON_DEPTH ----------------------------------------------------------------------


def test_E03_payload_nested_exactly_max_json_depth(driver: JobDriver) -> None:
    """Lists nested MAX_JSON_DEPTH deep round-trip; one level deeper is refused, unwritten."""
    with refused("JC_PAYLOAD_INVALID"):
        driver.enqueue("p", _nested(L.MAX_JSON_DEPTH + 1))
    with refused("JC_PAYLOAD_INVALID"):
        driver.enqueue("p", {"deep": _nested(L.MAX_JSON_DEPTH)})  # the object is a level too
    assert all_jobs(driver) == []
    job = driver.enqueue("p", _nested(L.MAX_JSON_DEPTH))
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.payload == _nested(L.MAX_JSON_DEPTH)


# --- MAX_NAME_LENGTH -----------------------------------------------------------------------


def test_E04_K01_names_of_exactly_max_name_length(driver: JobDriver) -> None:
    """Names, queues, keys, worker ids and lease keys of MAX_NAME_LENGTH characters work; one more is refused."""
    fits, over = "é" * L.MAX_NAME_LENGTH, "é" * (L.MAX_NAME_LENGTH + 1)  # characters, not bytes
    for option in ({"queue": over}, {"key": over}):
        with refused("JC_OPTION_INVALID"):
            driver.enqueue("a", **option)
    with refused("JC_OPTION_INVALID"):
        driver.enqueue(over)
    assert all_jobs(driver) == []
    job = driver.enqueue(fits, queue=fits, key=fits)
    assert (job.name, job.queue, job.key) == (fits, fits, fits)
    with refused("JC_OPTION_INVALID"):
        driver.claim([fits], worker_id=over, lease=LEASE)
    assert state_is(driver, job.id, JobState.READY)
    claimed = claim_one(driver, fits, worker=fits)
    assert (claimed.job.id, claimed.job.worker_id) == (job.id, fits)
    for key, holder in ((over, "h"), ("k", over)):
        with refused("JC_OPTION_INVALID"):
            driver.leases.acquire(key, 1, holder, LEASE)
    assert driver.leases.acquire("k", 1, "someone", LEASE) is True  # the refusals took no slot
    assert driver.leases.acquire(fits, 1, fits, LEASE) is True
    assert driver.leases.renew(fits, fits, LEASE) is True


# --- MAX_ENQUEUE_BATCH ------------------------------------------------------------------


def test_E05_batch_of_exactly_max_enqueue_batch(driver: JobDriver) -> None:
    """enqueue_many takes MAX_ENQUEUE_BATCH specs; one more refuses the whole batch, nothing written."""
    same = JobSpec(name="a", key="one")  # one row stored however many specs name it: cheap on every store
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([JobSpec(name="fresh"), *[same] * L.MAX_ENQUEUE_BATCH])
    assert all_jobs(driver) == []
    answers = driver.enqueue_many([JobSpec(name="fresh"), *[same] * (L.MAX_ENQUEUE_BATCH - 1)])
    assert len(answers) == L.MAX_ENQUEUE_BATCH
    assert [a.duplicate for a in answers[:3]] == [False, False, True]
    assert {a.id for a in answers[2:]} == {answers[1].id}
    assert sorted(j.name for j in all_jobs(driver)) == ["a", "fresh"]


def test_E05_batch_of_exactly_max_enqueue_batch_bytes(driver: JobDriver) -> None:
    """enqueue_many stores MAX_ENQUEUE_BATCH_BYTES of payload, UTF-8 bytes; one byte more refuses it all."""
    # Counted in bytes, not characters: one payload is two-byte characters. Each comes back whole (E03).
    whole = L.MAX_PAYLOAD_BYTES
    count = L.MAX_ENQUEUE_BATCH_BYTES // whole
    plain = "x" * (whole - 2)  # the two quotes make each exactly MAX_PAYLOAD_BYTES
    accented = "é" * ((whole - 2) // 2)
    fits = [JobSpec(name="big", payload=accented), *[JobSpec(name="big", payload=plain)] * (count - 1)]
    assert sum(len(json.dumps(s.payload, ensure_ascii=False).encode()) for s in fits) == L.MAX_ENQUEUE_BATCH_BYTES
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([*fits, JobSpec(name="small", payload=0)])
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([*fits, JobSpec(name="big", payload=plain), JobSpec(name="small")])
    assert all_jobs(driver) == []
    answers = driver.enqueue_many(fits)
    assert [a.payload for a in answers] == [accented, *[plain] * (count - 1)]
    stored = {j.id: j.payload for j in all_jobs(driver)}
    assert sorted(stored) == sorted(a.id for a in answers)
    assert stored[answers[0].id] == accented
    assert all(stored[a.id] == plain for a in answers[1:])


# --- MAX_PARENTS ----------------------------------------------------------------------------


def test_D04_parents_of_exactly_max_parents(driver: JobDriver) -> None:
    """A job may depend on MAX_PARENTS jobs; one more is JC_DEPENDENCY_INVALID, nothing written."""
    parts = [JobSpec(name="part", queue="p") for _ in range(L.MAX_PARENTS + 1)]
    with refused("JC_DEPENDENCY_INVALID"):
        driver.enqueue_many([*parts, JobSpec(name="report", depends_on=range(L.MAX_PARENTS + 1))])
    assert all_jobs(driver) == []
    group = [*parts[:-1], JobSpec(name="report", depends_on=range(L.MAX_PARENTS))]
    if "dependencies" not in driver.capabilities:
        with refused("JC_NOT_SUPPORTED"):
            driver.enqueue_many(group)
        assert all_jobs(driver) == []
        return
    *_, report = driver.enqueue_many(group)
    assert report.state is JobState.SUSPENDED
    assert len(driver.introspect.parents(report.id)) == L.MAX_PARENTS


# --- MAX_CLAIM_BATCH ----------------------------------------------------------------------


def test_C05_claim_limit_of_exactly_max_claim_batch(driver: JobDriver) -> None:
    """claim(limit=MAX_CLAIM_BATCH) is accepted and takes that many of more; one more is refused, nothing claimed."""
    job = driver.enqueue("a")
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], worker_id="w", limit=L.MAX_CLAIM_BATCH + 1, lease=LEASE)
    assert state_is(driver, job.id, JobState.READY)
    assert len(driver.claim(["default"], worker_id="w", limit=L.MAX_CLAIM_BATCH, lease=LEASE).claimed) == 1
    _afford(driver, L.MAX_CLAIM_BATCH + 1,
            lambda probe: driver.claim(["probe"], worker_id="w", limit=50, lease=LEASE), per_row_grows=True)
    _fill(driver, L.MAX_CLAIM_BATCH + 1, queue="many")
    taken = driver.claim(["many"], worker_id="w", limit=L.MAX_CLAIM_BATCH, lease=LEASE).claimed
    assert len(taken) == L.MAX_CLAIM_BATCH
    assert len(driver.claim(["many"], worker_id="w", limit=L.MAX_CLAIM_BATCH, lease=LEASE).claimed) == 1


# --- MAX_BULK_ROWS --------------------------------------------------------------------------


def test_O05_bulk_limit_of_exactly_max_bulk_rows(driver: JobDriver) -> None:
    """Each *_many verb takes limit=MAX_BULK_ROWS; one more is refused with nothing moved."""
    ready = driver.enqueue("a")
    later = driver.enqueue("a", delay=60)
    done = finished_job(driver, "done")
    snapshot = all_jobs(driver)
    verbs = {
        "cancel_many": driver.introspect.cancel_many, "requeue_many": driver.introspect.requeue_many,
        "remove_many": driver.introspect.remove_many, "promote_many": driver.introspect.promote_many,
    }
    for verb in verbs.values():
        with refused("JC_OPTION_INVALID"):
            verb(None, limit=L.MAX_BULK_ROWS + 1)
    assert all_jobs(driver) == snapshot
    assert driver.introspect.promote_many(None, limit=L.MAX_BULK_ROWS).affected == 1
    assert driver.introspect.requeue_many(None, limit=L.MAX_BULK_ROWS).affected == 1
    assert driver.introspect.cancel_many(None, limit=L.MAX_BULK_ROWS).affected == 3
    assert driver.introspect.remove_many(None, limit=L.MAX_BULK_ROWS).affected == 3
    assert [driver.introspect.get(j.id) for j in (ready, later, done)] == [None, None, None]


def test_O05_bulk_default_limit_is_max_bulk_rows(driver: JobDriver) -> None:
    """A *_many call without a limit moves MAX_BULK_ROWS rows and reports the rest remaining."""
    _afford(driver, L.MAX_BULK_ROWS + 1, driver.introspect.remove_many)
    _fill(driver, L.MAX_BULK_ROWS + 1)
    first = driver.introspect.remove_many()
    assert (first.affected, first.remaining) == (L.MAX_BULK_ROWS, 1)
    assert len(all_jobs(driver)) == 1


# --- DEFAULT_PAGE and MAX_PAGE --------------------------------------------------------------


def test_O07_default_page_holds_default_page_jobs(driver: JobDriver) -> None:
    """list() without a limit answers DEFAULT_PAGE jobs of more, and a cursor to the rest."""
    _fill(driver, L.DEFAULT_PAGE + 1)
    page = driver.introspect.list()
    assert len(page.jobs) == L.DEFAULT_PAGE
    assert page.after is not None
    assert len(driver.introspect.list(after=page.after).jobs) == 1


def test_O07_O08_page_limit_of_exactly_max_page(driver: JobDriver) -> None:
    """list and dead_letters take limit=MAX_PAGE; one more is refused with its code."""
    _fill(driver, L.MAX_PAGE + 1)
    dead = finished_job(driver, "dead")
    with refused("JC_PAGE_INVALID"):
        driver.introspect.list(limit=L.MAX_PAGE + 1)
    page = driver.introspect.list(limit=L.MAX_PAGE)
    assert len(page.jobs) == L.MAX_PAGE
    assert page.jobs[0].id == dead.id  # newest first
    with refused("JC_OPTION_INVALID"):
        driver.introspect.dead_letters(limit=L.MAX_PAGE + 1)
    assert [j.id for j in driver.introspect.dead_letters(limit=L.MAX_PAGE)] == [dead.id]


# --- MAX_CHART_MINUTES ---------------------------------------------------------------------


def test_O10_finished_minutes_of_exactly_max_chart_minutes(driver: JobDriver, clock: ManualClock) -> None:
    """finished_per_minute takes minutes=MAX_CHART_MINUTES and reaches back that far; one more is refused."""
    finished_job(driver, "done")
    clock.advance(minutes=L.MAX_CHART_MINUTES - 1, seconds=59)
    counted = driver.introspect.finished_per_minute(L.MAX_CHART_MINUTES)
    assert [(c.state, c.count) for c in counted] == [(JobState.DONE, 1)]
    with refused("JC_OPTION_INVALID"):
        driver.introspect.finished_per_minute(L.MAX_CHART_MINUTES + 1)
    clock.advance(seconds=1)
    assert driver.introspect.finished_per_minute(L.MAX_CHART_MINUTES) == []


# --- DEFAULT_MAX_ATTEMPTS and MAX_ATTEMPTS ---------------------------------------------------


def test_E01_default_max_attempts_runs_exactly_that_many_times(driver: JobDriver) -> None:
    """A job enqueued without max_attempts gets DEFAULT_MAX_ATTEMPTS: retried until that many failed, then dead."""
    job = driver.enqueue("a")
    assert job.max_attempts == L.DEFAULT_MAX_ATTEMPTS
    for attempt in range(1, L.DEFAULT_MAX_ATTEMPTS):
        retried = driver.nack(claim_one(driver).token, f"failure {attempt}")
        assert retried is not None
        assert (retried.state, retried.attempt) == (JobState.SCHEDULED, attempt)
    dead = driver.nack(claim_one(driver).token, "the last failure")
    assert dead is not None
    assert (dead.state, dead.attempt) == (JobState.DEAD, L.DEFAULT_MAX_ATTEMPTS)


def test_E04_max_attempts_of_exactly_max_attempts(driver: JobDriver) -> None:
    """max_attempts=MAX_ATTEMPTS is stored; one more is refused, nothing written."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue("a", max_attempts=L.MAX_ATTEMPTS + 1)
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([JobSpec(name="a"), JobSpec(name="a", max_attempts=L.MAX_ATTEMPTS + 1)])
    assert all_jobs(driver) == []
    assert driver.enqueue("a", max_attempts=L.MAX_ATTEMPTS).max_attempts == L.MAX_ATTEMPTS


# --- PRIORITY_MIN and PRIORITY_MAX ---------------------------------------------------------


def test_E04_priority_of_exactly_priority_min_and_max(driver: JobDriver) -> None:
    """PRIORITY_MIN and PRIORITY_MAX are stored and claimed in order; one past either is refused, unwritten."""
    for priority in (L.PRIORITY_MIN - 1, L.PRIORITY_MAX + 1):
        with refused("JC_OPTION_INVALID"):
            driver.enqueue("a", priority=priority)
    assert all_jobs(driver) == []
    low = driver.enqueue("a", priority=L.PRIORITY_MIN)
    high = driver.enqueue("a", priority=L.PRIORITY_MAX)
    middle = driver.enqueue("a")
    assert (low.priority, high.priority) == (L.PRIORITY_MIN, L.PRIORITY_MAX)
    claimed = driver.claim(["default"], worker_id="w", limit=3, lease=LEASE).claimed
    assert [c.job.id for c in claimed] == [high.id, middle.id, low.id]


# --- MIN_LEASE and MAX_LEASE -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fits", "over"), [(L.MIN_LEASE, L.MIN_LEASE - timedelta(microseconds=1)), (L.MAX_LEASE, L.MAX_LEASE + MS)],
    ids=["min_lease", "max_lease"],
)
def test_C09_L04_K01_lease_of_exactly_min_and_max_lease(
    driver: JobDriver, clock: ManualClock, fits: timedelta, over: timedelta
) -> None:
    """Claims, heartbeats and lease slots take MIN_LEASE and MAX_LEASE exactly; one step past is refused, unwritten."""
    job = driver.enqueue("a")
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], worker_id="w", lease=over)
    assert state_is(driver, job.id, JobState.READY)
    token = claim_one(driver, lease=fits).token
    assert driver.introspect.get(job.id).lease_expires_at == clock.now() + fits  # type: ignore[union-attr]
    before = driver.introspect.get(job.id)
    with refused("JC_OPTION_INVALID"):
        driver.heartbeat(token, over)
    assert driver.introspect.get(job.id) == before
    assert driver.heartbeat(token, fits) is True
    with refused("JC_OPTION_INVALID"):
        driver.leases.acquire("k", 1, "h1", over)
    assert driver.leases.acquire("k", 1, "h2", fits) is True  # the refusal took no slot
    with refused("JC_OPTION_INVALID"):
        driver.leases.renew("k", "h2", over)
    assert driver.leases.renew("k", "h2", fits) is True
    clock.advance(fits - MS)
    assert driver.leases.acquire("k", 1, "h3", fits) is False  # renewed for exactly ``fits``: held 1 ms more
    clock.advance(MS)
    assert driver.leases.acquire("k", 1, "h3", fits) is True


# --- MAX_LEASE_SLOTS -----------------------------------------------------------------------


def test_K01_lease_limit_of_exactly_max_lease_slots(driver: JobDriver) -> None:
    """A lease key takes a limit of exactly MAX_LEASE_SLOTS; one more is refused and takes no slot."""
    with refused("JC_OPTION_INVALID"):
        driver.leases.acquire("k", L.MAX_LEASE_SLOTS + 1, "h1", 30)
    assert driver.leases.acquire("k", 1, "h2", 30) is True  # the refusal took no slot
    assert driver.leases.acquire("k", L.MAX_LEASE_SLOTS, "h1", 30) is True
    assert driver.leases.release("k", "h1") is True


# --- MAX_DELAY -----------------------------------------------------------------------------


def test_E04_delay_of_exactly_max_delay(driver: JobDriver, clock: ManualClock) -> None:
    """delay=MAX_DELAY schedules the job that far ahead; one millisecond more is refused, nothing written."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue("a", delay=L.MAX_DELAY + MS)
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([JobSpec(name="a"), JobSpec(name="a", delay=L.MAX_DELAY + MS)])
    assert all_jobs(driver) == []
    job = driver.enqueue("a", delay=L.MAX_DELAY)
    assert (job.state, job.run_at) == (JobState.SCHEDULED, clock.now() + L.MAX_DELAY)


# --- MAX_SPREAD ------------------------------------------------------------------------------


def test_O06_spread_of_exactly_max_spread(driver: JobDriver, clock: ManualClock) -> None:
    """requeue_many spreads over MAX_SPREAD exactly; one millisecond more is refused, nothing moved."""
    finished = [finished_job(driver, "dead") for _ in range(2)]
    snapshot = all_jobs(driver)
    with refused("JC_OPTION_INVALID"):
        driver.introspect.requeue_many(None, spread=L.MAX_SPREAD + MS)
    assert all_jobs(driver) == snapshot
    assert driver.introspect.requeue_many(None, spread=L.MAX_SPREAD).affected == 2
    due = sorted(driver.introspect.get(j.id).run_at for j in finished)  # type: ignore[union-attr]
    assert due == [clock.now(), clock.now() + L.MAX_SPREAD / 2]


# --- MAX_PROGRESS_MESSAGE -------------------------------------------------------------------


def test_G03_progress_message_of_exactly_max_progress_message(driver: JobDriver) -> None:
    """A message of MAX_PROGRESS_MESSAGE 3-byte characters is stored whole; one more is refused, nothing written."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    longest = "\u20ac" * L.MAX_PROGRESS_MESSAGE
    assert driver.progress(token, 0.5, longest) is True
    with refused("JC_OPTION_INVALID"):
        driver.progress(token, 0.75, longest + "x")
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.progress is not None
    assert (got.progress.value, got.progress.message) == (0.5, longest)


# --- MAX_PRUNE_ROWS, DEFAULT_PRUNE_ROWS and DEFAULT_PRUNE_BATCH -----------------------------


def test_R01_prune_limit_and_batch_of_exactly_their_maximum(driver: JobDriver) -> None:
    """prune takes limit=MAX_PRUNE_ROWS and batch=MAX_BULK_ROWS; one more of either is refused, nothing deleted."""
    job = finished_job(driver, "done")
    for options in ({"limit": L.MAX_PRUNE_ROWS + 1}, {"batch": L.MAX_BULK_ROWS + 1}):
        with refused("JC_OPTION_INVALID"):
            driver.introspect.prune(ZERO, **options)
    assert driver.introspect.get(job.id) == job
    result = driver.introspect.prune(ZERO, limit=L.MAX_PRUNE_ROWS, batch=L.MAX_BULK_ROWS)
    assert result.total_removed == 1
    assert driver.introspect.get(job.id) is None


def test_R01_default_prune_removes_at_most_default_prune_rows(driver: JobDriver) -> None:
    """A prune without a limit deletes DEFAULT_PRUNE_ROWS rows, in default-sized batches, and reports the rest."""
    # The 50-row probe saw the stand-in at about 1 ms a row; at 10,001 rows its cancel and
    # prune took 150 s, and the prune alone ran past its 120 s call bound on a loaded machine.
    _afford(driver, L.DEFAULT_PRUNE_ROWS + 1, driver.introspect.cancel_many, sample=1000)
    _fill(driver, L.DEFAULT_PRUNE_ROWS + 1)
    while driver.introspect.cancel_many().remaining:
        pass
    result = driver.introspect.prune(ZERO)
    assert result.total_removed == L.DEFAULT_PRUNE_ROWS
    assert sum(result.remaining.values()) == 1
    assert len(all_jobs(driver)) == 1


# --- the claim's queues --------------------------------------------------------------------


def test_C04_claim_of_exactly_a_hundred_queues(driver: JobDriver) -> None:
    """A claim names up to 100 queues and reads the last of them; a 101st is refused, nothing claimed."""
    queues = [f"q{i:03d}" for i in range(L.MAX_QUEUES)]
    job = driver.enqueue("a", queue=queues[-1])
    with refused("JC_OPTION_INVALID"):
        driver.claim([*queues, "q100"], worker_id="w", lease=LEASE)
    assert state_is(driver, job.id, JobState.READY)
    claimed = driver.claim(queues, worker_id="w", lease=LEASE).claimed
    assert [c.job.id for c in claimed] == [job.id]
