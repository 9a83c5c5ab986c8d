"""What the dashboard's pages read from the store, through the public driver protocol only.

Nothing here knows which driver it talks to: every figure comes from
``driver.introspect`` and ``driver.schedules``, so the pages read the same on memory,
PostgreSQL and MongoDB.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

import attrs

from jobcore.cli._verbs import estimate, parse_state, parse_time
from jobcore.driver import Introspector
from jobcore.errors import OptionInvalid
from jobcore.records import JobFilter, JobState, Stats
from jobcore.vocabulary import GUARDS, MAX_BULK_ROWS, MAX_PAGE

__all__ = [
    "CHART_MINUTES",
    "COUNT_CAP",
    "Throughput",
    "count_matching",
    "filter_from_query",
    "throughput",
]

CHART_MINUTES = 60
"""The charts cover the last hour, one bar a minute."""
COUNT_CAP = MAX_BULK_ROWS
"""A selection the stats cannot count is counted by paging, up to this many rows."""

FILTER_FIELDS = ("queue", "name", "state", "id", "from", "to")
"""Query parameters of ``/jobs`` that make its filter (the URL an alert can link to)."""


def filter_from_query(query: Mapping[str, str]) -> JobFilter | None:
    """The :class:`JobFilter` a ``/jobs?queue=&state=&name=&id=&from=&to=`` URL asks for, or ``None``.

    ``state`` may name several states separated by commas; ``from``/``to`` are ISO 8601
    (no offset means UTC), ``from`` inclusive and ``to`` exclusive, on the creation time.
    A bad value is ``JC_OPTION_INVALID`` naming the parameter.
    """
    text = {k: (query.get(k) or "").strip() for k in FILTER_FIELDS}
    states = frozenset(parse_state(part, "state") for part in text["state"].split(",") if part.strip())
    created_from = parse_time(text["from"], "from") if text["from"] else None
    created_to = parse_time(text["to"], "to") if text["to"] else None
    if not any((text["queue"], text["name"], states, text["id"], created_from, created_to)):
        return None
    return JobFilter(
        queue=text["queue"] or None, name=text["name"] or None, state=states or None,
        id_prefix=text["id"] or None, created_from=created_from, created_to=created_to,
    )


def count_matching(intro: Introspector, stats: Stats | None, flt: JobFilter, verb: str) -> tuple[int, bool]:
    """How many jobs ``verb`` would touch with ``flt`` now: ``(count, exact)``.

    From the stats when they can tell (a filter on queue and state only); otherwise by
    paging ``introspect.list`` over the verb's guard states, up to :data:`COUNT_CAP`
    rows (``exact`` is ``False`` when the cap was reached: "at least").
    """
    guard = GUARDS[verb].states
    if stats is not None:
        known = estimate(stats, flt, guard)
        if known is not None:
            return known, True
    states = guard if flt.state is None else guard & flt.state
    if not states:
        return 0, True
    narrowed = attrs.evolve(flt, state=states)
    counted, after = 0, None
    while counted < COUNT_CAP:
        page = intro.list(narrowed, MAX_PAGE, after=after)
        counted += len(page.jobs)
        if page.after is None:
            return counted, True
        after = page.after
    return counted, False


@attrs.frozen
class Throughput:
    """Jobs finished per minute over the last hour, oldest minute first."""

    start: datetime
    done: tuple[int, ...]
    failed: tuple[int, ...]
    """``failed`` and ``dead`` together: attempts that ended the job without success."""


def throughput(intro: Introspector, now: datetime) -> Throughput:
    """Completed and failed jobs per minute over the last hour, from the store (O10).

    One read, ``introspect.finished_per_minute(CHART_MINUTES)``: the store counts every
    ``done``, ``failed`` and ``dead`` job by the minute of its ``finished_at``, however long
    ago it was enqueued. ``now`` (the store's time) places the bars; a count for a minute
    outside the hour ending at ``now`` (the clock moved between the two reads) is left out.
    """
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=CHART_MINUTES - 1)
    done = [0] * CHART_MINUTES
    failed = [0] * CHART_MINUTES
    for bar in intro.finished_per_minute(CHART_MINUTES):
        minute = int((bar.minute - start).total_seconds() // 60)
        if 0 <= minute < CHART_MINUTES and bar.state is not JobState.CANCELLED:
            (done if bar.state is JobState.DONE else failed)[minute] += bar.count
    return Throughput(start, tuple(done), tuple(failed))


def check_bulk_filter(flt: JobFilter | None, verb: str) -> JobFilter:
    """A bulk verb needs at least one filter, as on the CLI: "every job" is never a default."""
    if flt is None:
        raise OptionInvalid(
            f"{verb} over every job was asked without a filter",
            "narrow the jobs page with a queue, name, state, id prefix or time range first",
        )
    return flt
