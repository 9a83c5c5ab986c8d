"""jobcore's shared vocabulary: state sets, verb guards, history entries and limits.

Every word the front door, the drivers (their SQL and Mongo filters), the CLI and the
docs use about a job's life is written here once and read from here. A driver that
spells a state set, an error-history text or a limit itself is a bug waiting for the
day the three spellings drift.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import attrs

from jobcore.errors import (
    JobDuplicate,
    JobNotCancellable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobNotResumable,
    JobStateConflict,
)
from jobcore.records import FINISHED_STATES, LIVE_STATES, JobState

__all__ = [
    "ALL_STATES",
    "CANCELLED_ENTRY",
    "CANCELLED_TEXT",
    "CLAIMABLE_STATES",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PAGE",
    "DEFAULT_PRUNE_BATCH",
    "DEFAULT_PRUNE_ROWS",
    "FINISHED_STATES",
    "GUARDS",
    "LEASE_EXPIRED",
    "LEASE_EXPIRED_TEXT",
    "LEASE_LAPSED_FINAL",
    "LEASE_LAPSED_FINAL_TEMPLATE",
    "LIVE_STATES",
    "MAX_ATTEMPTS",
    "MAX_BULK_ROWS",
    "MAX_CHART_MINUTES",
    "MAX_CLAIM_BATCH",
    "MAX_DELAY",
    "MAX_ENQUEUE_BATCH",
    "MAX_ENQUEUE_BATCH_BYTES",
    "MAX_ERROR_TEXT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LEASE",
    "MAX_LEASE_SLOTS",
    "MAX_NAME_LENGTH",
    "MAX_PAGE",
    "MAX_PARENTS",
    "MAX_PAYLOAD_BYTES",
    "MAX_PROGRESS_MESSAGE",
    "MAX_PRUNE_ROWS",
    "MAX_SPREAD",
    "MIN_LEASE",
    "PARENT_ENDED_TEMPLATE",
    "PARENT_FAILURE_MODES",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "Guard",
    "kept_changing",
    "key_held",
    "lease_lapsed_final_text",
    "not_found",
    "parent_ended_text",
    "refused",
    "takes",
]

# -- states ----------------------------------------------------------------------------

ALL_STATES: Final = frozenset(JobState)
CLAIMABLE_STATES: Final = frozenset({JobState.READY, JobState.SCHEDULED})
"""States a claim may take a job from (once due); ``running`` is taken only when its lease lapsed."""


@attrs.frozen
class Guard:
    """Which states an operator verb moves a job out of, and the refusal for any other.

    ``refusal`` is the error for a job in any other state (single-job ``cancel`` answers
    ``None`` instead; :func:`jobcore.cancel_job` and the CLI raise its refusal).
    """

    verb: str
    states: frozenset[JobState]
    refusal: type[JobStateConflict]
    past: str
    """The verb in the past tense, as the CLI and the dashboard report it."""

    def allows(self, state: JobState) -> bool:
        return state in self.states


GUARDS: Final[dict[str, Guard]] = {
    g.verb: g
    for g in (
        Guard("cancel", frozenset(LIVE_STATES), JobNotCancellable, "cancelled"),
        Guard("requeue", frozenset(FINISHED_STATES), JobNotRequeueable, "requeued"),
        Guard("remove", ALL_STATES - {JobState.RUNNING}, JobNotRemovable, "removed"),
        Guard("promote", frozenset({JobState.SCHEDULED}), JobNotPromotable, "promoted"),
        Guard("resume", frozenset({JobState.SUSPENDED}), JobNotResumable, "resumed"),
    )
}
"""The operator verbs' state guards (rules O01-O05), single and bulk alike."""


def not_found(job_id: object) -> JobNotFound:
    """The one refusal for an id no job has (O02-O04)."""
    return JobNotFound(f"no job has id {job_id!r:.60}")


def takes(states: frozenset[JobState]) -> str:
    """How a refusal names a guard's states: ``finished``, ``live``, ``scheduled``, ``non-running``."""
    if states == FINISHED_STATES:
        return "finished"
    if states == LIVE_STATES:
        return "live"
    if len(states) == 1:
        return next(iter(states)).value
    rest = ALL_STATES - states
    if len(rest) == 1:
        return f"non-{next(iter(rest)).value}"
    return " or ".join(s.value for s in JobState if s in states)


def refused(verb: str, job_id: object, state: JobState) -> JobStateConflict:
    """The refusal of operator ``verb`` for a job found in ``state`` (O02-O04, S05): one wording, every driver."""
    guard = GUARDS[verb]
    return guard.refusal(f"job {job_id!s:.60} is {JobState(state).value}; {verb} takes only {takes(guard.states)} jobs")


def key_held(job_id: object, key: str | None, holder: str | None) -> JobDuplicate:
    """``requeue``'s refusal when a live job of the same name holds the job's key (O02, E02)."""
    by = "another live job" if holder is None else f"live job {holder}"
    return JobDuplicate(f"job {job_id!s:.60}'s key {key!r:.60} is held by {by}")


