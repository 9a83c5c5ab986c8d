"""The jobs part of the front door: :class:`AsyncFrontDoor` (what users call) over a :class:`AsyncJobsBackend`.

:class:`AsyncFrontDoor` implements the public :class:`~jobcore.driver.JobDriver` verbs
(enqueue, enqueue_many, claim, heartbeat, progress, start, ack, ack_many, nack, subscribe,
migrate, close) once for every driver: it checks every argument
(:mod:`jobcore.validate`), applies the defaults, refuses what a backend cannot do
(capabilities, :data:`jobcore.driver.CAPABILITIES`), and only then calls the backend
with checked values. A backend never sees a value the door would refuse, so it never
raises :class:`~jobcore.errors.InvalidInput` for an argument's shape.

A driver is a :class:`AsyncFrontDoor` subclass whose ``__init__`` builds its backend and
passes it to :meth:`AsyncFrontDoor.__init__`; a third-party driver implements
:class:`AsyncJobsBackend` (plus the introspection, lease and schedule backends) and gets
every check, default and refusal from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar, cast, overload, runtime_checkable

from jobcore import _tracing
from jobcore import validate as v
from jobcore.clock import Clock
from jobcore.door._common import FIRST_POLL, AsyncWake, wait_timeout
from jobcore.driver import Duration, Subscription
from jobcore.errors import NotSupported, OptionInvalid
from jobcore.records import FINISHED_STATES, ClaimResult, ClaimToken, Job, Migration
from jobcore.vocabulary import not_found

if TYPE_CHECKING:
    from jobcore.door._introspect_async import AsyncIntrospectDoor

__all__ = ["AsyncFrontDoor", "AsyncJobsBackend"]

_Door = TypeVar("_Door", bound="AsyncFrontDoor")

DEFAULT_POLL: Final = 1.0
"""``wait``'s default ``poll``: the longest pause, in seconds, between two reads of the job."""


class _LinkedBackend(Protocol):
    """A backend offering ``dependencies``: see :class:`AsyncJobsBackend`."""

    async def insert_linked(
        self, jobs: Sequence[v.StoreTimedJob], links: Sequence[v.Links | None], connection: Any
    ) -> list[Job]: ...


