"""The PostgreSQL driver's :class:`~jobcore.driver.ScheduleStore` (rules P).

One row per schedule in ``{schedules}`` (migration 4). ``fire`` is one transaction:
a compare-and-set ``UPDATE ... WHERE watermark = %(expected)s AND NOT paused`` (a
concurrent firer blocks on the row lock, then re-reads the moved watermark and
updates nothing), the job insert through the driver's own enqueue statement, and
``last_job_id``. A firer that loses the compare-and-set enqueues nothing; a
transaction that fails after it rolls the watermark back with the job. Declaring is
``INSERT ... ON CONFLICT (name) DO UPDATE``, so racing declarers end with one row.
"""

# ruff: noqa: S608 - templates are built from constants and quoted identifiers only; values are bind parameters
from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from jobcore import validate as v
from jobcore.records import JobSpec, Schedule, ScheduleOutcome

from ._sql import NOW, render

if TYPE_CHECKING:
    from . import PostgresDriver

__all__ = ["PostgresSchedules"]

SCHEDULE_COLUMNS: Final = (
    "name", "definition", "watermark", "paused", "last_fired_at", "last_outcome", "last_job_id", "created_at",
    "updated_at",
)
_COLS: Final = ", ".join(f"s.{c}" for c in SCHEDULE_COLUMNS)
_LIVE: Final = "('scheduled', 'ready', 'running', 'suspended')"

DECLARE: Final = f"""
INSERT INTO {{schedules}} AS s (name, definition, watermark, paused, created_at, updated_at)
VALUES (%(name)s, %(definition)s, coalesce(%(watermark)s::timestamptz, {NOW}), false, {NOW}, {NOW})
ON CONFLICT (name) DO UPDATE SET
    definition = EXCLUDED.definition,
    updated_at = CASE WHEN s.definition = EXCLUDED.definition THEN s.updated_at ELSE EXCLUDED.updated_at END
RETURNING {_COLS}"""

GET: Final = f"SELECT {_COLS} FROM {{schedules}} AS s WHERE s.name = %(name)s"

LIST: Final = f'SELECT {_COLS} FROM {{schedules}} AS s ORDER BY s.name COLLATE "C"'

# The overlap test (P03): the previous job is still live. A pruned or removed job is not,
# so its successor fires. FIRE does not change last_job_id, so RETURNING re-evaluating
# this on the new row reads the same job in the same snapshot.
_OVERLAPPED: Final = f"""(NOT %(overlap)s AND EXISTS (
    SELECT 1 FROM {{jobs}} AS j WHERE j.id = s.last_job_id AND j.state IN {_LIVE}))"""

# The compare-and-set (P01): answers the row and whether the occurrence was skipped.
FIRE: Final = f"""
UPDATE {{schedules}} AS s SET
    watermark = %(occurrence)s,
    last_fired_at = {NOW},
    updated_at = {NOW},
    last_outcome = CASE WHEN {_OVERLAPPED} THEN 'skipped_overlap' ELSE %(outcome)s::text END
WHERE s.name = %(name)s AND s.watermark = %(expected)s AND NOT s.paused
RETURNING {_COLS}, {_OVERLAPPED}"""

SET_JOB: Final = f"""
UPDATE {{schedules}} AS s SET last_job_id = %(job_id)s WHERE s.name = %(name)s RETURNING {_COLS}"""

PAUSE: Final = f"""
UPDATE {{schedules}} AS s SET
    paused = true,
    updated_at = CASE WHEN s.paused THEN s.updated_at ELSE {NOW} END
WHERE s.name = %(name)s
RETURNING {_COLS}"""

# In SET every column reference is the row as it was, so the CASEs all see the old pause flag.
RESUME: Final = f"""
UPDATE {{schedules}} AS s SET
    paused = false,
    watermark = CASE WHEN s.paused THEN greatest(s.watermark, {NOW}) ELSE s.watermark END,
    updated_at = CASE WHEN s.paused THEN {NOW} ELSE s.updated_at END
WHERE s.name = %(name)s
RETURNING {_COLS}"""

