"""The memory driver's :class:`~jobcore.door.SchedulesBackend`: schedules in a dict, under the driver's lock.

This is the reference for the other drivers' schedule stores. Every method takes the
driver's one lock, so a ``fire`` (compare-and-set of the watermark plus the enqueue
of its job through the driver's own insert path) is atomic against every other
call, on this driver and on any thread.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING

from jobcore import validate as v
from jobcore.records import JobState, Schedule, ScheduleOutcome
from jobcore.vocabulary import LIVE_STATES

if TYPE_CHECKING:
    from . import MemoryDriver

__all__ = ["MemorySchedules"]


class _Entry:
    """One stored schedule; mutated only under the driver's lock."""

    __slots__ = (
        "created_at", "definition", "last_fired_at", "last_job_id", "last_outcome", "name", "paused",
        "updated_at", "watermark",
    )

    def __init__(self, name: str, definition: str, watermark: datetime, now: datetime) -> None:
        self.name = name
        self.definition = definition  # canonical JSON text, like payloads
        self.watermark = watermark
        self.paused = False
        self.last_fired_at: datetime | None = None
        self.last_outcome: ScheduleOutcome | None = None
        self.last_job_id: str | None = None
        self.created_at = now
        self.updated_at = now

    def schedule(self) -> Schedule:
        return Schedule(
            name=self.name, definition=v.decode_json(self.definition), watermark=self.watermark,
            paused=self.paused, last_fired_at=self.last_fired_at, last_outcome=self.last_outcome,
            last_job_id=self.last_job_id, created_at=self.created_at, updated_at=self.updated_at,
        )


class MemorySchedules:
    """Periodic schedules' declarations and watermarks (rules P), on checked values."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver
        self._entries: dict[str, _Entry] = {}

    def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        with self._d._lock:
            now = self._d._now()
            entry = self._entries.get(name)
            if entry is None:
                entry = self._entries[name] = _Entry(name, definition, now if start is None else start, now)
            elif entry.definition != definition:
                entry.definition, entry.updated_at = definition, now
            return entry.schedule()

    def get(self, name: str) -> Schedule | None:
        with self._d._lock:
            entry = self._entries.get(name)
            return None if entry is None else entry.schedule()

    def list(self) -> builtins.list[Schedule]:
        with self._d._lock:
            return [entry.schedule() for entry in self._entries.values()]

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: v.StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        d = self._d
        woken: str | None = None
        with d._lock:
            entry = self._entries.get(name)
            if entry is None or entry.paused or entry.watermark != expected:
                return None
            now = d._now()
            entry.watermark, entry.last_fired_at, entry.updated_at = occurrence, now, now
            if not overlap and self._live(entry.last_job_id):
                entry.last_outcome = ScheduleOutcome.SKIPPED_OVERLAP
            else:
                entry.last_outcome = outcome
                if job is not None:
                    row, duplicate = d._insert(job.resolve(now), now)
                    entry.last_job_id = str(row.seq)
                    if not duplicate and row.state is JobState.READY:
                        woken = row.queue
            answer = entry.schedule()
        if woken is not None:
            d._wake((woken,))
        return answer

    def _live(self, job_id: str | None) -> bool:
        """Whether ``job_id`` (a ``last_job_id`` this store wrote) names a job still live (P03); lock held."""
        row = None if job_id is None else self._d._rows.get(int(job_id))
        return row is not None and row.state in LIVE_STATES

    def pause(self, name: str) -> Schedule | None:
        with self._d._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            if not entry.paused:
                entry.paused, entry.updated_at = True, self._d._now()
            return entry.schedule()

    def resume(self, name: str) -> Schedule | None:
        with self._d._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            if entry.paused:
                now = self._d._now()
                entry.paused, entry.watermark, entry.updated_at = False, max(entry.watermark, now), now
            return entry.schedule()

    def remove(self, name: str) -> bool:
        with self._d._lock:
            return self._entries.pop(name, None) is not None
