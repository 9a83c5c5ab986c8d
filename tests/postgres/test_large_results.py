"""An ack batch whose results are large: sent in parts, never refused whole.

A result may be up to ``MAX_PAYLOAD_BYTES`` (1 MiB) of JSON, and a worker acks up to 500
jobs in one ``ack_many``, more than that after an outage, when its retries pile up.
PostgreSQL refuses a ``jsonb`` array above 256 MiB ("total size of jsonb array elements
exceeds the maximum", SQLSTATE 54000): such a batch failed whole (``JC_DB_ERROR``), on
every retry, until the worker gave it up and every job of it ran again. Now the driver
sends at most ``ACK_BATCH_BYTES`` of results per statement.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobcore.errors import BackendLocked
from jobcore.records import JobState
from jobcore.vocabulary import MAX_PAYLOAD_BYTES

LEASE = timedelta(seconds=600)


def _claimed(driver: Any, count: int) -> list[Any]:
    driver.enqueue_many([{"name": "big.result"} for _ in range(count)])
    claimed = list(driver.claim(["default"], worker_id="w1", limit=count, lease=LEASE).claimed)
    assert len(claimed) == count
    return claimed


def test_results_beyond_postgresqls_jsonb_limit_all_land(driver: Any) -> None:
    """270 results of 1 MiB: more than the 256 MiB one statement's jsonb may hold."""
    claimed = _claimed(driver, 270)
    big = "x" * (MAX_PAYLOAD_BYTES - 16)  # a JSON string of just under 1 MiB
    assert driver.ack_many([(c.token, big) for c in claimed], landed_only=True) == [True] * 270
    stats = driver.introspect.stats()
    assert stats.count(JobState.DONE) == 270
    assert driver.introspect.get(claimed[-1].job.id).result == big


def test_parts_answer_in_input_order_and_report_a_locked_row_of_any_part(
    driver: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With parts of 3 results, a row locked in the second part: the others land, the
    error names that one item at its input position, full answers come back in order."""
    from jobcore.drivers.postgres import _jobs  # noqa: PLC0415

    monkeypatch.setattr(_jobs, "ACK_BATCH_BYTES", 3 * 10)
    claimed = _claimed(driver, 8)
    items = [(c.token, "r" * 8) for c in claimed]  # '"rrrrrrrr"': 10 characters of JSON each
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(psycopg.connect(pg_url))
        conn.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(sql.Identifier(driver.schema, "jobs")),
            (int(claimed[4].job.id),),
        )
        with pytest.raises(BackendLocked) as caught:
            driver.ack_many(items)
        stack.close()
    assert caught.value.locked == (4,)
    answers = caught.value.answers
    assert answers is not None
    assert [a is not None for a in answers] == [True, True, True, True, False, True, True, True]
    assert [a.id for a in answers if a is not None] == [c.job.id for i, c in enumerate(claimed) if i != 4]
    assert all(a.result == "rrrrrrrr" for a in answers if a is not None)
    assert driver.ack_many([items[4]]) != [None]
