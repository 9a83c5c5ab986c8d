"""Structured events: one log record per job transition a worker makes, with stable fields.

The worker calls :func:`emit` where a transition lands: an attempt starts, a settle lands
(``settled``), a lapsed final attempt is buried (``buried``), a lease is lost
(``lease_lost``), a rescue sweep puts jobs back (``rescued``), a pruning run deletes
finished jobs (``pruned``, one per state, from :mod:`jobcore.retention`). Each call writes exactly one
record on the :data:`EVENT_LOGGER` logger whose ``extra`` fields are named in
:data:`FIELDS` (missing values are ``None``), so log pipelines can index them by name.
The same :class:`Event` goes to every hook added with :func:`add_hook` first, whatever
the logging configuration (the metrics of :mod:`jobcore.metrics` are one such hook).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import attrs

from jobcore.records import Job

__all__ = [
    "EVENTS", "EVENT_LOGGER", "FIELDS", "Event", "EventHook", "add_hook", "emit", "remove_hook",
]

EVENT_LOGGER = "jobcore.events"
"""The logger every event record is written to."""

EVENTS = ("started", "settled", "buried", "lease_lost", "rescued", "pruned")
"""Values of the ``event`` field. ``started`` is logged at DEBUG; the others at INFO or above."""

FIELDS = (
    "event", "job_id", "job_name", "queue", "attempt", "outcome", "error_type", "duration_s", "count", "worker_id",
)
"""The ``extra`` fields on every event record (stable names; a value that does not apply is ``None``)."""

logger = logging.getLogger(EVENT_LOGGER)


@attrs.frozen(kw_only=True)
class Event:
    """One transition, as hooks receive it and as the record's fields carry it.

    Attributes:
        event: One of :data:`EVENTS`.
        job_id: The job's id (``None`` for a ``rescued`` sweep).
        job_name: The job's name.
        queue: The job's queue.
        attempt: The attempt number the transition ends or starts.
        outcome: ``completed``, ``retry``, ``released``, ``failed``, ``dead_lettered``,
            ``dropped`` (settled); ``dead`` or ``failed`` (buried); ``called_off`` or
            ``not_landed`` (lease_lost); ``requeued`` (rescued); ``running`` (started);
            the finished state whose jobs were deleted (pruned).
        error_type: The error's type name for failed attempts and burials, else ``None``.
        duration_s: Seconds the attempt ran in this worker (settled, lease_lost).
        count: Jobs a ``rescued`` sweep put back to ``ready``, or a ``pruned`` run deleted.
        worker_id: The worker that saw the transition.
    """

    event: str
    job_id: str | None = None
    job_name: str | None = None
    queue: str | None = None
    attempt: int | None = None
    outcome: str | None = None
    error_type: str | None = None
    duration_s: float | None = None
    count: int | None = None
    worker_id: str | None = None

    def fields(self) -> dict[str, Any]:
        """The record's ``extra``: every name of :data:`FIELDS`."""
        return {name: getattr(self, name) for name in FIELDS}


EventHook = Callable[[Event], Any]

_hooks: tuple[EventHook, ...] = ()
"""Replaced whole under the lock, so :func:`emit` (once per job transition) reads it without one."""
_hooks_lock = threading.Lock()


def add_hook(hook: EventHook) -> None:
    """Call ``hook(event)`` for every event from now on (errors in it are logged and contained)."""
    global _hooks  # noqa: PLW0603 - a tuple swapped whole, read lock-free by emit
    with _hooks_lock:
        _hooks = (*_hooks, hook)


def remove_hook(hook: EventHook) -> None:
    """Stop calling ``hook``; a hook never added is ignored."""
    global _hooks  # noqa: PLW0603 - a tuple swapped whole, read lock-free by emit
    with _hooks_lock:
        if hook in _hooks:
            kept = list(_hooks)
            kept.remove(hook)
            _hooks = tuple(kept)


def emit(
    event: str, job: Job | None, message: str, *args: object, level: int = logging.INFO,
    exc_info: Any = None, **values: Any,
) -> Event | None:
    """Tell the hooks about one transition of ``job``, then log ``message % args`` once with its fields.

    ``values`` fill the other :class:`Event` attributes (outcome, error_type, ...). Answers
    the event the hooks were given, or ``None`` when no hook is added.
    """
    hooks = _hooks
    enabled = logger.isEnabledFor(level)
    if not hooks and not enabled:  # a DEBUG "started" with no hook: once per job, for nothing
        return None
    fields = _BLANK.copy()
    fields["event"] = event
    if job is not None:
        fields["job_id"], fields["job_name"] = job.id, job.name
        fields["queue"], fields["attempt"] = job.queue, job.attempt
    fields.update(values)
    record = None
    if hooks:
        record = Event(**fields)
        for hook in hooks:
            try:
                hook(record)
            except Exception:  # a broken hook must not stop the worker settling jobs
                logger.exception("event hook %r failed on a %s event", hook, event)
    if enabled:
        _log(level, message, args, exc_info, fields)
    return record


_BLANK: dict[str, Any] = dict.fromkeys(FIELDS)


def _log(level: int, message: str, args: tuple[object, ...], exc_info: Any, extra: dict[str, Any]) -> None:
    """``logger.log`` without its stack walk: the caller it would find is always :func:`emit`.

    Once per job transition, the walk was the costliest step after the handler's own
    write; the record is the same (path, line and function name included). With the
    stdlib's own ``makeRecord`` and record factory, the fields go onto the record in one
    ``update``: ``makeRecord`` checks each for a clash, and none of :data:`FIELDS` can
    clash with a ``LogRecord`` attribute (checked once below). That check was half the
    cost of making the record.
    """
    if exc_info:
        if isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        elif not isinstance(exc_info, tuple):
            exc_info = sys.exc_info()
    if type(logger).makeRecord is _MAKE_RECORD and logging.getLogRecordFactory() is logging.LogRecord:
        record = logging.LogRecord(logger.name, level, _EMIT_FILE, _EMIT_LINE, message, args, exc_info, "emit")
        record.__dict__.update(extra)
    else:  # a custom Logger class or record factory: its own makeRecord, clash checks and all
        record = logger.makeRecord(logger.name, level, _EMIT_FILE, _EMIT_LINE, message, args, exc_info, "emit", extra)
    logger.handle(record)


_MAKE_RECORD = logging.Logger.makeRecord
_RECORD_NAMES = {*vars(logging.LogRecord("-", logging.INFO, "-", 0, "", (), None)), "message", "asctime"}
_CLASHES = _RECORD_NAMES & set(FIELDS)
if _CLASHES:  # pragma: no cover - a future LogRecord attribute named like a field
    raise RuntimeError(f"event fields {sorted(_CLASHES)} clash with LogRecord attributes")


_EMIT_FILE = emit.__code__.co_filename
_EMIT_LINE = emit.__code__.co_firstlineno
