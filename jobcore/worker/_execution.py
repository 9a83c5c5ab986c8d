"""Running one attempt's handler and turning its outcome into a settle.

The worker and :mod:`jobcore.testing` both run attempts through these functions: the
handler lookup, the call (with ``ctx=`` when it asks), what is recorded for whatever it
raised (W07), and the ``nack`` options of a failure (retries, terminal types, S04, W05).
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import datetime, timezone
from typing import Any, NamedTuple

from jobcore import validate as v
from jobcore.backoff import DEFAULT_BACKOFF
from jobcore.clock import to_millis
from jobcore.errors import JobNotRegistered, PayloadInvalid
from jobcore.records import Job
from jobcore.registry import JobContext, JobHandle, Registry

logger = logging.getLogger("jobcore.worker")

SHUTDOWN_SIGNALS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)
"""Raised by a handler, these stop the worker and give the attempt back instead of failing it."""

_error_types: dict[str, type[Exception]] = {}
_error_types_lock = threading.Lock()


def error_type(name: str) -> type[Exception]:
    """An exception class carrying ``name``, so a rewritten message keeps its type name."""
    with _error_types_lock:
        cls = _error_types.get(name)
        if cls is None:
            cls = type(name if name.isidentifier() else "HandlerError", (Exception,), {})
            _error_types[name] = cls
        return cls


def handler_error(raised: object) -> Exception:
    """What to record for whatever a handler raised or produced (W07).

    The answer carries the original type name and a readable message that every driver
    stores: NUL characters and unpaired surrogates removed, cut to
    :data:`~jobcore.validate.MAX_ERROR_TEXT_BYTES`. An exception with an empty text
    is described by its ``repr``; a non-exception value by its type and ``repr``.
    """
    if isinstance(raised, BaseException):
        type_name, message = v.exception_text(raised)
        if not message:
            try:
                message = repr(raised)
            except Exception:
                message = type_name
    else:
        type_name = "NonExceptionRaised"
        try:
            message = f"handler produced a {type(raised).__name__}, not an exception: {raised!r}"
        except Exception:
            message = f"handler produced a {type(raised).__name__}, not an exception"
    message = message.replace("\x00", "")
    data = message.encode("utf-8", "replace")  # unpaired surrogates become '?'
    limit = v.MAX_ERROR_TEXT_BYTES
    if len(data) > limit:
        marker = b" ... [truncated]"
        data = data[: limit - len(marker)] + marker
    text = data.decode("utf-8", "ignore")
    return error_type(type_name)(text)


def retry_policy(
    handle: JobHandle | None, job: Job, raised: BaseException, now: datetime, rng: random.Random | None = None
) -> dict[str, Any]:
    """``nack`` keyword arguments for an attempt of ``job`` that raised ``raised``.

    Terminal types fail at once (S04, W05); otherwise the job retries after the
    handle's backoff (the driver dead-letters or drops it when attempts ran out).
    """
    if handle is None:
        return {"retry_at": to_millis(now + DEFAULT_BACKOFF.delay(job.attempt, rng))}
    if (handle.terminal and isinstance(raised, handle.terminal)) or (
        handle.payload_model is not None and isinstance(raised, PayloadInvalid)
    ):  # a stored payload that does not make the declared model can never succeed
        return {"fail": True, "dead_letter": handle.dead_letter}
    return {"retry_at": to_millis(now + handle.backoff.delay(job.attempt, rng)), "dead_letter": handle.dead_letter}


def retry_options(
    now: datetime | None, handle: JobHandle | None, job: Job, raised: BaseException, rng: random.Random | None = None
) -> dict[str, Any]:
    """``nack`` options for a failed attempt, its retry time on the store's clock (F01).

    ``now`` is the store's time; when it could not be had (None), the retry is due at
    once (the store's now)."""
    if now is None:
        options = retry_policy(handle, job, raised, datetime.now(timezone.utc), rng)
        options.pop("retry_at", None)
        return options
    return retry_policy(handle, job, raised, now, rng)


def call_handler(handle: JobHandle, job: Job, ctx: JobContext) -> Any:
    """Call the handler with the payload (and ``ctx=`` when it asks); a coroutine for async ones."""
    payload = job.payload if handle.payload_model is None else handle.handler_payload(job.payload)
    if handle.wants_ctx:
        return handle.fn(payload, ctx=ctx)
    return handle.fn(payload)


def find_handler(
    registry: Registry, job: Job, log: logging.LoggerAdapter[Any]
) -> tuple[JobHandle, None] | tuple[None, JobNotRegistered]:
    """The handler of ``job`` (and None), or None and the refusal when none is registered (logged)."""
    try:
        return registry.get(job.name), None
    except JobNotRegistered as exc:
        log.error("job %s: %s", job.id, exc.cause)  # noqa: TRY400 - the traceback says nothing more
        return None, exc


class Outcome(NamedTuple):
    """What a handler did: returned ``result`` (``raised`` None) or raised ``raised``."""

    result: Any
    raised: BaseException | None


def run_sync(handle: JobHandle, job: Job, ctx: JobContext) -> Outcome:
    """Run a sync handler; whatever it raises is the attempt's outcome (W07)."""
    try:
        result = call_handler(handle, job, ctx)
    except BaseException as exc:  # W07: whatever the handler raised is the attempt's error
        return Outcome(None, exc)
    return Outcome(result, None)


async def run_async(handle: JobHandle, job: Job, ctx: JobContext) -> Outcome:
    """Run an async handler; whatever it raises is the attempt's outcome (W07)."""
    try:
        result = await call_handler(handle, job, ctx)
    except BaseException as exc:  # W07, including a CancelledError the handler raised itself
        return Outcome(None, exc)
    return Outcome(result, None)


def unstorable(result: Any) -> PayloadInvalid | None:
    """Why a handler's result cannot be stored (W07: it fails the attempt readably), or None."""
    if result is None:  # None is always storable
        return None
    try:
        v.encode_json(result, "result")
    except PayloadInvalid as exc:
        return exc
    return None
