"""The operator front door: :class:`AsyncIntrospectDoor` over a driver's :class:`AsyncIntrospectBackend`.

``driver.introspect`` is an :class:`AsyncIntrospectDoor`. It implements the public
:class:`jobcore.driver.Introspector` (rules O01-O10, C10, R01, S05) once for every driver:
it checks every argument (ids, filters, pages and cursors, bulk limits, spreads,
retention policies, reasons, chart windows), applies the defaults, intersects each verb's filter with
the verb's state guard from :data:`jobcore.vocabulary.GUARDS`, and words every refusal
through :mod:`jobcore.vocabulary`. Junk input never reaches the backend.

A backend does only what needs the store, atomically: read, or move a job out of one
of the states it is given, and answer what it found so the door can word a refusal.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Protocol, runtime_checkable

from jobcore import validate as v
from jobcore.door._common import (
    FINISHED,
    NO_ROWS,
    FinishedRow,
    Refused,
    Spacing,
    chart_since,
    guarded,
    job_seq,
    prune_cutoffs,
    reason_text,
    spacing,
)
from jobcore.driver import Duration
from jobcore.records import (
    FINISHED_STATES,
    BulkResult,
    FinishedCount,
    Job,
    JobFilter,
    JobState,
    Page,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Stats,
)
from jobcore.vocabulary import (
    GUARDS,
    MAX_CHART_MINUTES,
    MAX_PRUNE_ROWS,
    key_held,
    not_found,
    refused,
)

__all__ = ["AsyncIntrospectBackend", "AsyncIntrospectDoor"]
__all__ += ["FinishedRow", "Refused", "Spacing", "chart_since", "job_seq", "prune_cutoffs"]  # shared, for drivers


@runtime_checkable
class AsyncIntrospectBackend(Protocol):
    """What a driver implements for reads, operator verbs and retention: store access only.

    Every argument arrives checked by :class:`AsyncIntrospectDoor`: ids as sequence numbers
    (:func:`job_seq`), filters as :class:`JobFilter` whose ``state`` is already the verb's
    guard intersected with the caller's states (never empty; ``None`` only for ``list``,
    meaning every state), limits within their bounds, texts within their limits. A
    backend never raises for argument shape and never words a refusal: a single-job verb
    answers the moved :class:`Job`, a :class:`Refused` naming the state it found, or
    ``None`` when no job has that id. Time is the store's (F01): "now" is the backend's.
    Store failures raise :class:`~jobcore.errors.BackendError` subclasses.
    """

    async def get(self, seq: int) -> Job | None:
        """The job with sequence ``seq``, or ``None`` (O09)."""
        ...

    async def list_older(self, flt: JobFilter, limit: int, below: int | None) -> Sequence[Job]:
        """Up to ``limit`` jobs matching ``flt`` with sequence below ``below`` (all if ``None``), newest first (O07)."""
        ...

    async def list_newer(self, flt: JobFilter, limit: int, above: int) -> Sequence[Job]:
        """Up to ``limit`` jobs matching ``flt`` with sequence above ``above``, OLDEST first (O07)."""
        ...

    async def stats(self) -> Stats:
        """Counts per (queue, state) and per queue the age of the oldest due job, on the store's clock (O08)."""
        ...

    async def dead_letters(self, queue: str | None, limit: int) -> Sequence[Job]:
        """Up to ``limit`` ``dead`` jobs (of ``queue`` if given), latest ``finished_at`` first, then newest (O08)."""
        ...

    async def finished_counts(self, minutes: int) -> Sequence[FinishedRow]:
        """Per (minute, finished state), how many jobs have ``finished_at`` at or after
        :func:`chart_since` (now, ``minutes``) on the store's clock (O10): the minute as the
        UTC start of the minute ``finished_at`` falls in; rows of count 0 may be left out,
        in any order (the door sorts)."""
        ...

    async def rescue(self) -> RescueResult:
        """Sweep lapsed leases in every queue (C10, with C07/C08's history entries): see ``Introspector.rescue``."""
        ...

    async def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        """If job ``seq`` is in ``states``: ``cancelled`` now, lease cleared, key freed, a ``Cancelled``
        entry with ``message`` appended (O01); answer it. Otherwise ``None`` (found or not)."""
        ...

    async def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        """If job ``seq`` is in ``states`` and no live job of its name holds its key: ``ready``, due now,
        ``attempt`` 0, ``finished_at``/``result`` cleared, key live again (O02). A key clash answers
        ``Refused(state, key, holder, clash=True)``; a job in another state ``Refused(state)``."""
        ...

    async def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        """If job ``seq`` is in ``states``: delete it (its key freed) and answer it as it was (O03)."""
        ...

    async def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        """If job ``seq`` is in ``states``: ``ready`` and due now, ``attempt`` capped at
        ``max_attempts - 1`` (O04 promote, S05 resume); wake its queue's subscribers."""
        ...

    async def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        """Cancel (as :meth:`cancel`) up to ``limit`` jobs matching ``flt``, oldest first; ``remaining``:
        how many still match after (O05). The write re-checks ``flt.state``."""
        ...

    async def requeue_many(self, flt: JobFilter, limit: int, spacing: Spacing) -> BulkResult:
        """Requeue up to ``limit`` jobs matching ``flt``, oldest first (O05, O06): a row whose key a
        live job of its name holds stays; of rows sharing a name and key only the oldest moves.
        Row ``i`` is due at now + ``spacing(n)[i]`` (``scheduled`` if later than now).
        ``remaining``: how many a second call could still move."""
        ...

    async def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        """Delete up to ``limit`` jobs matching ``flt``, oldest first (O05)."""
        ...

    async def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        """Make up to ``limit`` jobs matching ``flt`` ``ready`` and due now, oldest first (O05)."""
        ...

    async def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        """Delete up to ``limit`` jobs of the states in ``ages`` (never empty) finished at or before
        now - age (:func:`prune_cutoffs`), oldest ``finished_at`` first then enqueue order, in
        batches of at most ``batch`` rows, each its own short atomic step; none if ``dry_run``.
        Answer removed and still-eligible counts per state (states absent count 0; the door
        caps ``remaining`` at MAX_PRUNE_ROWS) (R01, R02)."""
        ...