@runtime_checkable
class AsyncJobsBackend(Protocol):
    """The narrow interface a driver implements for jobs; every argument arrives checked.

    The door (:class:`AsyncFrontDoor`) has already refused bad input, applied defaults,
    encoded payloads and results as canonical JSON text, and turned errors into
    ``(type, message)`` entries. A backend keeps the rules that need the store's
    atomicity (docs/rules.md ids below) and answers; it never re-checks arguments and
    never spells a refusal of its own (state sets and history texts come from
    :mod:`jobcore.vocabulary`). A token that no longer matches is an answer (``False``
    or ``None``), never an error. Database failures raise a
    :class:`~jobcore.errors.BackendError` subclass.

    Attributes:
        clock: The source of "now" (F01): the store's clock, or an injected one standing in for it.
        capabilities: Names from :data:`jobcore.driver.CAPABILITIES` the backend offers. The
            door emulates ``ack_landed_only`` from full acks and refuses ``claim(start=False)``
            without ``deferred_start`` and a transaction handle without ``transactional_enqueue``.
        connection_type: With ``transactional_enqueue``, the type (or types) of the handle
            :meth:`insert` may receive (``psycopg.Connection``, pymongo's ``ClientSession``);
            the door refuses anything else (``JC_OPTION_INVALID``).

    Optional, declared by the ``heartbeat_many`` capability: ``heartbeat_many(tokens, lease) ->
    list[bool]`` (awaited) is :meth:`heartbeat` for each of ``tokens`` (checked, never empty),
    answered in input order, in one round trip (or a few); a token given twice answers twice.
    Rows another session holds past the settle bound raise
    :class:`~jobcore.errors.BackendLocked` with ``answers``/``locked`` once the others were
    renewed, as :meth:`start` does. Without the capability the door sends one :meth:`heartbeat`
    per token.

    Optional, declared by the ``finish_notify`` capability: ``watch(seq, wake) -> Subscription`` (awaited)
    calls ``wake()`` when job ``seq`` may have finished (A02), until the answer's
    ``close()``. From the moment it returns, every settle that finishes the job (ack, a
    nack to ``dead``/``failed``, burial, cancel) calls ``wake()`` soon after it commits,
    from any thread; spurious calls are allowed (``wait`` re-reads the job after each and
    trusts nothing else, and reads it once more after ``watch`` returns, so a finish
    between its first read and the watch is not missed). It raises
    :class:`~jobcore.errors.NotSupported` when wake-ups cannot be had right now, and
    ``wait`` polls. A backend without ``finish_notify`` need not define it: ``wait`` polls.

    A backend offering the ``dependencies`` capability (rules D) also has
    ``insert_linked(jobs, links, connection) -> list[Job]`` (async in this flavour), outside
    the protocol so that a backend without it still is one: :meth:`insert` of jobs some of
    which have parents. ``links[i]`` is item ``i``'s checked :class:`~jobcore.validate.Links`
    or ``None``; its ``earlier`` positions name items of the same batch (whatever each
    answers: the new job, or its key's live holder). All or nothing (D03): a parent id the
    store does not hold refuses the whole call with :class:`~jobcore.errors.DependencyNotFound`,
    a parent already ``failed``, ``dead`` or ``cancelled`` (unless ``run_anyway``) with
    :class:`~jobcore.errors.DependencyInvalid`, and nothing is written. A new job with a
    parent not yet ``done`` is stored ``suspended``, waiting (D01); it becomes due in the
    same atomic step that makes its last parent ``done``, and a parent ending otherwise
    cancels it (D02). A duplicate (E02) keeps the holder's parents. Such a backend's
    introspection backend answers ``relatives(id) -> (parents, children)``.
    """

    @property
    def clock(self) -> Clock: ...

    @property
    def capabilities(self) -> frozenset[str]: ...

    async def insert(self, jobs: Sequence[v.StoreTimedJob], connection: Any) -> list[Job]:
        """Store checked jobs in one round trip and answer them in input order (E01, E02, E05).

        ``jobs`` is never empty. Each item's due time and state are the store's to decide
        on its own clock (F01): ``job.due(now)`` with the store's now (to the millisecond).
        A live job of the same name holding ``key`` is answered instead, with
        ``duplicate=True``, including a key repeated inside the batch (the later item
        answers the earlier one). ``connection`` is ``None`` or (``transactional_enqueue``
        only) the caller's transaction handle, already checked against
        :attr:`connection_type`: the insert joins it.
        """
        ...

    async def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        """One atomic claim (C01-C03, C06-C08): burial, reclaim, then due jobs by order.

        ``queues`` are distinct checked names (1..100), ``limit`` 1..MAX_CLAIM_BATCH,
        ``lease`` a positive finite duration, ``drop`` the names buried ``failed`` instead
        of ``dead``. ``start=False`` (``deferred_start`` only; the door refuses it
        otherwise) hands the jobs out held (F04).
        """
        ...

    async def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        """Move a current token's lease to ``now + lease`` (L01-L03); ``False`` when not current."""
        ...

    async def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        """Store ``{value, message, updated_at = now}`` as a current token's job's progress (G01,
        G02); ``False`` when not current, nothing written. ``value`` is a float 0..1 or None,
        ``message`` text of at most ``MAX_PROGRESS_MESSAGE`` characters or None (checked). It
        moves nothing else: not the lease, not ``run_at``. ``claim`` clears progress (sets it
        to None) on every job it takes; settling keeps it (G04)."""
        ...

    async def start(self, tokens: list[ClaimToken]) -> list[bool]:
        """Start held attempts (F04, ``deferred_start`` only); ``True`` per current token, in input order."""
        ...

    async def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        """Settle each current token ``done`` with its result text (JSON, or None) (S01, S06, S07).

        A token repeated in the batch lands once. Answers in input order: the settled
        :class:`Job` or ``None``; with ``landed_only`` (``ack_landed_only`` only; the door
        asks it otherwise never) ``True``/``False`` and no job read back.
        """
        ...

    async def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        """Settle a failed attempt (S02-S05) with the error entry ``(type_name, message)``.

        The flags are real bools, never ``fail`` with ``park``; ``retry_at`` is an aware
        UTC time or ``None`` (now). ``None`` when the token is not current (S06).
        """
        ...

    async def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> Subscription:
        """Call ``callback(queue)`` when a job may have become due in ``queues`` (checked
        names; ``callback`` is callable). Without ``notify``: a subscription that never fires."""
        ...

    async def migrate(self, dry_run: bool) -> Migration:
        """Install or upgrade the store's schema; idempotent."""
        ...

    async def close(self) -> None:
        """Release connections and threads; idempotent."""
        ...


