"""A call whose answer is lost after the server carried it out, made for real.

The driver talks to the server through the TCP proxy (``tests/postgres/proxy.py``), whose
``lose_next_reply()`` forwards the next request and resets the connection when the
server's answer comes back: the statement ran and committed, and only its answer is
gone, as on a path that breaks at that moment. The rows are counted on a connection of
the test's own.

On the tree before (7885696) such an enqueue was stored, yet answered ``JC_DB_UNAVAILABLE``
"the database connection failed ... (fix: ...; the call may be retried)": a producer
that followed the fix stored its job twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from jobcore.drivers.postgres import PostgresDriver
from psycopg import sql

from jobcore.errors import BackendUnavailable
from tests.postgres.proxy import Proxy

TWICE = "a retried enqueue without a key can store its job twice"

_ENQUEUES: dict[str, Callable[[PostgresDriver], Any]] = {
    "enqueue": lambda d: d.enqueue("charge", {"invoice": 7}),
    "enqueue_many": lambda d: d.enqueue_many([{"name": "charge", "payload": {"invoice": n}} for n in range(3)]),
}


def _stored(pool: Any, driver: PostgresDriver, name: str) -> int:
    with pool.connection() as conn:
        query = sql.SQL("SELECT count(*) FROM {} WHERE name = %s").format(sql.Identifier(driver.schema, "jobs"))
        row = conn.execute(query, (name,)).fetchone()
    return int(row[0])


@pytest.mark.parametrize("call", sorted(_ENQUEUES))
def test_an_enqueue_whose_answer_was_lost_says_it_may_have_been_stored(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], pool: Any, call: str
) -> None:
    """The job is stored and the error says so: the fix warns that a retry without a key stores it twice."""
    driver, proxy = proxied(pool_max=1)
    enqueue = _ENQUEUES[call]
    enqueue(driver)  # the connection opened and the statement known to it, as in steady state
    per_call = _stored(pool, driver, "charge")
    proxy.lose_next_reply()
    with pytest.raises(BackendUnavailable) as info:
        enqueue(driver)
    assert proxy.replies_lost == 1
    assert _stored(pool, driver, "charge") == 2 * per_call  # the server did it
    error = info.value
    assert error.code == "JC_DB_UNAVAILABLE"
    assert "lost while the call awaited its answer" in error.cause
    assert TWICE in error.fix
    assert "the call may be retried" not in error.fix
    assert len(enqueue(driver) if call == "enqueue_many" else [enqueue(driver)]) >= 1  # the next call works


def test_a_keyed_enqueue_retried_after_a_lost_answer_is_stored_once(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], pool: Any
) -> None:
    """What the fix advises: with a key, the retry answers the job the lost call stored (E02)."""
    driver, proxy = proxied(pool_max=1)
    driver.enqueue("warm", key="w")
    proxy.lose_next_reply()
    with pytest.raises(BackendUnavailable) as info:
        driver.enqueue("charge", {"invoice": 7}, key="invoice-7")
    assert TWICE in info.value.fix
    again = driver.enqueue("charge", {"invoice": 7}, key="invoice-7")
    assert again.duplicate is True
    assert _stored(pool, driver, "charge") == 1


def test_a_call_that_could_not_connect_still_says_it_may_be_retried(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], pool: Any
) -> None:
    """No connection to be had (the path closed): nothing was sent, so no warning of a double.

    A connection reset just as the statement is sent cannot be told from an answer lost:
    libpq's send succeeds into the socket's buffer, and only the read fails. That one is
    answered as possibly carried out, which is the safe side."""
    driver, proxy = proxied(pool_max=1)
    driver.enqueue("warm")
    proxy.close()  # open connections closed (FIN), new ones refused
    with pytest.raises(BackendUnavailable) as info:
        driver.enqueue("charge")
    assert TWICE not in info.value.fix
    assert "may be retried" in info.value.fix
    assert _stored(pool, driver, "charge") == 0
