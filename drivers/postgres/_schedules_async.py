"""The PostgreSQL driver's :class:`~jobcore.door.AsyncSchedulesBackend` (rules P).

One row per schedule in ``{schedules}`` (migration 4). ``fire`` is one transaction:
a compare-and-set ``UPDATE ... WHERE watermark = %(expected)s AND NOT paused`` (a
concurrent firer blocks on the row lock, then re-reads the moved watermark and
updates nothing), the job insert through the driver's own enqueue statement, and
``last_job_id``. A firer that loses the compare-and-set enqueues nothing; a
transaction that fails after it rolls the watermark back with the job. Declaring is
``INSERT ... ON CONFLICT (name) DO UPDATE``, so racing declarers end with one row.
The statements (``SCHEDULE_*``) are in :mod:`._sql.schedules`.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from jobcore import validate as v
from jobcore.records import Schedule, ScheduleOutcome

from ._sql import SCHEDULE_COLUMNS

if TYPE_CHECKING:
    from . import AsyncPostgresDriver

__all__ = ["AsyncPostgresSchedules"]


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


class AsyncPostgresSchedules:
    """Periodic schedules' declarations and watermarks (rules P) on PostgreSQL."""

    def __init__(self, driver: AsyncPostgresDriver) -> None:
        self._d = driver

    async def _one(self, query: bytes, params: dict[str, Any], *, retry: bool = False) -> Schedule | None:
        rows = await self._d._fetch(query, params, retry=retry)
        return schedule_from_row(rows[0]) if rows else None

    async def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        answer = await self._one(self._d.q.SCHEDULE_DECLARE, {
            "name": name, "definition": definition, "watermark": start, "now": self._d._now(),
        })
        assert answer is not None  # an upsert always answers its row
        return answer

    async def get(self, name: str) -> Schedule | None:
        return await self._one(self._d.q.SCHEDULE_GET, {"name": name}, retry=True)

    async def list(self) -> builtins.list[Schedule]:
        return [schedule_from_row(r) for r in await self._d._fetch(self._d.q.SCHEDULE_LIST, None, retry=True)]

    async def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: v.StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        d = self._d
        async with d._transaction() as conn:
            rows = await d._fetch(d.q.SCHEDULE_FIRE, {
                "name": name, "expected": expected, "occurrence": occurrence, "now": d._now(),
                "outcome": outcome.value, "overlap": overlap,
            }, conn=conn)
            if not rows:
                return None
            answer, skipped = schedule_from_row(rows[0]), rows[0][-1]
            if job is None or skipped:
                return answer
            enqueued = (await d._insert([job], conn))[0]  # sync: enqueued = d._insert([job], conn)[0]
            rows = await d._fetch(d.q.SCHEDULE_SET_JOB, {"name": name, "job_id": int(enqueued.id)}, conn=conn)
            return schedule_from_row(rows[0])

    async def pause(self, name: str) -> Schedule | None:
        return await self._one(self._d.q.SCHEDULE_PAUSE, {"name": name, "now": self._d._now()})

    async def resume(self, name: str) -> Schedule | None:
        return await self._one(self._d.q.SCHEDULE_RESUME, {"name": name, "now": self._d._now()})

    async def remove(self, name: str) -> bool:
        return bool(await self._d._fetch(self._d.q.SCHEDULE_REMOVE, {"name": name}))
