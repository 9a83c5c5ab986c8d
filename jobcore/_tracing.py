"""The seam tracing plugs into: one module attribute the door and the worker read.

jobcore never imports a tracing library itself. :mod:`jobcore.contrib.otel`'s
``instrument()`` sets :data:`hook` to an object with the two methods of :class:`Tracing`;
while it is ``None`` (the default, and after ``uninstrument()``), enqueue and the worker
pay one attribute read and a comparison each, and store nothing more: an untraced job's
``trace_context`` is ``None`` (a NULL column, no document field).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from jobcore.records import Job, Schedule
from jobcore.validate import StoreTimedJob

__all__ = ["AttemptSpan", "EnqueueSpan", "Tracing", "hook"]


class EnqueueSpan(Protocol):
    """An enqueue's span while the insert runs (a context manager: it ends on exit, an
    exception recorded on it)."""

    jobs: Sequence[StoreTimedJob]
    """The jobs to insert, each carrying the span's propagation fields in ``trace_context``."""

    def inserted(self, answers: Sequence[Job]) -> None:
        """The store answered: the ids (and duplicates) go on the span."""

    def fired(self, schedule: str, answer: Schedule | None) -> None:
        """A schedule's firing answered (``None``: another firer won, nothing was enqueued)."""


class AttemptSpan(Protocol):
    """One attempt's span, from its start in a worker to its settle (or loss)."""

    def activate(self) -> AbstractContextManager[Any]:
        """The span made current while the handler runs (its own spans become children)."""

    def record(self, error: BaseException) -> None:
        """What the handler raised (or the timeout that stopped it)."""

    def end(self, outcome: str) -> None:
        """The attempt's ending (the worker's outcome names); ends the span."""


class Tracing(Protocol):
    """What :data:`hook` holds while tracing is on."""

    def enqueue(self, jobs: Sequence[StoreTimedJob]) -> AbstractContextManager[EnqueueSpan]:
        """A span around one ``enqueue`` (one job) or ``enqueue_many`` (the batch)."""

    def attempt(self, job: Job) -> AttemptSpan:
        """A started span for an attempt of ``job`` (running), linked to its ``trace_context``."""


hook: Tracing | None = None
"""The tracing in use, or ``None`` (off). Set by :func:`jobcore.contrib.otel.instrument`."""
