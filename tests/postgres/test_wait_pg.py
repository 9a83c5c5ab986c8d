"""Waiting on results on PostgreSQL (rules A): only waited-on rows are NOTIFYed; poolers fall back to polling.

NOTIFY at commit takes a lock held to the end of the commit, serialising every notifying
commit in the cluster, so a job nobody waits on must never send one. These tests LISTEN on
the finish channel with a connection of their own and count what the server delivers.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _jobs
from psycopg import sql

from fixtures import pgbouncer as pb
from fixtures import postgres as fx
from jobcore.records import JobState


def _listening(pg_url: str, channel: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return conn


def _heard(conn: psycopg.Connection[Any], seconds: float) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=seconds)]


def _waited(driver: Any, pool: Any, job_id: str) -> bool:
    with pool.connection() as conn:
        row = conn.execute(
            sql.SQL("SELECT waited FROM {} WHERE id = %s").format(sql.Identifier(driver.schema, "jobs")), (int(job_id),)
        ).fetchone()
    return bool(row[0])


def test_jobs_nobody_waits_on_send_no_notify(driver: Any, pg_url: str, clock: Any) -> None:
    """Acks, nacks to dead and failed, cancels and burials of jobs nobody waits on: not one NOTIFY."""
    listener = _listening(pg_url, driver.finish_channel)
    try:
        for n in range(10):
            driver.enqueue("plain", {"n": n}, max_attempts=1)
        claimed = driver.claim(["default"], worker_id="w", lease=30, limit=10).claimed
        driver.ack_many([(c.token, n) for n, c in enumerate(claimed[:4])])
        driver.ack_many([(c.token, None) for c in claimed[4:6]], landed_only=True)
        driver.nack(claimed[6].token, "dead")
        driver.nack(claimed[7].token, "failed", fail=True)
        clock.advance(seconds=31)
        assert len(driver.claim(["default"], worker_id="w2", lease=30).buried) == 2
        driver.introspect.cancel(driver.enqueue("cancelled").id)
        driver.enqueue("cancelled too")
        assert driver.introspect.cancel_many().affected == 1
        assert driver.introspect.stats().count(JobState.DONE) == 6
        assert _heard(listener, 0.5) == []
    finally:
        listener.close()


def test_a_waited_on_job_sends_one_notify_with_its_id(driver: Any, pg_url: str, pool: Any) -> None:
    """wait marks the row; its ack NOTIFYs the finish channel once, with the job id; another job's ack sends none."""
    listener = _listening(pg_url, driver.finish_channel)
    try:
        job = driver.enqueue("waited")
        other = driver.enqueue("other")
        claimed = {c.job.id: c.token for c in driver.claim(["default"], worker_id="w", lease=30, limit=2).claimed}
        answers: list[Any] = []
        waiter = threading.Thread(target=lambda: answers.append(driver.wait(job.id, timeout=60, poll=60)))
        waiter.start()
        deadline = time.monotonic() + 10
        while not _waited(driver, pool, job.id) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _waited(driver, pool, job.id)
        assert not _waited(driver, pool, other.id)
        driver.ack(claimed[other.id])
        driver.ack(claimed[job.id], "yes")
        waiter.join(30)
        assert [a.result for a in answers] == ["yes"]
        assert _heard(listener, 0.5) == [job.id]
    finally:
        listener.close()


def test_behind_a_pooler_without_listen_url_wait_polls_and_marks_nothing(
    request: pytest.FixtureRequest, pg_url: str, pool: Any,
) -> None:
    """LISTEN cannot go through a transaction pooler: no finish_notify; wait polls, the row is never marked."""
    bouncer = pb.bouncer_url(request.config)
    schema = fx.schema_name()
    driver = PostgresDriver(bouncer, schema=schema)
    try:
        driver.migrate()
        assert "finish_notify" not in driver.capabilities
        job = driver.enqueue("x")
        token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
        answers: list[Any] = []
        waiter = threading.Thread(target=lambda: answers.append(driver.wait(job.id, timeout=60, poll=0.1)))
        waiter.start()
        time.sleep(0.3)
        assert not _waited(driver, pool, job.id)
        driver.ack(token, 7)
        waiter.join(30)
        assert [a.result for a in answers] == [7]
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


def test_a_pooled_listen_url_falls_back_to_polling(request: pytest.FixtureRequest, pg_url: str, pool: Any) -> None:
    """A listen_url that is itself the pooler is found out by the watch; wait still answers, by polling."""
    bouncer = pb.bouncer_url(request.config)
    schema = fx.schema_name()
    driver = PostgresDriver(bouncer, schema=schema, listen_url=bouncer)
    try:
        driver.migrate()
        job = driver.enqueue("x")
        token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
        answers: list[Any] = []
        waiter = threading.Thread(target=lambda: answers.append(driver.wait(job.id, timeout=60, poll=0.1)))
        waiter.start()
        time.sleep(0.5)
        driver.ack(token, 8)
        waiter.join(30)
        assert [a.result for a in answers] == [8]
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


def _five_waiting(driver: Any, name: str) -> tuple[list[Any], dict[str, Any], dict[str, Any], list[threading.Thread]]:
    """Five claimed jobs of ``name``, each with a thread started waiting on it: (jobs, tokens, answers, threads)."""
    jobs = [driver.enqueue(name, {"n": n}) for n in range(5)]
    tokens = {c.job.id: c.token for c in driver.claim(["default"], worker_id="w", lease=30, limit=5).claimed}
    answers: dict[str, Any] = {}
    waiters = [
        threading.Thread(target=lambda j=j: answers.__setitem__(j.id, driver.wait(j.id, timeout=60, poll=60)))
        for j in jobs
    ]
    for waiter in waiters:
        waiter.start()
    return jobs, tokens, answers, waiters


def test_waiters_share_one_listening_connection(driver: Any, pool: Any) -> None:
    """Five waits at once hold one LISTEN connection between them (the driver's finish hub), and all answer."""
    jobs, tokens, answers, waiters = _five_waiting(driver, "shared")
    deadline = time.monotonic() + 10
    while not all(_waited(driver, pool, j.id) for j in jobs) and time.monotonic() < deadline:
        time.sleep(0.01)
    with pool.connection() as conn:
        listening = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (sql.SQL("LISTEN {}").format(sql.Identifier(driver.finish_channel)).as_string(conn),),
        ).fetchone()
    assert listening == (1,)
    for job in jobs:
        driver.ack(tokens[job.id], job.payload["n"])
    for waiter in waiters:
        waiter.join(30)
    assert {job_id: a.result for job_id, a in answers.items()} == {j.id: j.payload["n"] for j in jobs}


def test_waits_that_start_together_open_one_listening_connection(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five first waits racing while the finish hub is slow to open: one hub is opened, not one per wait."""
    opened: list[Any] = []
    real = _jobs.FinishHub

    def slow_hub(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # a slow connect: every wait is started before the first hub is up
        hub = real(*args, **kwargs)
        opened.append(hub)
        return hub

    monkeypatch.setattr(_jobs, "FinishHub", slow_hub)
    jobs, tokens, answers, waiters = _five_waiting(driver, "raced")
    time.sleep(0.6)
    for job in jobs:
        driver.ack(tokens[job.id], job.payload["n"])
    for waiter in waiters:
        waiter.join(30)
    assert len(opened) == 1
    assert {job_id: a.result for job_id, a in answers.items()} == {j.id: j.payload["n"] for j in jobs}