class AsyncFrontDoor:
    """The public :class:`~jobcore.driver.JobDriver` verbs, checked once, over a :class:`AsyncJobsBackend`.

    Args:
        jobs: The driver's jobs backend.
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
    """

    clock: Clock
    introspect: AsyncIntrospectDoor
    """Reads and operator verbs: set by the driver's ``__init__``; ``wait`` reads the job through it."""

    def __init__(self, jobs: AsyncJobsBackend, *, default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS) -> None:
        self._backend = jobs
        self.clock = jobs.clock
        self._default_max_attempts = v.check_int(default_max_attempts, "default_max_attempts", 1, v.MAX_ATTEMPTS)
        self._capabilities_given: frozenset[str] | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        """What the backend offers (:data:`jobcore.driver.CAPABILITIES`), unless set on the driver."""
        given = self._capabilities_given
        return self._backend.capabilities if given is None else given

    @capabilities.setter
    def capabilities(self, value: Iterable[str]) -> None:
        self._capabilities_given = frozenset(value)

    # -- enqueue -----------------------------------------------------------------------

    async def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, depends_on: Iterable[str | Job] | None = None, on_parent_failure: str = "cancel",
    ) -> Job:
        """See :meth:`jobcore.driver.JobDriver.enqueue`."""
        new = v.new_job(
            name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
            max_attempts=max_attempts, key=key, now=None, default_max_attempts=self._default_max_attempts,
        )
        links = None if depends_on is None and on_parent_failure == "cancel" else v.check_links(
            depends_on, on_parent_failure, None
        )
        if links is None and _tracing.hook is None:  # the common case pays two tests
            return (await self._backend.insert((new,), None))[0]
        return (await self._enqueue_jobs((new,), None, None if links is None else (links,)))[0]

    async def enqueue_many(self, specs: Iterable[Any]) -> list[Job]:
        """See :meth:`jobcore.driver.JobDriver.enqueue_many`."""
        items = specs if isinstance(specs, list) else _listed(specs)
        news = v.new_jobs(items, now=None, default_max_attempts=self._default_max_attempts)
        if not news:
            return []
        links = v.batch_links(items)
        if links is None and _tracing.hook is None:
            return await self._backend.insert(news, None)
        return await self._enqueue_jobs(news, None, links)

    async def _enqueue_jobs(
        self, news: Sequence[v.StoreTimedJob], connection: Any, links: Sequence[v.Links | None] | None
    ) -> list[Job]:
        """The store's insert, with parents (rules D) when ``links`` is given, inside an enqueue
        span when tracing is on (:mod:`jobcore.contrib.otel`): each job then carries the span's
        context to the store, for its attempts to link to."""
        hook = _tracing.hook
        if hook is None:
            return await self._enqueue_rows(news, connection, links)
        with hook.enqueue(news) as span:
            answers = await self._enqueue_rows(span.jobs, connection, links)
            span.inserted(answers)
        return answers

    async def _enqueue_rows(
        self, news: Sequence[v.StoreTimedJob], connection: Any, links: Sequence[v.Links | None] | None
    ) -> list[Job]:
        if links is None:
            return await self._backend.insert(news, connection)
        return await self._linked_backend().insert_linked(news, links, connection)

    def _linked_backend(self) -> _LinkedBackend:
        """The backend, refusing ``depends_on`` when it cannot keep rules D (nothing written)."""
        if "dependencies" not in self.capabilities:
            raise NotSupported(
                "this store cannot hold jobs that wait on other jobs (depends_on= was given)",
                "enqueue without depends_on=, or use a store offering the dependencies capability",
            )
        return cast(_LinkedBackend, self._backend)

    def _joined(self, connection: object, keyword: str) -> Any:
        """``connection`` checked as a transaction handle the backend takes, or ``None``."""
        if connection is None:
            return None
        if "transactional_enqueue" not in self.capabilities:
            raise NotSupported(
                f"this store cannot enqueue inside the caller's transaction ({keyword}= was given)",
                f"enqueue without {keyword}=, or use a store offering transactional_enqueue",
            )
        kind = getattr(self._backend, "connection_type", None)
        if kind is None or not isinstance(connection, kind):
            expected = getattr(kind, "__name__", "the store's transaction handle")
            raise OptionInvalid(
                f"{keyword} must be a {expected}, got {type(connection).__name__}",
                f"pass the {expected} whose transaction the job should join",
            )
        return connection

    async def _enqueue_in(
        self, connection: object, keyword: str, name: str, payload: Any, **options: Any
    ) -> Job:
        """``enqueue`` joining the caller's transaction (drivers offering ``transactional_enqueue``)."""
        depends_on, mode = options.pop("depends_on", None), options.pop("on_parent_failure", "cancel")
        new = v.new_job(name, payload, now=None, default_max_attempts=self._default_max_attempts, **options)
        links = v.check_links(depends_on, mode, None)
        handle = self._joined(connection, keyword)
        if links is None and _tracing.hook is None:
            return (await self._backend.insert((new,), handle))[0]
        return (await self._enqueue_jobs((new,), handle, None if links is None else (links,)))[0]

    async def _enqueue_many_in(self, connection: object, keyword: str, specs: Iterable[Any]) -> list[Job]:
        """``enqueue_many`` joining the caller's transaction."""
        items = specs if isinstance(specs, list) else _listed(specs)
        news = v.new_jobs(items, now=None, default_max_attempts=self._default_max_attempts)
        handle = self._joined(connection, keyword)
        if not news:
            return []
        links = v.batch_links(items)
        if links is None and _tracing.hook is None:
            return await self._backend.insert(news, handle)
        return await self._enqueue_jobs(news, handle, links)

    # -- claim and settle ----------------------------------------------------------------

    async def claim(
        self, queues: Sequence[str], *, worker_id: str, limit: int = 1, lease: Duration,
        drop_exhausted: Iterable[str] = (), start: bool = True,
    ) -> ClaimResult:
        """See :meth:`jobcore.driver.JobDriver.claim` and :class:`~jobcore.driver.DeferredStart`."""
        names, worker, size, span, drop = v.check_claim(queues, worker_id, limit, lease, drop_exhausted)
        if start is not True and not v.check_bool(start, "start") and "deferred_start" not in self.capabilities:
            raise NotSupported(
                "this store cannot hold claims unstarted (claim(start=False))",
                "claim with start=True, or use a store offering deferred_start",
            )
        return await self._backend.claim(names, worker, size, span, drop=drop, start=start)

    async def heartbeat(self, token: ClaimToken, lease: Duration) -> bool:
        """See :meth:`jobcore.driver.JobDriver.heartbeat`."""
        return await self._backend.heartbeat(v.check_token(token), v.check_lease(lease))

    async def heartbeat_many(self, tokens: Iterable[ClaimToken], lease: Duration) -> list[bool]:
        """See :meth:`jobcore.driver.BatchHeartbeats.heartbeat_many`.

        Without the backend's ``heartbeat_many``, one :meth:`heartbeat` per token.
        """
        checked, span = v.check_tokens(tokens), v.check_lease(lease)
        if not checked:
            return []
        if "heartbeat_many" in self.capabilities:
            answers: list[bool] = await cast(Any, self._backend).heartbeat_many(checked, span)
            return answers
        return [await self._backend.heartbeat(token, span) for token in checked]

    async def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
        """See :meth:`jobcore.driver.JobDriver.progress`."""
        checked = v.check_token(token)
        fraction, text = v.check_progress(value, message)
        store = getattr(self._backend, "progress", None)
        if store is None:
            raise NotSupported(
                "this store's driver cannot store progress (its jobs backend has no progress verb)",
                "keep progress in the process (ctx.progress still logs it), or upgrade the driver",
            )
        answer: bool = await store(checked, fraction, text)
        return answer

    async def start(self, tokens: Iterable[ClaimToken]) -> list[bool]:
        """See :meth:`jobcore.driver.DeferredStart.start`."""
        checked = v.check_tokens(tokens)
        if "deferred_start" not in self.capabilities:
            raise NotSupported(
                "this store holds no claims unstarted, so there is nothing to start",
                "claim with start=True (the default); check driver.capabilities for deferred_start",
            )
        return await self._backend.start(checked) if checked else []

    async def ack(self, token: ClaimToken, result: Any = None) -> Job | None:
        """See :meth:`jobcore.driver.JobDriver.ack`."""
        text = None if result is None else v.encode_json(result, "result")
        answer: Job | None = (await self._backend.ack_many([(v.check_token(token), text)], False))[0]
        return answer

    @overload
    async def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[False] = ...
    ) -> list[Job | None]: ...

    @overload
    async def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[True]) -> list[bool]: ...

    async def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: bool = False
    ) -> list[Job | None] | list[bool]:
        """See :meth:`jobcore.driver.JobDriver.ack_many` and :class:`~jobcore.driver.LandedAcks`.

        Without the backend's ``ack_landed_only``, ``landed_only=True`` is answered from full acks.
        """
        lean = v.check_bool(landed_only, "landed_only")
        checked = [
            (v.check_token(token), None if result is None else v.encode_json(result, "result"))
            for token, result in v.check_pairs(items)
        ]
        if not checked:
            return []
        if lean and "ack_landed_only" not in self.capabilities:
            return [job is not None for job in await self._backend.ack_many(checked, False)]
        return await self._backend.ack_many(checked, lean)

    async def nack(
        self, token: ClaimToken, error: BaseException | str, *, retry_at: datetime | None = None,
        dead_letter: bool = True, fail: bool = False, counts_as_attempt: bool = True, park: bool = False,
    ) -> Job | None:
        """See :meth:`jobcore.driver.JobDriver.nack`."""
        checked = v.check_token(token)
        type_name, message = v.error_entry(error)
        due = None if retry_at is None else v.check_time(retry_at, "retry_at")
        v.check_nack_flags(dead_letter=dead_letter, fail=fail, counts_as_attempt=counts_as_attempt, park=park)
        return await self._backend.nack(
            checked, type_name, message, due, dead_letter=dead_letter, fail=fail,
            counts_as_attempt=counts_as_attempt, park=park,
        )

    # -- waiting on results (A01-A04) -------------------------------------------------------

    async def wait(self, job_id: str, *, timeout: Duration, poll: Duration = DEFAULT_POLL) -> Job:
        """See :meth:`jobcore.driver.JobDriver.wait`.

        Reads the job; while it is live, sleeps until the backend's watch (``finish_notify``)
        wakes it or a poll is due, and reads it again. Without a watch the pauses start at
        ``FIRST_POLL`` (50 ms) and double up to ``poll``; with one,
        polling is only the safety net, every ``poll`` seconds. ``timeout`` is real time on
        this process's monotonic clock (it bounds how long the caller sleeps), never the
        store's clock.
        """
        span, step = v.check_wait(timeout, poll)
        deadline = time.monotonic() + span
        job = await self._read(job_id)
        if job.state in FINISHED_STATES:
            return job
        wake = AsyncWake()
        watch = await self._watch(job, wake)
        try:
            pause = step if watch is not None else min(FIRST_POLL, step)
            if watch is not None:  # a finish between the first read and the watch would wake nobody
                job = await self._read(job_id)
            while job.state not in FINISHED_STATES:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise wait_timeout(job, span)
                await wake.wait(min(pause, left))
                pause = min(pause * 2, step)
                job = await self._read(job_id)
            return job
        finally:
            if watch is not None:
                watch.close()

    async def _read(self, job_id: str) -> Job:
        """The job ``job_id`` as it stands, or ``JC_JOB_NOT_FOUND`` (unknown, or removed meanwhile)."""
        job = await self.introspect.get(job_id)
        if job is None:
            raise not_found(job_id)
        return job

    async def _watch(self, job: Job, wake: AsyncWake) -> Subscription | None:
        """The backend's finish watch on ``job``, or ``None`` (it has none, or refused one now): poll."""
        start = getattr(self._backend, "watch", None)
        if start is None:
            return None
        try:
            watch: Subscription = await start(int(job.id), wake.set)
        except NotSupported:  # not here, not now (a pooler in the way, a server without change streams)
            return None
        return watch

    # -- wake-ups, schema, lifecycle -------------------------------------------------------

    async def subscribe(self, queues: Sequence[str], callback: Callable[[str], None]) -> Any:
        """See :meth:`jobcore.driver.JobDriver.subscribe`."""
        names = frozenset(v.check_claim(queues, "subscriber", 1, 1, ())[0])
        if not callable(callback):
            raise OptionInvalid("callback must be callable", "pass a function taking the queue name")
        return await self._backend.subscribe(names, callback)

    async def migrate(self, *, dry_run: bool = False) -> Migration:
        """See :meth:`jobcore.driver.JobDriver.migrate`."""
        return await self._backend.migrate(v.check_bool(dry_run, "dry_run"))

    async def close(self) -> None:
        """See :meth:`jobcore.driver.JobDriver.close`."""
        await self._backend.close()

    async def __aenter__(self: _Door) -> _Door:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._backend!r})"


def _listed(specs: object) -> Any:
    """``specs`` as a list when it is an iterable of specs; anything else as given, for
    :func:`~jobcore.validate.new_jobs` to refuse with its own words."""
    if isinstance(specs, str | bytes) or not isinstance(specs, Iterable) or hasattr(specs, "keys"):
        return specs
    return list(specs)
