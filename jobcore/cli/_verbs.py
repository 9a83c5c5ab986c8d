"""What the operator CLI and the web dashboard share: reading filters, running a verb, counting a selection.

Both front ends of the operator verbs (``jobcore cancel ...`` and the dashboard's
buttons) call the same functions here, so a verb means the same thing, refuses the
same way and reports the same counts wherever it is run. Everything goes through the
public :class:`~jobcore.driver.Introspector`, so it works on every driver.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from jobcore.cli._output import iso, when
from jobcore.driver import Duration, Introspector
from jobcore.errors import OptionInvalid
from jobcore.records import BulkResult, Job, JobError, JobFilter, JobState, Stats
from jobcore.vocabulary import not_found, refused

__all__ = [
    "STATE_ORDER",
    "VERBS",
    "bulk_call",
    "describe_filter",
    "error_to_dict",
    "estimate",
    "parse_state",
    "parse_time",
    "run_one",
    "stats_data",
]

STATE_ORDER = tuple(JobState)
"""States in the order every table shows them (scheduled first, cancelled last)."""

VERBS = ("cancel", "requeue", "remove", "promote", "resume")
"""The operator verbs, single and (all but resume) bulk, in the order the CLI lists them."""


def error_to_dict(error: JobError) -> dict[str, Any]:
    """One error-history entry as JSON-ready data."""
    return {"type": error.type, "message": error.message, "at": iso(error.at), "attempt": error.attempt}


def parse_state(text: str, option: str = "--state") -> JobState:
    """A state name (any case, blanks around it ignored); anything else is ``JC_OPTION_INVALID``."""
    try:
        return JobState(text.strip().lower())
    except ValueError:
        raise OptionInvalid(
            f"{option} {text!r:.40} is not a job state", f"use one of: {', '.join(s.value for s in STATE_ORDER)}"
        ) from None


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 time (``Z`` accepted; no offset means UTC); anything else is ``JC_OPTION_INVALID``."""
    raw = text.strip()
    if raw[-1:] in ("Z", "z"):
        raw = raw[:-1] + "+00:00"  # Python 3.10's fromisoformat does not read "Z"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise OptionInvalid(
            f"{option} {text!r:.40} is not an ISO 8601 time",
            "write e.g. 2030-01-01T12:00:00Z or 2030-01-01; a time without an offset is UTC",
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def describe_filter(flt: JobFilter) -> str:
    """``flt`` as ``queue=mail state=dead,failed ...`` for a confirmation question."""
    parts = [f"queue={flt.queue}" if flt.queue else "", f"name={flt.name}" if flt.name else ""]
    if flt.state:
        parts.append("state=" + ",".join(sorted(s.value for s in flt.state)))
    if flt.id_prefix:
        parts.append(f"id-prefix={flt.id_prefix}")
    if flt.created_from:
        parts.append(f"created-from={when(flt.created_from)}")
    if flt.created_to:
        parts.append(f"created-to={when(flt.created_to)}")
    return " ".join(p for p in parts if p)


def stats_data(stats: Stats) -> dict[str, Any]:
    """``stats`` as JSON-ready data: per queue its counts per state and oldest due age, and totals."""
    queues = {
        queue: {
            "counts": {s.value: stats.counts.get(queue, {}).get(s, 0) for s in STATE_ORDER},
            "oldest_due_age_seconds": (
                stats.oldest_due_age[queue].total_seconds() if queue in stats.oldest_due_age else None
            ),
        }
        for queue in sorted(set(stats.counts) | set(stats.oldest_due_age))
    }
    return {
        "queues": queues,
        "totals": {s.value: stats.count(s) for s in STATE_ORDER},
        "dead": stats.count(JobState.DEAD),
    }


def estimate(stats: Stats, flt: JobFilter, guard: frozenset[JobState]) -> int | None:
    """How many jobs the verb's guard and ``flt`` match now, when stats can tell (queue and state only)."""
    if flt.name is not None or flt.id_prefix is not None or flt.created_from or flt.created_to:
        return None
    states = guard if flt.state is None else guard & flt.state
    return sum(stats.count(s, flt.queue) for s in states)


def run_one(verb: str, intro: Introspector, job_id: str, *, reason: str | None = None) -> Job:
    """Run ``verb`` on one job and answer it as the verb left it.

    ``cancel`` and ``remove`` answer ``None`` in the protocol for a job they leave alone;
    here that becomes the refusal the operator needs (``JC_JOB_NOT_FOUND``,
    ``JC_JOB_NOT_CANCELLABLE``), as the other verbs already raise.
    """
    if verb == "cancel":
        job = intro.cancel(job_id, reason)
        if job is not None:
            return job
        found = intro.get(job_id)
        if found is None:
            raise not_found(job_id)
        raise refused("cancel", job_id, found.state)
    if verb == "remove":
        removed = intro.remove(job_id)
        if removed is None:
            raise not_found(job_id)
        return removed
    if verb not in VERBS:
        raise OptionInvalid(f"{verb!r:.20} is not an operator verb", f"use one of: {', '.join(VERBS)}")
    method: Callable[[str], Job] = getattr(intro, verb)
    return method(job_id)


def bulk_call(
    verb: str, intro: Introspector, flt: JobFilter, limit: int, *,
    reason: str | None = None, spread: Duration | None = None,
) -> BulkResult:
    """One call of ``verb``'s bulk form (at most ``limit`` rows); ``remaining`` says what a next call could move."""
    if verb == "cancel":
        return intro.cancel_many(flt, reason=reason, limit=limit)
    if verb == "requeue":
        return intro.requeue_many(flt, limit=limit, spread=spread)
    if verb == "remove":
        return intro.remove_many(flt, limit=limit)
    if verb == "promote":
        return intro.promote_many(flt, limit=limit)
    raise OptionInvalid(f"{verb!r:.20} has no bulk form", "use cancel, requeue, remove or promote over a filter")
