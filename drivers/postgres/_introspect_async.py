"""Operator reads and verbs (rules O, C10, R01) and fleet leases (rules K) on PostgreSQL.

:class:`AsyncPostgresIntrospect` is the driver's :class:`~jobcore.door.AsyncIntrospectBackend`:
arguments arrive checked, and each verb is one statement where the rules allow. A verb
that can be refused tries its guarded statement first and reads the row only to tell
the front door what it found. Bulk verbs lock their target rows oldest first, re-check
their state guard in the write, and count what a second call could still move.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any

from psycopg import errors as pg

from jobcore.door._introspect import FinishedRow, Refused, Spacing
from jobcore.errors import BackendFailure
from jobcore.records import FINISHED_STATES, BulkResult, Job, JobFilter, JobState, PruneResult, RescueResult, Stats
from jobcore.vocabulary import kept_changing

from ._prune_async import AsyncPruner
from ._rows import filter_params, job_from_row

if TYPE_CHECKING:
    from . import AsyncPostgresDriver

__all__ = ["AsyncPostgresIntrospect"]

_MS = timedelta(milliseconds=1)


class AsyncPostgresIntrospect:
    """Reads, operator verbs and retention (rules O, C10, R01) as statements of ``driver.q``."""

    def __init__(self, driver: AsyncPostgresDriver) -> None:
        self._d = driver
        self._pruner = AsyncPruner(driver)

    def __repr__(self) -> str:
        return "AsyncPostgresIntrospect()"

    # -- reads ---------------------------------------------------------------------------

    async def get(self, seq: int) -> Job | None:
        rows = await self._d._fetch(self._d.q.GET, {"id": seq}, retry=True)
        return job_from_row(rows[0]) if rows else None

    async def relatives(self, seq: int) -> tuple[list[Job], list[Job]] | None:
        """Job ``seq``'s stored parents and children, oldest first (D05); ``None`` when unknown."""
        rows = await self._d._fetch(self._d.q.RELATIVES, {"id": seq}, retry=True)
        if not rows or rows[0][0] != 0:
            return None
        return [job_from_row(r[1:]) for r in rows if r[0] == 1], [job_from_row(r[1:]) for r in rows if r[0] == 2]

    async def list_older(self, flt: JobFilter, limit: int, below: int | None) -> list[Job]:
        params = {**filter_params(flt), "cursor": below, "limit": limit}
        return [job_from_row(r) for r in await self._d._fetch(self._d.q.LIST_OLDER, params, retry=True)]

    async def list_newer(self, flt: JobFilter, limit: int, above: int) -> list[Job]:
        params = {**filter_params(flt), "cursor": above, "limit": limit}
        return [job_from_row(r) for r in await self._d._fetch(self._d.q.LIST_NEWER, params, retry=True)]

    async def stats(self) -> Stats:
        counts: dict[str, dict[JobState, int]] = {}
        oldest: dict[str, Any] = {}
        for queue, state, count, age in await self._d._fetch(self._d.q.STATS, {"now": self._d._now()}, retry=True):
            if state is not None:
                counts.setdefault(queue, {})[JobState(state)] = int(count)
            else:
                oldest[queue] = age
        return Stats(counts=counts, oldest_due_age=oldest)

    async def dead_letters(self, queue: str | None, limit: int) -> list[Job]:
        rows = await self._d._fetch(self._d.q.DEAD_LETTERS, {"queue": queue, "limit": limit}, retry=True)
        return [job_from_row(r) for r in rows]

    async def finished_counts(self, minutes: int) -> list[FinishedRow]:
        params = {"states": _values(FINISHED_STATES), "minutes": minutes, "now": self._d._now()}
        rows = await self._d._fetch(self._d.q.FINISHED_COUNTS, params, retry=True)
        return [(minute.astimezone(timezone.utc), JobState(state), int(n)) for minute, state, n in rows]

    async def rescue(self) -> RescueResult:
        rows = await self._d._fetch(self._d.q.RESCUE, {
            "now": self._d._now(), "channel": self._d.channel, "finished": self._d.finish_channel,
        })
        requeued = sum(1 for r in rows if r[0] == 0)
        return RescueResult(requeued=requeued, buried=tuple(job_from_row(r[1:]) for r in rows if r[0] == 1))

    # -- single-job verbs ----------------------------------------------------------------

    async def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        rows = await self._d._fetch(self._d.q.CANCEL, {
            "id": seq, "states": _values(states), "now": self._d._now(), "message": message,
            "finished": self._d.finish_channel,
        })
        return job_from_row(rows[0][1:]) if rows else None  # (notified a waiter, job...)

    async def _found(self, seq: int) -> tuple[JobState, str, str | None] | None:
        rows = await self._d._fetch(self._d.q.JOB_STATE, {"id": seq})
        if not rows:
            return None
        state, name, key = rows[0]
        return JobState(state), name, key

    async def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        for _ in range(3):
            try:
                params = {"id": seq, "states": _values(states), "now": self._d._now(), "channel": self._d.channel}
                rows = await self._d._fetch(self._d.q.REQUEUE, params)
            except BackendFailure as exc:
                if not isinstance(exc.__cause__, pg.UniqueViolation):  # a live job took the key meanwhile
                    raise
                rows = []
            if rows:
                return job_from_row(rows[0])
            found = await self._found(seq)
            if found is None:
                return None
            state, name, key = found
            if state not in states:
                return Refused(state)
            if key is not None:
                holder = await self._d._fetch(self._d.q.KEY_HOLDER, {"name": name, "key": key})
                if holder:
                    return Refused(state, key, str(holder[0][0]), clash=True)
        raise kept_changing(seq, "requeue")

    async def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        rows = await self._d._fetch(self._d.q.REMOVE, {"id": seq, "states": _values(states)})
        if rows:
            return job_from_row(rows[0])
        found = await self._found(seq)
        return None if found is None else Refused(found[0])

    async def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        rows = await self._d._fetch(self._d.q.MAKE_DUE, {
            "id": seq, "states": _values(states), "now": self._d._now(), "channel": self._d.channel,
        })
        if rows:
            return job_from_row(rows[0])
        found = await self._found(seq)
        return None if found is None else Refused(found[0])

    # -- bulk verbs: ``flt.state`` is the verb's guard already (O05) -------------------------

    async def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        row = (await self._d._fetch(self._d.q.CANCEL_MANY, {  # sync: row = self._d._fetch(self._d.q.CANCEL_MANY, {
            **filter_params(flt), "limit": limit, "now": self._d._now(), "message": message,
            "finished": self._d.finish_channel,
        }))[0]  # sync: })[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))

    async def requeue_many(self, flt: JobFilter, limit: int, spacing: Spacing) -> BulkResult:
        params = filter_params(flt)
        q = self._d.q
        async with self._d._transaction() as conn:
            ids = [r[0] for r in await (await conn.execute(q.REQUEUE_MANY_PICK, {**params, "limit": limit})).fetchall()]  # sync: ids = [r[0] for r in conn.execute(q.REQUEUE_MANY_PICK, {**params, "limit": limit}).fetchall()]
            affected = 0
            if ids:
                # Offsets from the store's now (the statement adds them to it, F01).
                offsets = [offset // _MS for offset in spacing(len(ids))]
                applied = await (await conn.execute(q.REQUEUE_MANY_APPLY, {  # sync: applied = conn.execute(q.REQUEUE_MANY_APPLY, {
                    "ids": ids, "offsets_ms": offsets, "f_states": params["f_states"],
                    "now": self._d._now(), "channel": self._d.channel,
                })).fetchone()  # sync: }).fetchone()
                affected = applied[0] if applied else 0
            left = await (await conn.execute(q.REQUEUE_MANY_COUNT, params)).fetchone()  # sync: left = conn.execute(q.REQUEUE_MANY_COUNT, params).fetchone()
        return BulkResult(affected=affected, remaining=left[0] if left else 0)

    async def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        row = (await self._d._fetch(self._d.q.REMOVE_MANY, {**filter_params(flt), "limit": limit}))[0]  # sync: row = self._d._fetch(self._d.q.REMOVE_MANY, {**filter_params(flt), "limit": limit})[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))

    async def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        row = (await self._d._fetch(self._d.q.PROMOTE_MANY, {  # sync: row = self._d._fetch(self._d.q.PROMOTE_MANY, {
            **filter_params(flt), "limit": limit, "now": self._d._now(), "channel": self._d.channel,
        }))[0]  # sync: })[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))

    # -- retention (R01) -----------------------------------------------------------------

    async def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        """Retention (R01, R02) in short ``SKIP LOCKED`` delete batches: see :mod:`._prune`."""
        return await self._pruner.prune(ages, limit=limit, batch=batch, dry_run=dry_run)


def _values(states: frozenset[JobState]) -> list[str]:
    return sorted(s.value for s in states)
