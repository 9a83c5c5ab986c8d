"""What both flavours of the operator door share: answers, id parsing, guards, cut-offs.

:mod:`jobcore.door._introspect_async` (and the sync :mod:`jobcore.door._introspect`
generated from it) check arguments and call a backend; the pure parts of that work,
which never touch a store, are kept here once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import attrs

from jobcore import validate as v
from jobcore.clock import to_millis
from jobcore.errors import WaitTimeout
from jobcore.records import FINISHED_STATES, BulkResult, JobFilter, JobState
from jobcore.vocabulary import CANCELLED_TEXT, GUARDS

__all__ = [
    "FINISHED",
    "FIRST_POLL",
    "NO_ROWS",
    "AsyncWake",
    "FinishedRow",
    "Refused",
    "Spacing",
    "Wake",
    "chart_since",
    "guarded",
    "job_seq",
    "prune_cutoffs",
    "reason_text",
    "spacing",
    "wait_timeout",
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




# -- waiting on results (A01-A04) --------------------------------------------------------

FIRST_POLL: Final = 0.05
"""Seconds before ``wait``'s first re-read on a store that sends no finish wake-ups; each
later pause doubles, up to the caller's ``poll``."""


class Wake:
    """A wake-up the sync door's ``wait`` sleeps on; :meth:`set` may be called from any thread
    (a backend's watch: a settle in another thread, a listener thread)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        """Wake the waiter (if it sleeps now, else its next sleep returns at once)."""
        self._event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep until :meth:`set` or ``seconds`` pass; whether it was set. Re-arms."""
        fired = self._event.wait(seconds)
        self._event.clear()
        return fired


class AsyncWake:
    """:class:`Wake` for the async door: ``await wait(seconds)`` sleeps without blocking the
    loop; :meth:`set` may be called from any thread or from the loop itself. Built on a
    running loop."""

    __slots__ = ("_event", "_loop")

    def __init__(self) -> None:
        import asyncio  # noqa: PLC0415 - importing jobcore (the sync drivers) must not load asyncio

        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        """Wake the waiter, from the loop's thread or any other."""
        import asyncio  # noqa: PLC0415 - loaded already: this object was built on a running loop

        try:
            running: Any = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
        elif not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
                self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, seconds: float) -> bool:
        """Sleep until :meth:`set` or ``seconds`` pass, without blocking the loop; whether it was set."""
        import asyncio  # noqa: PLC0415

        try:
            await asyncio.wait_for(self._event.wait(), seconds)
            fired = True
        except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
            fired = False
        self._event.clear()
        return fired


def wait_timeout(job: Any, waited: float) -> WaitTimeout:
    """``wait``'s refusal when ``timeout`` passed with the job still live (A03); the job rides along."""
    error = WaitTimeout(
        f"job {job.id} was still {job.state.value} after waiting {waited:g} s",
        "wait again, raise the timeout, or answer that the job is still running and poll later",
    )
    error.job = job
    return error
