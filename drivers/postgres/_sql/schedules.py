"""The schedule store's statements (rules P): declare, read, fire (compare-and-set), pause, resume, remove.

One row per schedule in ``{schedules}`` (migration 4); how ``fire`` wraps these in one
transaction with the job insert is ``_schedules``'.
"""

# ruff: noqa: S608 - templates are built from constants and quoted identifiers only; values are bind parameters
from __future__ import annotations

from typing import Final

from jobcore.vocabulary import LIVE_STATES

from .common import NOW, Sql

__all__ = ["SCHEDULE_COLUMNS", "ScheduleStatements"]

SCHEDULE_COLUMNS: Final = (
    "name", "definition", "watermark", "paused", "last_fired_at", "last_outcome", "last_job_id", "created_at",
    "updated_at",
)
_COLS: Final = ", ".join(f"s.{c}" for c in SCHEDULE_COLUMNS)

_LIVE: Final = "(" + ", ".join(f"'{state.value}'" for state in sorted(LIVE_STATES)) + ")"
"""The live states (:data:`jobcore.vocabulary.LIVE_STATES`) as an SQL list of constants."""

# The overlap test (P03): the previous job is still live. A pruned or removed job is not,
# so its successor fires. FIRE does not change last_job_id, so RETURNING re-evaluating
# this on the new row reads the same job in the same snapshot.
_OVERLAPPED: Final = f"""(NOT %(overlap)s AND EXISTS (
    SELECT 1 FROM {{jobs}} AS j WHERE j.id = s.last_job_id AND j.state IN {_LIVE}))"""


class ScheduleStatements:
    """The statements of schedules, each declared once as ``NAME = Sql(template)``."""

    SCHEDULE_DECLARE = Sql(f"""
INSERT INTO {{schedules}} AS s (name, definition, watermark, paused, created_at, updated_at)
VALUES (%(name)s, %(definition)s, coalesce(%(watermark)s::timestamptz, {NOW}), false, {NOW}, {NOW})
ON CONFLICT (name) DO UPDATE SET
    definition = EXCLUDED.definition,
    updated_at = CASE WHEN s.definition = EXCLUDED.definition THEN s.updated_at ELSE EXCLUDED.updated_at END
RETURNING {_COLS}""")
    """Racing declarers end with one row; a changed definition moves ``updated_at``."""

    SCHEDULE_GET = Sql(f"SELECT {_COLS} FROM {{schedules}} AS s WHERE s.name = %(name)s")

    SCHEDULE_LIST = Sql(f'SELECT {_COLS} FROM {{schedules}} AS s ORDER BY s.name COLLATE "C"')

    SCHEDULE_FIRE = Sql(f"""
UPDATE {{schedules}} AS s SET
    watermark = %(occurrence)s,
    last_fired_at = {NOW},
    updated_at = {NOW},
    last_outcome = CASE WHEN {_OVERLAPPED} THEN 'skipped_overlap' ELSE %(outcome)s::text END
WHERE s.name = %(name)s AND s.watermark = %(expected)s AND NOT s.paused
RETURNING {_COLS}, {_OVERLAPPED}""")
    """The compare-and-set (P01): answers the row and whether the occurrence was skipped."""

    SCHEDULE_SET_JOB = Sql(f"""
UPDATE {{schedules}} AS s SET last_job_id = %(job_id)s WHERE s.name = %(name)s RETURNING {_COLS}""")

    SCHEDULE_PAUSE = Sql(f"""
UPDATE {{schedules}} AS s SET
    paused = true,
    updated_at = CASE WHEN s.paused THEN s.updated_at ELSE {NOW} END
WHERE s.name = %(name)s
RETURNING {_COLS}""")

    SCHEDULE_RESUME = Sql(f"""
UPDATE {{schedules}} AS s SET
    paused = false,
    watermark = CASE WHEN s.paused THEN greatest(s.watermark, {NOW}) ELSE s.watermark END,
    updated_at = CASE WHEN s.paused THEN {NOW} ELSE s.updated_at END
WHERE s.name = %(name)s
RETURNING {_COLS}""")
    """In SET every column reference is the row as it was, so the CASEs all see the old pause flag."""

    SCHEDULE_REMOVE = Sql("DELETE FROM {schedules} AS s WHERE s.name = %(name)s RETURNING s.name")
