"""Operator reads and verbs (rules O, C10) and fleet leases (rules K) on PostgreSQL.

Same semantics as the memory driver, one statement per verb where the rules allow:
a verb that can be refused tries its guarded statement first and reads the row only
to name the refusal. Bulk verbs lock their target rows oldest first, re-check their
own state guard in the write, and count what a second call could still move.
"""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import errors as pg

from jobcore import validate as v
from jobcore.driver import Duration
from jobcore.errors import (
    BackendFailure,
    JobDuplicate,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobNotResumable,
    JobStateConflict,
)
from jobcore.records import (
    FINISHED_STATES,
    LIVE_STATES,
    BulkResult,
    Job,
    JobFilter,
    JobState,
    Page,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Stats,
)

from ._prune import Pruner
from ._rows import EPOCH, filter_params, job_from_row, parse_id

if TYPE_CHECKING:
    from . import PostgresDriver

__all__ = ["PostgresIntrospector"]

_ALL = frozenset(JobState)
_MS = timedelta(milliseconds=1)
_CANCELLED_TEXT = "cancelled by an operator"


class PostgresIntrospector:
    """Reads and operator verbs (rules O, C10)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver
        self._pruner = Pruner(driver)

    def get(self, job_id: str) -> Job | None:
        ident = parse_id(v.check_id(job_id))
        if ident is None:
            return None
        rows = self._d._fetch(self._d.q.GET, {"id": ident}, retry=True)
        return job_from_row(rows[0]) if rows else None

    def list(
        self, filter: JobFilter | None = None, limit: int = v.DEFAULT_PAGE, *,
        after: str | None = None, before: str | None = None,
    ) -> Page:
        flt = v.check_filter(filter)
        size, after_seq, before_seq = v.check_page(limit, after, before)
        params = filter_params(flt, _ALL)
        if params is None:
            return Page(jobs=())
        if before_seq is not None:
            newer = self._d._fetch(
                self._d.q.LIST_NEWER, {**params, "cursor": before_seq, "limit": size + 1}, retry=True
            )
            rows = [job_from_row(r) for r in reversed(newer[:size])]
            return Page(
                jobs=tuple(rows),
                after=v.encode_cursor(int(rows[-1].id)) if rows else None,
                before=v.encode_cursor(int(rows[0].id)) if len(newer) > size else None,
            )
        older = self._d._fetch(self._d.q.LIST_OLDER, {**params, "cursor": after_seq, "limit": size}, retry=True)
        jobs = tuple(job_from_row(r) for r in older)
        return Page(
            jobs=jobs,
            after=v.encode_cursor(int(jobs[-1].id)) if len(jobs) == size else None,
            before=v.encode_cursor(int(jobs[0].id)) if jobs and after_seq is not None else None,
        )

    def stats(self) -> Stats:
        counts: dict[str, dict[JobState, int]] = {}
        oldest: dict[str, Any] = {}
        for queue, state, count, age in self._d._fetch(self._d.q.STATS, {"now": self._d._now()}, retry=True):
            if state is not None:
                counts.setdefault(queue, {})[JobState(state)] = int(count)
            else:
                oldest[queue] = age
        return Stats(counts=counts, oldest_due_age=oldest)

    def dead_letters(self, queue: str | None = None, limit: int = v.DEFAULT_PAGE) -> builtins.list[Job]:
        name = v.check_name(queue, "queue", optional=True)
        size = v.check_int(limit, "limit", 1, v.MAX_PAGE)
        rows = self._d._fetch(self._d.q.DEAD_LETTERS, {"queue": name, "limit": size}, retry=True)
        return [job_from_row(r) for r in rows]

    def rescue(self) -> RescueResult:
        rows = self._d._fetch(self._d.q.RESCUE, {"now": self._d._now(), "channel": self._d.channel})
        requeued = sum(1 for r in rows if r[0] == 0)
        return RescueResult(requeued=requeued, buried=tuple(job_from_row(r[1:]) for r in rows if r[0] == 1))

    def cancel(self, job_id: str, reason: str | None = None) -> Job | None:
        text = _CANCELLED_TEXT if reason is None else v.error_entry(reason)[1]
        ident = parse_id(v.check_id(job_id))
        if ident is None:
            return None
        rows = self._d._fetch(self._d.q.CANCEL, {"id": ident, "now": self._d._now(), "message": text})
        return job_from_row(rows[0]) if rows else None

    def _state(self, ident: int, job_id: str) -> tuple[str, str, str | None]:
        rows = self._d._fetch(self._d.q.JOB_STATE, {"id": ident})
        if not rows:
            raise JobNotFound(f"no job has id {job_id!r:.60}")
        state, name, key = rows[0]
        return state, name, key

    def requeue(self, job_id: str) -> Job:
        ident = parse_id(v.check_id(job_id))
        if ident is None:
            raise JobNotFound(f"no job has id {job_id!r:.60}")
        for _ in range(3):
            try:
                params = {"id": ident, "now": self._d._now(), "channel": self._d.channel}
                rows = self._d._fetch(self._d.q.REQUEUE, params)
            except BackendFailure as exc:
                if not isinstance(exc.__cause__, pg.UniqueViolation):  # a live job took the key meanwhile
                    raise
                rows = []
            if rows:
                return job_from_row(rows[0])
            state, name, key = self._state(ident, job_id)
            if JobState(state) not in FINISHED_STATES:
                raise JobNotRequeueable(f"job {job_id} is {state}, not finished")
            if key is not None:
                holder = self._d._fetch(self._d.q.KEY_HOLDER, {"name": name, "key": key})
                if holder:
                    raise JobDuplicate(f"job {job_id}'s key {key!r} is held by live job {holder[0][0]}")
        raise JobStateConflict(f"job {job_id} kept changing while being requeued", "retry the requeue")

    def remove(self, job_id: str) -> Job | None:
        ident = parse_id(v.check_id(job_id))
        if ident is None:
            return None
        rows = self._d._fetch(self._d.q.REMOVE, {"id": ident})
        if rows:
            return job_from_row(rows[0])
        found = self._d._fetch(self._d.q.JOB_STATE, {"id": ident})
        if found and found[0][0] == JobState.RUNNING.value:
            raise JobNotRemovable(f"job {job_id} is running")
        return None

    def _make_due(self, job_id: str, from_state: JobState, refusal: type[JobStateConflict]) -> Job:
        ident = parse_id(v.check_id(job_id))
        if ident is None:
            raise JobNotFound(f"no job has id {job_id!r:.60}")
        rows = self._d._fetch(self._d.q.MAKE_DUE, {
            "id": ident, "from_state": from_state.value, "now": self._d._now(), "channel": self._d.channel,
        })
        if rows:
            return job_from_row(rows[0])
        state = self._state(ident, job_id)[0]
        raise refusal(f"job {job_id} is {state}, not {from_state.value}")

    def promote(self, job_id: str) -> Job:
        return self._make_due(job_id, JobState.SCHEDULED, JobNotPromotable)

    def resume(self, job_id: str) -> Job:
        return self._make_due(job_id, JobState.SUSPENDED, JobNotResumable)

    # -- bulk verbs: each applies its own guard whatever the filter says (O05) -----------

    def cancel_many(
        self, filter: JobFilter | None = None, *, reason: str | None = None, limit: int = v.MAX_BULK_ROWS,
    ) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        text = _CANCELLED_TEXT if reason is None else v.error_entry(reason)[1]
        params = filter_params(flt, LIVE_STATES)
        if params is None:
            return BulkResult(affected=0, remaining=0)
        row = self._d._fetch(self._d.q.CANCEL_MANY, {
            **params, "limit": size, "now": self._d._now(), "message": text,
        })[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))

    def requeue_many(
        self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS, spread: Duration | None = None,
    ) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        window = None if spread is None else v.check_spread(spread)
        params = filter_params(flt, FINISHED_STATES)
        if params is None:
            return BulkResult(affected=0, remaining=0)
        q = self._d.q
        with self._d._transaction() as conn:
            ids = [r[0] for r in conn.execute(q.REQUEUE_MANY_PICK, {**params, "limit": size}).fetchall()]
            affected = 0
            if ids:
                span = v.default_spread(len(ids)) if window is None else window
                # Offsets from the store's now (the statement adds them to it, F01), spread as for any driver.
                offsets = [(v.spread_run_at(EPOCH, span, i, len(ids)) - EPOCH) // _MS for i in range(len(ids))]
                applied = conn.execute(q.REQUEUE_MANY_APPLY, {
                    "ids": ids, "offsets_ms": offsets, "now": self._d._now(), "channel": self._d.channel,
                }).fetchone()
                affected = applied[0] if applied else 0
            left = conn.execute(q.REQUEUE_MANY_COUNT, params).fetchone()
        return BulkResult(affected=affected, remaining=left[0] if left else 0)

    def remove_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        params = filter_params(flt, _ALL - {JobState.RUNNING})
        if params is None:
            return BulkResult(affected=0, remaining=0)
        row = self._d._fetch(self._d.q.REMOVE_MANY, {**params, "limit": size})[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))

    def prune(
        self, policy: RetentionPolicy | None = None, *, limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH, dry_run: bool = False,
    ) -> PruneResult:
        """Retention (R01, R02) in short ``SKIP LOCKED`` delete batches: see :mod:`._prune`."""
        return self._pruner.prune(policy, limit=limit, batch=batch, dry_run=dry_run)

    def promote_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        params = filter_params(flt, frozenset({JobState.SCHEDULED}))
        if params is None:
            return BulkResult(affected=0, remaining=0)
        row = self._d._fetch(self._d.q.PROMOTE_MANY, {
            **params, "limit": size, "now": self._d._now(), "channel": self._d.channel,
        })[0]
        return BulkResult(affected=row[0], remaining=max(0, row[1] - row[0]))
