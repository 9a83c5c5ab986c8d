"""The retention statements (rules R): ``introspect.prune``'s delete batch and its count.

How a prune runs (short batches, each its own transaction) is ``_prune``'s; why these
statements have their shape is below.
"""

# ruff: noqa: S608 - templates are built from constants and quoted identifiers only; values are bind parameters
from __future__ import annotations

from typing import Final

from .common import FINISHED, NOW, Sql

__all__ = ["PruneStatements"]

_CUTOFF: Final = f"({NOW} - c.age_us * interval '1 microsecond')"
"""A state's cutoff on the store's clock (F01): finished at or before it is eligible. Ages
travel in microseconds, so no rounding moves the cutoff (``finished_at`` is to the ms)."""


class PruneStatements:
    """The statements of retention, each declared once as ``NAME = Sql(template)``."""

    PRUNE_BATCH = Sql(f"""
WITH picked AS (
    SELECT p.id, p.finished_at
    FROM unnest(%(states)s::text[], %(ages_us)s::bigint[]) AS c(state, age_us)
    CROSS JOIN LATERAL (
        SELECT j.id, j.finished_at FROM {{jobs}} AS j
        WHERE j.state IN {FINISHED} AND j.state = c.state AND j.finished_at <= {_CUTOFF}
        ORDER BY j.finished_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS p
    ORDER BY p.finished_at, p.id
    LIMIT %(limit)s
)
DELETE FROM {{jobs}} AS j
WHERE j.id = ANY(ARRAY(SELECT k.id FROM picked AS k)) AND j.state IN {FINISHED}
RETURNING j.state
""")
    """One batch: up to ``limit`` eligible rows, oldest ``finished_at`` first across states.
    The literal ``state IN (finished)`` lets the planner use the partial index whatever state
    the parameter names; each state's scan stops after ``limit`` rows (LATERAL, as the claim
    reads ``jobs_due``); deletion goes by ``id = ANY(ARRAY(...))`` so the generic plan deletes
    through the primary key, never a hash join."""

    PRUNE_COUNT = Sql(f"""
SELECT c.state, (
    SELECT count(*) FROM (
        SELECT 1 FROM {{jobs}} AS j
        WHERE j.state IN {FINISHED} AND j.state = c.state AND j.finished_at <= {_CUTOFF}
        ORDER BY j.finished_at
        LIMIT %(cap)s
    ) AS e
)
FROM unnest(%(states)s::text[], %(ages_us)s::bigint[]) AS c(state, age_us)
""")
    """Eligible rows per state, each count an index scan of ``jobs_finished`` stopping at ``cap``.
    The ``ORDER BY`` (the index's order) keeps the generic plan, which cannot know how many
    rows qualify, from betting on a sequential scan that the LIMIT would cut short."""
