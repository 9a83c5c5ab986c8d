"""What both flavours of the operator door share: answers, id parsing, guards, cut-offs.

:mod:`jobcore.door._introspect_async` (and the sync :mod:`jobcore.door._introspect`
generated from it) check arguments and call a backend; the pure parts of that work,
which never touch a store, are kept here once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Final

import attrs

from jobcore import validate as v
from jobcore.clock import to_millis
from jobcore.records import FINISHED_STATES, BulkResult, JobFilter, JobState
from jobcore.vocabulary import CANCELLED_TEXT, GUARDS

__all__ = [
    "FINISHED",
    "NO_ROWS",
    "FinishedRow",
    "Refused",
    "Spacing",
    "chart_since",
    "guarded",
    "job_seq",
    "prune_cutoffs",
    "reason_text",
    "spacing",
]

_MAX_SEQ: Final = 2**63 - 1
FINISHED: Final = tuple(sorted(FINISHED_STATES))
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)

Spacing = Callable[[int], Sequence[timedelta]]
"""``requeue_many``'s due-time offsets: given how many rows move, one offset from now per
row (in the order the rows move, each a whole number of milliseconds, 0 for the first)."""


FinishedRow = tuple[datetime, JobState, int]
"""One row of ``IntrospectBackend.finished_counts``: (start of the minute, finished state, count)."""


@attrs.frozen
class Refused:
    """A single-job verb's answer when the job exists but was not moved.

    Attributes:
        state: The state the job was found in.
        key: For ``requeue``: the job's idempotency key, when a live job holds it.
        holder: The id of that live job, when the store could tell (``None``: unknown).
        clash: True when the job was finished but a live job of its name holds its key.
    """

    state: JobState
    key: str | None = None
    holder: str | None = None
    clash: bool = False


def job_seq(job_id: object) -> int | None:
    """The sequence number a job id names (its canonical decimal text), or ``None`` (O09).

    Ids are the decimal text of a positive 63-bit sequence without leading zeros. Only
    ASCII digits count: ``int()`` alone would take a fullwidth digit, ``"+1"``, ``" 1"``
    or ``"1_0"`` and answer some other job. A malformed id names no job.
    """
    if not isinstance(job_id, str) or not (job_id.isascii() and job_id.isdigit()) or len(job_id) > 19:
        return None
    seq = int(job_id)
    return seq if 0 < seq <= _MAX_SEQ and job_id == str(seq) else None


def prune_cutoffs(ages: Mapping[JobState, timedelta], now: datetime) -> dict[JobState, datetime]:
    """Per state, the latest ``finished_at`` eligible for pruning at ``now`` (R01), to the millisecond."""
    return {state: to_millis(now - age) for state, age in ages.items()}


def chart_since(now: datetime, minutes: int) -> datetime:
    """The start of ``finished_per_minute``'s window at ``now`` (O10): the start of now's
    minute, less ``minutes - 1`` minutes, so the window is ``minutes`` whole minutes, the
    last being the current one."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)


def spacing(spread: timedelta | None) -> Spacing:
    """``requeue_many``'s offsets for a ``spread`` (``None``: the default for the row count) (O06)."""

    def offsets(count: int) -> list[timedelta]:
        span = v.default_spread(count) if spread is None else spread
        return [v.spread_run_at(_EPOCH, span, i, count) - _EPOCH for i in range(count)]

    return offsets


NO_ROWS: Final = BulkResult(affected=0, remaining=0)


def reason_text(reason: object) -> str:
    """The ``Cancelled`` entry's message: the checked reason, or the default text (O01)."""
    return CANCELLED_TEXT if reason is None else v.error_entry(reason)[1]


def guarded(verb: str, filter: object) -> JobFilter | None:
    """The checked filter narrowed to ``verb``'s guard, or ``None`` when no state is left (O05)."""
    flt = v.check_filter(filter)
    guard = GUARDS[verb].states
    states = guard if flt.state is None else guard & flt.state
    return attrs.evolve(flt, state=states) if states else None


