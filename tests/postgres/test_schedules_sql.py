"""The PostgreSQL schedule store: its table, its one-transaction firing, a firer blocked on the row lock."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.postgres import _schedules
from psycopg import sql

from jobcore.errors import BackendFailure
from jobcore.records import JobSpec

MINUTE = timedelta(minutes=1)


def test_the_schedules_table_has_the_documented_columns(driver: Any, pool: Any) -> None:
    """Migration 4 makes one row per schedule, keyed by name, with the record's columns."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'schedules' ORDER BY ordinal_position",
            (driver.schema,),
        ).fetchall()
    assert [r[0] for r in rows] == list(_schedules.SCHEDULE_COLUMNS)
    assert dict(rows)["watermark"] == "timestamp with time zone"
    assert dict(rows)["definition"] == "text"


def test_a_failed_insert_rolls_the_watermark_back(driver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """fire is one transaction: when the job insert fails, the watermark has not moved and no job exists."""
    schedule = driver.schedules.declare("reports", {"every": 60})

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise BackendFailure("the insert failed")

    monkeypatch.setattr(driver, "_insert", broken)
    with pytest.raises(BackendFailure):
        driver.schedules.fire("reports", expected=schedule.watermark, occurrence=schedule.watermark + MINUTE,
                              job=JobSpec(name="report"))
    monkeypatch.undo()
    assert driver.schedules.get("reports") == schedule
    assert driver.introspect.stats().counts == {}
    fired = driver.schedules.fire("reports", expected=schedule.watermark, occurrence=schedule.watermark + MINUTE,
                                  job=JobSpec(name="report"))
    assert fired is not None


def test_a_firer_blocked_by_an_open_firing_loses_once_it_commits(driver: Any, pool: Any) -> None:
    """A fire waiting on the row lock of an uncommitted firing re-reads the moved watermark and answers None."""
    schedule = driver.schedules.declare("reports", {"every": 60})
    table = sql.Identifier(driver.schema, "schedules")
    answers: list[Any] = []
    with pool.connection() as conn:
        conn.autocommit = False
        conn.execute(
            sql.SQL("UPDATE {} SET watermark = %s WHERE name = 'reports'").format(table),
            (schedule.watermark + MINUTE,),
        )
        racer = threading.Thread(target=lambda: answers.append(driver.schedules.fire(
            "reports", expected=schedule.watermark, occurrence=schedule.watermark + MINUTE, job=JobSpec(name="r"),
        )))
        racer.start()
        racer.join(timeout=0.5)
        assert racer.is_alive(), "the second firer should wait for the row lock"
        conn.commit()
        conn.autocommit = True
    racer.join(timeout=30)
    assert answers == [None]
    assert driver.introspect.stats().counts == {}
