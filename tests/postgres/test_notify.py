"""LISTEN/NOTIFY wake-ups: subscriptions fire on writes that make jobs due in their queues."""

from __future__ import annotations

import queue
from datetime import timedelta
from typing import Any

import pytest

WAIT = 5.0


def _subscribe(driver: Any, queues: list[str]) -> tuple[Any, queue.Queue[str]]:
    heard: queue.Queue[str] = queue.Queue()
    return driver.subscribe(queues, heard.put), heard


def test_subscription_fires_on_enqueue(driver: Any) -> None:
    """An enqueue in a subscribed queue calls the callback with the queue name."""
    sub, heard = _subscribe(driver, ["mail"])
    try:
        driver.enqueue("send", queue="mail")
        assert heard.get(timeout=WAIT) == "mail"
    finally:
        sub.close()


def test_subscription_ignores_other_queues_and_future_jobs(driver: Any) -> None:
    """Only the subscribed queues are delivered; a job due later wakes nobody now."""
    sub, heard = _subscribe(driver, ["mail"])
    try:
        driver.enqueue("other", queue="reports")
        driver.enqueue("later", queue="mail", delay=timedelta(hours=1))
        with pytest.raises(queue.Empty):
            heard.get(timeout=0.5)
        driver.enqueue("now", queue="mail")
        assert heard.get(timeout=WAIT) == "mail"
    finally:
        sub.close()


def test_subscription_fires_on_nack_promote_and_rescue(driver: Any, clock: Any) -> None:
    """Retries due now, promotions and rescued leases wake subscribers too."""
    sub, heard = _subscribe(driver, ["default"])
    try:
        driver.enqueue("a")
        assert heard.get(timeout=WAIT) == "default"
        token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
        driver.nack(token, "boom")
        assert heard.get(timeout=WAIT) == "default"
        later = driver.enqueue("b", delay=60)
        driver.introspect.promote(later.id)
        assert heard.get(timeout=WAIT) == "default"
        driver.claim(["default"], worker_id="w", lease=30, limit=5)
        clock.advance(seconds=31)
        assert driver.introspect.rescue().requeued == 2
        assert heard.get(timeout=WAIT) == "default"
    finally:
        sub.close()


def test_close_is_idempotent_and_stops_delivery(driver: Any) -> None:
    """After close() nothing more is delivered; a second close() is harmless."""
    sub, heard = _subscribe(driver, ["default"])
    sub.close()
    sub.close()
    driver.enqueue("a")
    assert heard.empty()


def test_listener_reconnects_after_its_connection_is_killed(driver: Any, pool: Any) -> None:
    """A listener whose backend is terminated reconnects and reports a catch-up wake-up."""
    sub, heard = _subscribe(driver, ["default"])
    try:
        with pool.connection() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'"
                " AND pid <> pg_backend_pid()"
            )
        assert heard.get(timeout=WAIT) == "default"  # the catch-up after reconnecting
        while not heard.empty():
            heard.get()
        driver.enqueue("a")
        assert heard.get(timeout=WAIT) == "default"
    finally:
        sub.close()