class AsyncIntrospectDoor:
    """The public :class:`~jobcore.driver.Introspector` of every driver: checks, guards, wording."""

    __slots__ = ("_backend",)

    def __init__(self, backend: AsyncIntrospectBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> AsyncIntrospectBackend:
        """The driver's store access this door fronts."""
        return self._backend

    # -- reads ---------------------------------------------------------------------------

    async def get(self, job_id: str) -> Job | None:
        seq = job_seq(v.check_id(job_id))
        return None if seq is None else await self._backend.get(seq)

    async def list(
        self, filter: JobFilter | None = None, limit: int = v.DEFAULT_PAGE, *,
        after: str | None = None, before: str | None = None,
    ) -> Page:
        flt = v.check_filter(filter)
        size, after_seq, before_seq = v.check_page(limit, after, before)
        if flt.state is not None and not flt.state:  # an empty set of states matches nothing
            return Page(jobs=())
        if before_seq is not None:
            newer = await self._backend.list_newer(flt, size + 1, before_seq)
            jobs = tuple(reversed(newer[:size]))
            return Page(
                jobs=jobs,
                after=v.encode_cursor(int(jobs[-1].id)) if jobs else None,
                before=v.encode_cursor(int(jobs[0].id)) if len(newer) > size else None,
            )
        jobs = tuple(await self._backend.list_older(flt, size, after_seq))
        return Page(
            jobs=jobs,
            after=v.encode_cursor(int(jobs[-1].id)) if len(jobs) == size else None,
            before=v.encode_cursor(int(jobs[0].id)) if jobs and after_seq is not None else None,
        )

    async def stats(self) -> Stats:
        return await self._backend.stats()

    async def dead_letters(self, queue: str | None = None, limit: int = v.DEFAULT_PAGE) -> builtins.list[Job]:
        name = v.check_name(queue, "queue", optional=True)
        size = v.check_int(limit, "limit", 1, v.MAX_PAGE)
        return list(await self._backend.dead_letters(name, size))

    async def finished_per_minute(self, minutes: int = 60) -> builtins.list[FinishedCount]:
        size = v.check_int(minutes, "minutes", 1, MAX_CHART_MINUTES)
        rows = [
            FinishedCount(minute=minute, state=state, count=int(count))
            for minute, state, count in await self._backend.finished_counts(size)
            if count > 0 and state in FINISHED_STATES
        ]
        return sorted(rows, key=lambda r: (r.minute, r.state.value))

    async def rescue(self) -> RescueResult:
        return await self._backend.rescue()

    # -- dependencies (rules D) ----------------------------------------------------------------

    async def parents(self, job_id: str) -> builtins.list[Job]:
        """The jobs ``job_id`` waits on (D05), oldest first; a removed parent is left out.
        ``JC_JOB_NOT_FOUND`` for an unknown id; ``[]`` on a store without ``dependencies``."""
        return (await self._relatives(job_id))[0]

    async def children(self, job_id: str) -> builtins.list[Job]:
        """The jobs that depend on ``job_id`` (D05), oldest first; ``JC_JOB_NOT_FOUND`` for an unknown id."""
        return (await self._relatives(job_id))[1]

    async def _relatives(self, job_id: str) -> tuple[builtins.list[Job], builtins.list[Job]]:
        seq = job_seq(v.check_id(job_id))
        reader = getattr(self._backend, "relatives", None)
        if reader is None:  # a store without the dependencies capability: no job has relatives
            found = None if seq is None else await self._backend.get(seq)
            if found is None:
                raise not_found(job_id)
            return [], []
        answer = None if seq is None else await reader(seq)
        if answer is None:
            raise not_found(job_id)
        parents, children = answer
        return list(parents), list(children)

    # -- single-job verbs ------------------------------------------------------------------

    async def cancel(self, job_id: str, reason: str | None = None) -> Job | None:
        text = reason_text(reason)
        seq = job_seq(v.check_id(job_id))
        return None if seq is None else await self._backend.cancel(seq, GUARDS["cancel"].states, text)

    async def requeue(self, job_id: str) -> Job:
        return await _moved("requeue", job_id, self._backend.requeue)

    async def remove(self, job_id: str) -> Job | None:
        seq = job_seq(v.check_id(job_id))
        found = None if seq is None else await self._backend.remove(seq, GUARDS["remove"].states)
        if isinstance(found, Refused):
            raise refused("remove", job_id, found.state)
        return found

    async def promote(self, job_id: str) -> Job:
        return await _moved("promote", job_id, self._backend.make_due)

    async def resume(self, job_id: str) -> Job:
        return await _moved("resume", job_id, self._backend.make_due)

    # -- bulk verbs: each applies its own guard whatever the filter says (O05) ---------------

    async def cancel_many(
        self, filter: JobFilter | None = None, *, reason: str | None = None, limit: int = v.MAX_BULK_ROWS,
    ) -> BulkResult:
        flt, size = guarded("cancel", filter), v.check_bulk_limit(limit)
        text = reason_text(reason)
        return NO_ROWS if flt is None else await self._backend.cancel_many(flt, size, text)

    async def requeue_many(
        self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS, spread: Duration | None = None,
    ) -> BulkResult:
        flt, size = guarded("requeue", filter), v.check_bulk_limit(limit)
        window = None if spread is None else v.check_spread(spread)
        return NO_ROWS if flt is None else await self._backend.requeue_many(flt, size, spacing(window))

    async def remove_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = guarded("remove", filter), v.check_bulk_limit(limit)
        return NO_ROWS if flt is None else await self._backend.remove_many(flt, size)

    async def promote_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = guarded("promote", filter), v.check_bulk_limit(limit)
        return NO_ROWS if flt is None else await self._backend.promote_many(flt, size)

    # -- retention (R01) -----------------------------------------------------------------------

    async def prune(
        self, policy: RetentionPolicy | None = None, *, limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH, dry_run: bool = False,
    ) -> PruneResult:
        rules, size, step = v.check_prune(policy, limit, batch, dry_run=dry_run)
        ages = {state: age for state in FINISHED if (age := rules.age(state)) is not None}
        zero = dict.fromkeys(FINISHED, 0)
        if not ages:  # every finished state kept forever
            return PruneResult(removed=zero, remaining=dict(zero))
        found = await self._backend.prune(ages, size, step, dry_run)
        return PruneResult(
            removed={s: found.removed.get(s, 0) for s in FINISHED},
            # Counted up to MAX_PRUNE_ROWS per state ("at least this many"), whatever the store counted.
            remaining={s: min(found.remaining.get(s, 0), MAX_PRUNE_ROWS) for s in FINISHED},
        )

    def __repr__(self) -> str:
        return f"AsyncIntrospectDoor({self._backend!r})"


_Move = Callable[[int, frozenset[JobState]], Awaitable[Job | Refused | None]]


async def _moved(verb: str, job_id: str, move: _Move) -> Job:
    """Run a refusable single-job verb: the job moved, or the refusal its answer names."""
    seq = job_seq(v.check_id(job_id))
    found = None if seq is None else await move(seq, GUARDS[verb].states)
    if found is None:
        raise not_found(job_id)
    if isinstance(found, Refused):
        if found.clash:
            raise key_held(job_id, found.key, found.holder)
        raise refused(verb, job_id, found.state)
    return found