def kept_changing(job_id: object, verb: str) -> JobStateConflict:
    """A single-job verb that lost every retry to concurrent writers (the caller may simply retry)."""
    return JobStateConflict(f"job {job_id!s:.60} kept changing while being {GUARDS[verb].past}", f"retry the {verb}")


CANCELLED_TEXT: Final = "cancelled by an operator"
"""The ``Cancelled`` entry's message when ``cancel`` is given no reason (O01)."""


# -- error-history entries a store writes itself ----------------------------------------

LEASE_EXPIRED: Final = "LeaseExpired"
"""Type of the entry a reclaim or rescue records for the attempt a lapsed lease lost (C07)."""
LEASE_EXPIRED_TEXT: Final = "lease expired before the attempt finished"
LEASE_LAPSED_FINAL: Final = "LeaseLapsedFinalAttempt"
"""Type of the entry a burial records (C08)."""
CANCELLED_ENTRY: Final = "Cancelled"
"""Type of the entry ``cancel`` records, with the caller's reason as its message (O01)."""
PARENT_ENDED_TEMPLATE: Final = "parent job {parent} ended {state}"
"""The message of the ``Cancelled`` entry of a job whose parent ended other than ``done``
(D02); ``state`` is the parent's finished state, or ``removed`` for a parent removed before
it finished (D05)."""


def parent_ended_text(parent: str, state: str) -> str:
    """The ``Cancelled`` entry's message for a child of ``parent`` that ended ``state`` (D02)."""
    return PARENT_ENDED_TEMPLATE.format(parent=parent, state=state)

LEASE_LAPSED_FINAL_TEMPLATE: Final = (
    "lease lapsed on the final attempt ({attempt} of {max_attempts}); the worker likely crashed"
)
"""The burial entry's message with its two fields; SQL and Mongo build their expressions from it."""


def lease_lapsed_final_text(attempt: int, max_attempts: int) -> str:
    """The burial entry's message (C08); SQL and Mongo build the same text from the row."""
    return LEASE_LAPSED_FINAL_TEMPLATE.format(attempt=attempt, max_attempts=max_attempts)


# -- limits (the same for every driver; listed in docs/rules.md) -------------------------

MAX_PAYLOAD_BYTES: Final = 1024 * 1024
"""Largest payload or result, as UTF-8 JSON text."""
MAX_ERROR_TEXT_BYTES: Final = 16 * 1024
"""Largest error message (UTF-8). The worker truncates its own texts to fit."""
MAX_PROGRESS_MESSAGE: Final = 500
"""Most characters of a progress message (rules G); a longer one is refused, nothing written."""
MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of lists and dicts in a payload or result."""
MAX_NAME_LENGTH: Final = 200
"""Longest job name, queue, key, worker id or lease key (characters)."""
MAX_CLAIM_BATCH: Final = 1000
"""Largest ``claim(limit=...)``."""
MAX_BULK_ROWS: Final = 1000
"""Most rows one ``*_many`` operator call moves."""
MAX_ENQUEUE_BATCH: Final = 10_000
"""Most specs one ``enqueue_many`` stores."""
MAX_ENQUEUE_BATCH_BYTES: Final = 32 * 1024 * 1024
"""Most bytes of payload (UTF-8 JSON text, summed over its items) one ``enqueue_many`` stores.

Every driver stores such a batch in one round trip: it fits one MongoDB message (48 MB),
and far inside PostgreSQL's 1 GB message and 256 MiB ``jsonb`` value, however much its
payloads' text grows as a JSON string inside the statement's items."""
MAX_PARENTS: Final = 1000
"""Most parents one job may depend on (rules D)."""
PARENT_FAILURE_MODES: Final = ("cancel", "run")
"""What a job does when a parent ends other than ``done`` (``on_parent_failure``, D02)."""
MAX_PRUNE_ROWS: Final = 100_000
"""Most rows one ``introspect.prune`` call deletes (in batches of at most MAX_BULK_ROWS)."""
DEFAULT_PRUNE_ROWS: Final = 10_000
DEFAULT_PRUNE_BATCH: Final = 500
DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 200
DEFAULT_MAX_ATTEMPTS: Final = 20
MAX_ATTEMPTS: Final = 1000
PRIORITY_MIN: Final = -(2**31)
PRIORITY_MAX: Final = 2**31 - 1
MIN_LEASE: Final = timedelta(milliseconds=1)
MAX_LEASE: Final = timedelta(days=7)
MAX_DELAY: Final = timedelta(days=36_500)
MAX_SPREAD: Final = timedelta(hours=1)
MAX_CHART_MINUTES: Final = 1440
"""Most minutes one ``introspect.finished_per_minute`` call covers (a day, O10)."""
MAX_LEASE_SLOTS: Final = 1_000_000
"""Largest ``limit`` of a fleet lease key (slots live at once, K01)."""
