"""Transactional enqueue: the job exists if and only if the caller's transaction commits."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from jobcore.errors import OptionInvalid


def test_enqueue_in_a_committed_transaction_exists(driver: Any, pg_url: str) -> None:
    """A job enqueued on the caller's connection appears once the caller commits, not before."""
    with psycopg.connect(pg_url) as conn:
        job = driver.enqueue("mail", {"to": "a"}, connection=conn)
        assert driver.introspect.get(job.id) is None  # not visible outside the open transaction
        conn.commit()
    assert driver.introspect.get(job.id) == job


def test_enqueue_in_a_rolled_back_transaction_does_not_exist(driver: Any, pg_url: str) -> None:
    """Rolling back the caller's transaction takes the job with it."""
    with psycopg.connect(pg_url) as conn:
        job = driver.enqueue("mail", {"to": "a"}, connection=conn)
        conn.rollback()
    assert driver.introspect.get(job.id) is None
    assert driver.claim(["default"], worker_id="w", lease=30).claimed == ()


def test_enqueue_many_joins_the_transaction_both_ways(driver: Any, pg_url: str) -> None:
    """enqueue_many on a connection commits or rolls back with the caller's own writes."""
    with psycopg.connect(pg_url) as conn:
        kept = driver.enqueue_many([{"name": "a"}, {"name": "b"}], connection=conn)
        conn.commit()
        dropped = driver.enqueue_many([{"name": "c"}, {"name": "d"}], connection=conn)
        conn.rollback()
    assert [driver.introspect.get(j.id) for j in kept] == kept
    assert [driver.introspect.get(j.id) for j in dropped] == [None, None]


def test_transaction_context_manager(driver: Any, pg_url: str) -> None:
    """Inside ``with conn.transaction()``, an exception undoes the enqueue."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        gone: list[Any] = []

        def failing_unit_of_work() -> None:
            with conn.transaction():
                gone.append(driver.enqueue("x", connection=conn))
                raise RuntimeError("the caller's own work failed")

        with pytest.raises(RuntimeError):
            failing_unit_of_work()
        with conn.transaction():
            kept = driver.enqueue("x", connection=conn)
    assert driver.introspect.get(gone[0].id) is None
    assert driver.introspect.get(kept.id) == kept


def test_no_wake_up_for_a_rolled_back_enqueue(driver: Any, pg_url: str) -> None:
    """NOTIFY is transactional: a rolled-back enqueue wakes nobody, a committed one does."""
    woken = threading.Event()
    sub = driver.subscribe(["default"], lambda q: woken.set())
    try:
        with psycopg.connect(pg_url) as conn:
            driver.enqueue("x", connection=conn)
            conn.rollback()
        assert not woken.wait(0.3)
        with psycopg.connect(pg_url) as conn:
            driver.enqueue("x", connection=conn)
            conn.commit()
        assert woken.wait(5)
    finally:
        sub.close()


def test_connection_must_be_a_psycopg_connection(driver: Any) -> None:
    """Anything else as ``connection`` is refused before anything is written."""
    with pytest.raises(OptionInvalid):
        driver.enqueue("x", connection="not a connection")
    assert driver.introspect.list().jobs == ()
