"""Running handlers: runner threads for sync handlers, one event loop for async ones.

The event loop is the worker's own (a thread started on first use) or, for
:class:`jobcore.AsyncWorker`, the application's running loop (:meth:`Runners.use_loop`):
async handlers then run as tasks on it, and the worker never stops or closes it.

A handler runs through :mod:`jobcore.worker._execution` (as in :mod:`jobcore.testing`);
its outcome is queued for the settler, unless the attempt was called off meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as queue_mod
import threading
import time
from typing import TYPE_CHECKING

from jobcore.worker._attempt import Attempt, AttemptStatus
from jobcore.worker._execution import SHUTDOWN_SIGNALS, Outcome, handler_error, run_async, run_sync

if TYPE_CHECKING:
    from jobcore.worker import Worker

S = AttemptStatus


class Runners:
    """The threads and the event loop that run one worker's handlers."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self._runq: queue_mod.SimpleQueue[Attempt | None] = queue_mod.SimpleQueue()
        self._idle = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._own_loop = True
        self._tasks: set[asyncio.Task[None]] = set()  # the async handlers' tasks (touched on the loop only)
        self.run_time: float | None = None  # seconds per handler run (moving average)

    def dispatch(self, attempts: list[Attempt]) -> None:
        """Hand sync attempts to idle runner threads, starting a runner for each when none is idle.

        Runners are reused: starting a thread per job cost more than a short handler. A
        runner still inside a called-off handler is not idle, so it never delays the next job.
        The idle runners are reserved in one locked step for the whole batch.
        """
        if not attempts:
            return
        with self._w._attempts.lock:
            reuse = min(self._idle, len(attempts))
            self._idle -= reuse  # reserved: exactly one idle runner takes each put
        put = self._runq.put
        for attempt in attempts[:reuse]:
            put(attempt)
        for attempt in attempts[reuse:]:
            name = f"jobcore-runner-{self._w.worker_id}"
            threading.Thread(target=self._runner, args=(attempt,), name=name, daemon=True).start()

    def use_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run async handlers as tasks on ``loop`` (an application's, running) instead of a loop of our own.

        Called before the worker starts. The worker never stops or closes that loop; the
        handler tasks still running when it ends are cancelled (see :meth:`stop_loop`).
        """
        with self._w._attempts.lock:
            if self._loop is not None:
                raise RuntimeError("the worker's event loop was already chosen")
            self._loop, self._own_loop = loop, False

    def schedule(self, attempts: list[Attempt]) -> None:
        """Run async attempts on the worker's event loop (started on first use).

        One hand-off to the loop for the whole batch: on an application's loop, each
        wake-up of it is time taken from the application.
        """
        if attempts:
            self._ensure_loop().call_soon_threadsafe(self._spawn, attempts)

    def _spawn(self, attempts: list[Attempt]) -> None:
        """On the loop: a task per attempt, kept until it ends (the loop holds tasks weakly)."""
        tasks = self._tasks
        for attempt in attempts:
            task = asyncio.ensure_future(self._run_async(attempt))
            attempt.task = task
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def _runner(self, attempt: Attempt | None) -> None:
        while attempt is not None:
            self._run_sync(attempt)
            attempt = self._w._claiming.next_inline()
            if attempt is not None:  # the next backlog job runs on this thread: no hand-off
                continue
            with self._w._attempts.lock:
                if self._closed:
                    return
                self._idle += 1
            attempt = self._runq.get()

    def close(self) -> None:
        """Let idle runner threads end, and the rest once their handler returns."""
        with self._w._attempts.lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._runq.put(None)

    def _run_sync(self, attempt: Attempt) -> None:
        assert attempt.handle is not None
        span = attempt.span
        if span is None:
            self._finished(attempt, run_sync(attempt.handle, attempt.job, attempt.ctx))
            return
        with span.activate():  # tracing on: the handler's own spans are the attempt's children
            outcome = run_sync(attempt.handle, attempt.job, attempt.ctx)
        self._finished(attempt, outcome)

    async def _run_async(self, attempt: Attempt) -> None:
        assert attempt.handle is not None
        if attempt.status is not S.RUNNING:  # called off before it got to start
            return
        span = attempt.span
        if span is None:
            self._finished(attempt, await run_async(attempt.handle, attempt.job, attempt.ctx))
            return
        with span.activate():
            outcome = await run_async(attempt.handle, attempt.job, attempt.ctx)
        self._finished(attempt, outcome)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._w._attempts.lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._loop_main, args=(loop,), name=f"jobcore-async-{self._w.worker_id}", daemon=True
                )
                self._loop, self._loop_thread = loop, thread
                thread.start()
            return self._loop

    @staticmethod
    def _loop_main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def stop_loop(self) -> None:
        """Stop the event loop (its tasks are cancelled) and wait for its thread a while.

        A borrowed loop (:meth:`use_loop`) goes on: only the handler tasks still running on
        it (called off already: abandoned or killed) are cancelled.
        """
        if not self._own_loop:
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the application's loop already closed
                    self._loop.call_soon_threadsafe(self._cancel_tasks)
            return
        loop, loop_thread = self._loop, self._loop_thread
        if loop is not None and loop_thread is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            loop_thread.join(5.0)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _finished(self, attempt: Attempt, outcome: Outcome) -> None:
        """A handler returned or raised: queue its settle, unless the attempt was called off."""
        w = self._w
        book = w._attempts
        with book.lock:
            if not book.move(attempt, S.FINISHING, only_from=(S.RUNNING,)):
                attempt.log.info(
                    "job %s (%s) handler ended after the attempt was %s; its outcome is not recorded",
                    attempt.job.id, attempt.job.name, attempt.status.value,
                )
                return
            ran = time.monotonic() - attempt.started_at
            self.run_time = ran if self.run_time is None else self.run_time + (ran - self.run_time) / 8
        if not w._wake.is_set():  # once per job: Event.set takes a lock even when set
            w._wake.set()
        raised = outcome.raised
        if raised is None:
            w._settling.ack(attempt, outcome.result)
            return
        span = attempt.span
        if span is not None:
            span.record(raised)
        job = attempt.job
        if isinstance(raised, SHUTDOWN_SIGNALS):
            attempt.log.warning("job %s (%s) raised %s: stopping the worker", job.id, job.name, type(raised).__name__)
            # The give-back is queued once the claim loop has ended (in the worker's shutdown):
            # landed earlier, a claim already in flight could hand this worker the job again.
            with book.lock:
                w._given_back_at_stop.append((attempt, handler_error(raised)))
            w.request_stop()
            return
        options = w._retry_options(attempt.handle, job, raised)
        final = "fail" in options or job.attempt >= job.max_attempts
        trace = (type(raised), raised, raised.__traceback__)
        error = handler_error(raised)  # readable whatever the exception's __str__ does (W07)
        text = _one_line(f"{type(error).__name__}: {error}")
        if final:
            attempt.log.error(
                "job %s (%s) attempt %d of %d failed, no retry left: %s", job.id, job.name, job.attempt,
                job.max_attempts, text, exc_info=trace if w.tracebacks != "never" else None,
            )
        else:
            attempt.log.warning(
                "job %s (%s) attempt %d of %d failed, will retry: %s", job.id, job.name, job.attempt,
                job.max_attempts, text, exc_info=trace if w.tracebacks == "always" else None,
            )
        w._settling.nack(attempt, error, options)

    def call_off(self, attempt: Attempt, reason: str, *, timed_out: bool = False) -> None:
        """Tell the handler to stop (its context's cancel; an async one's task is cancelled too)."""
        attempt.ctx.cancel(reason, timed_out=timed_out)
        task, loop = attempt.task, self._loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)


def _one_line(text: str, limit: int = 300) -> str:
    """``text``'s first line, at most ``limit`` characters: a log line stays one line."""
    lines = text.splitlines() or [""]
    first = lines[0]
    if len(first) > limit or len(lines) > 1:
        return first[:limit] + " ..."
    return first