REMOVE: Final = "DELETE FROM {schedules} AS s WHERE s.name = %(name)s RETURNING s.name"


class _Statements:
    """This module's statements rendered for one schema (bytes, ready for ``execute``)."""

    def __init__(self, schema: str) -> None:
        self.DECLARE = render(DECLARE, schema)
        self.GET = render(GET, schema)
        self.LIST = render(LIST, schema)
        self.FIRE = render(FIRE, schema)
        self.SET_JOB = render(SET_JOB, schema)
        self.PAUSE = render(PAUSE, schema)
        self.RESUME = render(RESUME, schema)
        self.REMOVE = render(REMOVE, schema)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(timezone.utc)


def schedule_from_row(row: Sequence[Any]) -> Schedule:
    """The :class:`Schedule` of one row of :data:`SCHEDULE_COLUMNS`."""
    name, definition, watermark, paused, last_fired_at, last_outcome, last_job_id, created_at, updated_at = row[
        : len(SCHEDULE_COLUMNS)
    ]
    return Schedule(
        name=name, definition=json.loads(definition), watermark=watermark.astimezone(timezone.utc),
        paused=paused, last_fired_at=_utc(last_fired_at), last_outcome=last_outcome,
        last_job_id=None if last_job_id is None else str(last_job_id),
        created_at=created_at.astimezone(timezone.utc), updated_at=updated_at.astimezone(timezone.utc),
    )


class PostgresSchedules:
    """Periodic schedules' declarations and watermarks (rules P) on PostgreSQL."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver
        self.q = _Statements(driver.schema)

    def _one(self, query: bytes, params: dict[str, Any], *, retry: bool = False) -> Schedule | None:
        rows = self._d._fetch(query, params, retry=retry)
        return schedule_from_row(rows[0]) if rows else None

    def declare(self, name: str, definition: Any, *, start: datetime | None = None) -> Schedule:
        key = v.check_schedule_name(name)
        text = v.check_schedule_definition(definition)
        begin = None if start is None else v.check_time(start, "start")
        answer = self._one(self.q.DECLARE, {
            "name": key, "definition": text, "watermark": begin, "now": self._d._now(),
        })
        assert answer is not None  # an upsert always answers its row
        return answer

    def get(self, name: str) -> Schedule | None:
        return self._one(self.q.GET, {"name": v.check_schedule_name(name)}, retry=True)

    def list(self) -> builtins.list[Schedule]:
        rows = self._d._fetch(self.q.LIST, None, retry=True)
        return sorted((schedule_from_row(r) for r in rows), key=lambda s: s.name)

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: JobSpec | None,
        outcome: ScheduleOutcome | str = ScheduleOutcome.FIRED, overlap: bool = True,
    ) -> Schedule | None:
        key = v.check_schedule_name(name)
        old, new, result, allow_overlap = v.check_fire(expected, occurrence, outcome, overlap)
        d = self._d
        spec = None if job is None else v.new_jobs([job], now=None, default_max_attempts=d._default_max_attempts)[0]
        with d._transaction() as conn:
            rows = d._fetch(self.q.FIRE, {
                "name": key, "expected": old, "occurrence": new, "now": d._now(), "outcome": result.value,
                "overlap": allow_overlap,
            }, conn=conn)
            if not rows:
                return None
            answer, skipped = schedule_from_row(rows[0]), rows[0][-1]
            if spec is None or skipped:
                return answer
            enqueued = d._insert([spec], conn)[0]
            rows = d._fetch(self.q.SET_JOB, {"name": key, "job_id": int(enqueued.id)}, conn=conn)
            return schedule_from_row(rows[0])

    def pause(self, name: str) -> Schedule | None:
        return self._one(self.q.PAUSE, {"name": v.check_schedule_name(name), "now": self._d._now()})

    def resume(self, name: str) -> Schedule | None:
        return self._one(self.q.RESUME, {"name": v.check_schedule_name(name), "now": self._d._now()})

    def remove(self, name: str) -> bool:
        return bool(self._d._fetch(self.q.REMOVE, {"name": v.check_schedule_name(name)}))
