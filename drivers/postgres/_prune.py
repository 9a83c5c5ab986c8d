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
"""

# ruff: noqa: S608 - templates are built from constants and quoted identifiers only; values are bind parameters
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Final

from jobcore import validate as v
from jobcore.records import FINISHED_STATES, JobState, PruneResult, RetentionPolicy

from . import _sql

if TYPE_CHECKING:
    from . import PostgresDriver

__all__ = ["COUNT_CAP", "PRUNE_BATCH", "PRUNE_COUNT", "Pruner"]

_FINISHED: Final = "('done', 'failed', 'dead', 'cancelled')"
_CUTOFF: Final = f"({_sql.NOW} - c.age_us * interval '1 microsecond')"
"""A state's cutoff on the store's clock (F01): finished at or before it is eligible. Ages
travel in microseconds, so no rounding moves the cutoff (``finished_at`` is to the ms)."""

_US: Final = timedelta(microseconds=1)

COUNT_CAP: Final = v.MAX_PRUNE_ROWS
"""Most eligible rows ``remaining`` counts per state (a larger backlog reads as this many)."""

PRUNE_BATCH: Final = f"""
WITH picked AS (
    SELECT p.id, p.finished_at
    FROM unnest(%(states)s::text[], %(ages_us)s::bigint[]) AS c(state, age_us)
    CROSS JOIN LATERAL (
        SELECT j.id, j.finished_at FROM {{jobs}} AS j
        WHERE j.state IN {_FINISHED} AND j.state = c.state AND j.finished_at <= {_CUTOFF}
        ORDER BY j.finished_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS p
    ORDER BY p.finished_at, p.id
    LIMIT %(limit)s
)
DELETE FROM {{jobs}} AS j
WHERE j.id = ANY(ARRAY(SELECT k.id FROM picked AS k)) AND j.state IN {_FINISHED}
RETURNING j.state
"""
"""One batch: up to ``limit`` eligible rows, oldest ``finished_at`` first across states.
The literal ``state IN (finished)`` lets the planner use the partial index whatever state
the parameter names; each state's scan stops after ``limit`` rows (LATERAL, as the claim
reads ``jobs_due``); deletion goes by ``id = ANY(ARRAY(...))`` so the generic plan deletes
through the primary key, never a hash join."""

PRUNE_COUNT: Final = f"""
SELECT c.state, (
    SELECT count(*) FROM (
        SELECT 1 FROM {{jobs}} AS j
        WHERE j.state IN {_FINISHED} AND j.state = c.state AND j.finished_at <= {_CUTOFF}
        ORDER BY j.finished_at
        LIMIT %(cap)s
    ) AS e
)
FROM unnest(%(states)s::text[], %(ages_us)s::bigint[]) AS c(state, age_us)
"""
"""Eligible rows per state, each count an index scan of ``jobs_finished`` stopping at ``cap``.
The ``ORDER BY`` (the index's order) keeps the generic plan, which cannot know how many
rows qualify, from betting on a sequential scan that the LIMIT would cut short."""


class _Statements:
    """This module's statements rendered for one schema (bytes, ready for ``execute``)."""

    def __init__(self, schema: str) -> None:
        self.PRUNE_BATCH = _sql.render(PRUNE_BATCH, schema)
        self.PRUNE_COUNT = _sql.render(PRUNE_COUNT, schema)


class Pruner:
    """``introspect.prune`` for one driver (its two statements rendered once)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver
        self.q = _Statements(driver.schema)

    def prune(
        self, policy: RetentionPolicy | None = None, *, limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH, dry_run: bool = False,
    ) -> PruneResult:
        """Delete finished jobs older than ``policy`` allows, in batches (R01, R02).

        Each batch is its own short transaction: one ``DELETE`` of at most ``batch`` rows
        locked with ``SKIP LOCKED``. Stops at ``limit`` rows, or at the first batch that
        comes back short (nothing more eligible, or the rest locked by someone else: a
        later call takes them). ``remaining`` is capped at :data:`COUNT_CAP` per state.
        """
        checked, total, size = v.check_prune(policy, limit, batch, dry_run=dry_run)
        cutoffs = {state: age for state in sorted(FINISHED_STATES) if (age := checked.age(state)) is not None}
        removed = dict.fromkeys(sorted(FINISHED_STATES), 0)
        params = {
            "states": [s.value for s in cutoffs], "ages_us": [age // _US for age in cutoffs.values()],
            "now": self._d._now(),
        }
        if cutoffs and not dry_run:
            while (done := sum(removed.values())) < total:
                want = min(size, total - done)
                rows = self._d._fetch(self.q.PRUNE_BATCH, {**params, "limit": want})
                for (state,) in rows:
                    removed[JobState(state)] += 1
                if len(rows) < want:
                    break
        remaining = dict.fromkeys(sorted(FINISHED_STATES), 0)
        if cutoffs:
            for state, count in self._d._fetch(self.q.PRUNE_COUNT, {**params, "cap": COUNT_CAP}, retry=True):
                remaining[JobState(state)] = int(count)
        return PruneResult(removed=removed, remaining=remaining)
