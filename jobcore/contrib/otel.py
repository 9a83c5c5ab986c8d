"""OpenTelemetry tracing for jobcore (the optional ``jobcore-queue[otel]`` extra).

Call :func:`instrument` once per process (the one enqueueing and the one running workers);
from then on:

* every ``enqueue``, ``enqueue_many`` (one span for the batch) and schedule firing runs in
  a ``PRODUCER`` span named ``jobcore enqueue <job name>``, current while the store is
  written, whose W3C context (``traceparent``, ``tracestate``, baggage: whatever the
  global propagator writes) is stored with each job (``Job.trace_context``);
* every attempt a :class:`~jobcore.Worker` (or :class:`~jobcore.AsyncWorker`) runs is a
  ``CONSUMER`` span named ``jobcore process <job name>``, current while the handler runs
  (so the handler's own spans are its children), from the attempt's start to its settle.
  It is a child of the stored enqueue context and carries a span link to it too (the
  messaging conventions' link to the creation context); with ``link_only=True`` it
  starts a trace of its own and only links. Whatever the handler raised (or its timeout)
  is recorded on it with ``record_exception`` and its status is ``ERROR``.

Attributes follow the OpenTelemetry messaging conventions where they fit
(``messaging.system`` = ``jobcore``, ``messaging.destination.name`` = the queue,
``messaging.message.id`` = the job id, ``messaging.operation.type``) plus ``jobcore.job.id``,
``jobcore.job.name``, ``jobcore.job.queue``, ``jobcore.job.attempt`` and, on an attempt,
``jobcore.outcome`` (see :data:`OUTCOMES`). The table is in docs/howto/opentelemetry.md.

jobcore imports ``opentelemetry`` only here; without :func:`instrument` nothing of this
runs and nothing more is stored (an untraced job's ``trace_context`` is ``None``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import attrs

from jobcore import _tracing
from jobcore.errors import ConfigurationError
from jobcore.records import Job, Schedule
from jobcore.validate import StoreTimedJob

__all__ = ["OUTCOMES", "SYSTEM", "TRACER_NAME", "instrument", "is_instrumented", "uninstrument"]

SYSTEM = "jobcore"
"""``messaging.system`` on every span."""

TRACER_NAME = "jobcore"
"""The instrumentation scope's name (``tracer_provider.get_tracer(TRACER_NAME, version)``)."""

OUTCOMES = (
    "completed", "retry", "released", "failed", "dead_lettered", "dropped", "called_off", "not_landed",
    "abandoned", "settle_abandoned",
)
"""Values of ``jobcore.outcome`` on an attempt's span: the worker's event outcomes
(:mod:`jobcore.events`) for a settle that landed (``completed``, ``retry``, ``released``,
``failed``, ``dead_lettered``, ``dropped``), a lost lease (``called_off``: cancelled,
reclaimed or removed while running; ``not_landed``: the settle found the lease gone), and
an attempt the worker let go (``abandoned`` at shutdown or kill, ``settle_abandoned``
when its settle could not be sent)."""

_lock = threading.Lock()


def _otel() -> tuple[Any, Any, Any]:
    """``(opentelemetry.trace, opentelemetry.propagate, opentelemetry.context)``, or a coded error."""
    try:
        from opentelemetry import context, propagate, trace  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ConfigurationError(
            "tracing needs the opentelemetry-api package, which is not installed",
            "pip install 'jobcore-queue[otel]' (and an SDK, e.g. opentelemetry-sdk, to export spans)",
        ) from exc
    return trace, propagate, context


def instrument(tracer_provider: Any = None, *, link_only: bool = False) -> None:
    """Trace enqueues and attempts from now on (this process, every driver); idempotent.

    Args:
        tracer_provider: The ``TracerProvider`` spans come from; default: the global one
            (``opentelemetry.trace.set_tracer_provider``).
        link_only: Start each attempt's span in a trace of its own, linked to the enqueue's
            (default: a child of the enqueue's span, and linked to it).

    Raises:
        ConfigurationError: ``opentelemetry-api`` is not installed (``JC_CONFIGURATION``).
    """
    trace, propagate, context = _otel()
    from jobcore import __version__  # noqa: PLC0415 - the package imports this module's users, not it

    tracer = trace.get_tracer(TRACER_NAME, __version__, tracer_provider=tracer_provider)
    with _lock:
        _tracing.hook = _OtelTracing(tracer, trace, propagate, context, link_only=bool(link_only))


def uninstrument() -> None:
    """Stop tracing (spans already started still end); jobs enqueued from now on carry no context."""
    with _lock:
        _tracing.hook = None


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return isinstance(_tracing.hook, _OtelTracing)


