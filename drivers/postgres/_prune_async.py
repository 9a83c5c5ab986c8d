"""Retention on PostgreSQL (rules R): ``introspect.prune`` as short, bounded delete batches.

Each batch is one ``DELETE`` statement in its own transaction (autocommit), so its row
locks live for one statement only, never across batches. The rows it deletes are picked
per finished state through the partial index ``jobs_finished (state, finished_at, id)``
(oldest ``finished_at`` first), locked with ``FOR UPDATE SKIP LOCKED`` so the prune never
waits on a row another session holds and nobody waits on the prune for long, then merged
across states and cut to the batch size.

Never a live row: the pick's predicate (``state = <finished state> AND finished_at <=
cutoff``) is re-checked by PostgreSQL on the newest row version when the row is locked,
so a job requeued after the statement's snapshot was taken (``ready``, ``finished_at``
cleared) drops out of the pick; one being requeued right now is locked and skipped; and
the ``DELETE`` checks the finished states once more.

``remaining`` counts eligible rows per state through the same index, stopping at
:data:`COUNT_CAP` per state: past that the answer means "at least this many", enough to
tell a caller to call again, and the count never costs more than a bounded index scan.

The two statements, ``PRUNE_BATCH`` and ``PRUNE_COUNT``, are in :mod:`._sql.prune`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from jobcore.records import JobState, PruneResult
from jobcore.vocabulary import MAX_PRUNE_ROWS

if TYPE_CHECKING:
    from . import AsyncPostgresDriver

__all__ = ["COUNT_CAP", "AsyncPruner"]

_US: Final = timedelta(microseconds=1)

COUNT_CAP: Final = MAX_PRUNE_ROWS
"""Most eligible rows ``remaining`` counts per state (a larger backlog reads as this many)."""


class AsyncPruner:
    """``introspect.prune`` for one driver (its statements ``PRUNE_BATCH`` and ``PRUNE_COUNT``, in ``_sql``)."""

    def __init__(self, driver: AsyncPostgresDriver) -> None:
        self._d = driver

    async def prune(self, ages: Mapping[JobState, timedelta], *, limit: int, batch: int, dry_run: bool) -> PruneResult:
        """Delete finished jobs older than their state's age allows, in batches (R01, R02).

        ``ages`` (checked by the front door, never empty) maps each finished state kept
        for a limited time to its age. Each batch is its own short transaction: one
        ``DELETE`` of at most ``batch`` rows locked with ``SKIP LOCKED``. Stops at ``limit``
        rows, or at the first batch that comes back short (nothing more eligible, or the
        rest locked by someone else: a later call takes them). ``remaining`` is capped at
        :data:`COUNT_CAP` per state.
        """
        removed = dict.fromkeys(ages, 0)
        params = {
            "states": [s.value for s in ages], "ages_us": [age // _US for age in ages.values()],
            "now": self._d._now(),
        }
        if not dry_run:
            while (done := sum(removed.values())) < limit:
                want = min(batch, limit - done)
                rows = await self._d._fetch(self._d.q.PRUNE_BATCH, {**params, "limit": want})
                for (state,) in rows:
                    removed[JobState(state)] += 1
                if len(rows) < want:
                    break
        remaining = dict.fromkeys(ages, 0)
        for state, count in await self._d._fetch(self._d.q.PRUNE_COUNT, {**params, "cap": COUNT_CAP}, retry=True):
            remaining[JobState(state)] = int(count)
        return PruneResult(removed=removed, remaining=remaining)