class _OtelTracing:
    """The :class:`jobcore._tracing.Tracing` :func:`instrument` installs."""

    def __init__(self, tracer: Any, trace: Any, propagate: Any, context: Any, *, link_only: bool) -> None:
        self.tracer, self.trace, self.propagate, self.context = tracer, trace, propagate, context
        self.link_only = link_only

    def enqueue(self, jobs: Sequence[StoreTimedJob]) -> _EnqueueSpan:
        return _EnqueueSpan(self, jobs)

    def attempt(self, job: Job) -> _AttemptSpan:
        trace = self.trace
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "process",
            "messaging.destination.name": job.queue, "messaging.message.id": job.id,
            "jobcore.job.id": job.id, "jobcore.job.name": job.name, "jobcore.job.queue": job.queue,
            "jobcore.job.attempt": job.attempt, "jobcore.job.max_attempts": job.max_attempts,
        }
        parent = None
        links = []
        if job.trace_context:
            stored = self.propagate.extract(job.trace_context)
            origin = trace.get_current_span(stored).get_span_context()
            if origin.is_valid:
                links.append(trace.Link(origin, {"jobcore.link": "enqueue"}))
                if not self.link_only:
                    parent = stored
        if parent is None:  # a trace of its own, whatever is current in the worker's thread
            parent = self.context.Context()
        span = self.tracer.start_span(
            f"jobcore process {job.name}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes,
            links=links,
        )
        return _AttemptSpan(self, span)


class _EnqueueSpan:
    """One enqueue's ``PRODUCER`` span, current while the store is written (a context manager)."""

    def __init__(self, owner: _OtelTracing, jobs: Sequence[StoreTimedJob]) -> None:
        self._o = owner
        self.jobs: Sequence[StoreTimedJob] = jobs
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> _EnqueueSpan:
        o, jobs = self._o, self.jobs
        first = jobs[0]
        names = {j.name for j in jobs}
        queues = {j.queue for j in jobs}
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        }
        if len(queues) == 1:
            attributes["messaging.destination.name"] = attributes["jobcore.job.queue"] = first.queue
        if len(names) == 1:
            attributes["jobcore.job.name"] = first.name
        if len(jobs) > 1:
            attributes["messaging.batch.message_count"] = len(jobs)
        else:
            attributes["jobcore.job.attempt"] = 0
        name = f"jobcore enqueue {first.name}" if len(names) == 1 else "jobcore enqueue"
        span = o.tracer.start_span(name, kind=o.trace.SpanKind.PRODUCER, attributes=attributes)
        self._span = span
        self._token = o.context.attach(o.trace.set_span_in_context(span))
        carrier: dict[str, str] = {}
        o.propagate.inject(carrier)
        if carrier:
            self.jobs = [attrs.evolve(j, trace_context=dict(carrier)) for j in jobs]
        return self

    def inserted(self, answers: Sequence[Job]) -> None:
        span = self._span
        if len(answers) == 1:
            job = answers[0]
            span.set_attribute("messaging.message.id", job.id)
            span.set_attribute("jobcore.job.id", job.id)
            if job.duplicate:  # E02: nothing inserted; the holder's attempts link to its own enqueue
                span.set_attribute("jobcore.job.duplicate", True)
        else:
            span.set_attribute("jobcore.job.ids", [job.id for job in answers])
            span.set_attribute("jobcore.job.duplicates", sum(job.duplicate for job in answers))

    def fired(self, schedule: str, answer: Schedule | None) -> None:
        span = self._span
        span.set_attribute("jobcore.schedule.name", schedule)
        if answer is None:  # another firer won the compare-and-set: nothing was enqueued
            span.set_attribute("jobcore.schedule.fired", False)
        elif answer.last_job_id is not None:
            span.set_attribute("jobcore.schedule.fired", True)
            span.set_attribute("messaging.message.id", answer.last_job_id)
            span.set_attribute("jobcore.job.id", answer.last_job_id)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        o, span = self._o, self._span
        o.context.detach(self._token)
        if exc is not None:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(o.trace.Status(o.trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


class _AttemptSpan:
    """One attempt's ``CONSUMER`` span (see :class:`jobcore._tracing.AttemptSpan`)."""

    __slots__ = ("_o", "_span")

    def __init__(self, owner: _OtelTracing, span: Any) -> None:
        self._o, self._span = owner, span

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        o = self._o
        token = o.context.attach(o.trace.set_span_in_context(self._span))
        try:
            yield
        finally:
            o.context.detach(token)

    def record(self, error: BaseException) -> None:
        o, span = self._o, self._span
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(o.trace.Status(o.trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def end(self, outcome: str) -> None:
        span = self._span
        span.set_attribute("jobcore.outcome", outcome)
        span.end()
