"""The worker inside an application's event loop: :class:`AsyncWorker`.

The engine is the :class:`~jobcore.worker.Worker` itself (every W and F rule is kept by
its code): its claim loop, keeper, beater and settler run on threads of their own as
ever. What changes is where the two things that touch the application happen:

* **store I/O**: an async driver is driven through a :class:`~jobcore._bridge.SyncBridge`
  on the application's loop, so every store call is the async driver's, awaited on that
  loop, while an engine thread waits for its answer (a sync driver is used as it is);
* **async handlers** run as tasks on the application's loop (sync handlers still run on
  runner threads, so they never block it).

Nothing in the engine waits on the loop from the loop's own thread: starting and
stopping hand the blocking parts to a helper thread and await their end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from jobcore.current import get_async_job_driver, get_job_driver
from jobcore.errors import ConfigurationError, NoDriver
from jobcore.registry import Registry
from jobcore.worker import Worker

__all__ = ["AsyncWorker"]

T = TypeVar("T")


def _is_async_driver(driver: Any) -> bool:
    """An async driver's verbs are coroutine functions (``AsyncFrontDoor`` and its kin)."""
    return inspect.iscoroutinefunction(getattr(driver, "claim", None))


def _default_driver() -> Any:
    """The process-wide async driver when one was set, else the process-wide sync one."""
    try:
        return get_async_job_driver()
    except NoDriver:
        return get_job_driver()  # JC_NO_DRIVER when neither was set


class AsyncWorker:
    """A :class:`~jobcore.worker.Worker` running inside the application's event loop.

    Build it inside the running loop (a FastAPI/Starlette lifespan, an ``async def main``,
    an anyio task group), then either::

        async with AsyncWorker(["emails"], driver=driver, concurrency=8):
            ...                                  # the application runs; the worker too

    or ``await worker.start()`` ... ``await worker.stop()``, or ``await worker.run()``,
    which runs until its task is cancelled (then stops cleanly, as ``stop`` does).

    Async handlers run as tasks on this loop (they may use the application's clients and
    pools); sync handlers run on threads, so they never block it. With an async driver
    (``AsyncPostgresDriver``, ``AsyncMongoDriver``, ``AsyncMemoryDriver``) every store call
    is awaited on this loop; a sync driver is called from the worker's threads as the
    :class:`Worker` does. Leases, heartbeats, retries, draining and giving back work
    exactly as they do there: the engine *is* a :class:`Worker` (:attr:`engine`).

    Args:
        queues: Queue names (a list, or one comma-separated string).
        driver: An async or a sync driver (default: the process-wide async driver when
            one was set with ``set_async_job_driver``, else the sync one; read here).
        registry: Where handlers are looked up (default: ``@job``'s default registry).
        concurrency: Handlers running at once.
        **options: Every other keyword of :class:`~jobcore.worker.Worker` (``lease``,
            ``drain_timeout``, ``on_settled``, ``scheduler``, ...).

    Raises:
        ConfigurationError: ``JC_CONFIGURATION`` when built with no event loop running in
            this thread.
    """

    def __init__(
        self,
        queues: Sequence[str] | str,
        *,
        driver: Any = None,
        registry: Registry | None = None,
        concurrency: int = 4,
        **options: Any,
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigurationError(
                "an AsyncWorker was built with no event loop running in this thread",
                "build it inside the application's event loop (a lifespan, an async def, an anyio task group); "
                "outside one, use jobcore.Worker",
            ) from None
        self.loop = loop
        """The application's event loop: async handlers run on it, and so does the store I/O of an async driver."""
        if driver is None:
            driver = _default_driver()
        self.driver = driver
        """The driver given (async or sync)."""
        self._bridge: Any = None
        if _is_async_driver(driver):
            from jobcore._bridge import SyncBridge  # noqa: PLC0415 - only async drivers need it

            self._bridge = SyncBridge(driver, loop=loop)
        engine_driver = self._bridge if self._bridge is not None else driver
        self.engine = Worker(queues, driver=engine_driver, registry=registry, concurrency=concurrency, **options)
        """The :class:`~jobcore.worker.Worker` doing the work (counts, in_flight, progress...)."""
        self.engine._running.use_loop(loop)
        self._ended: asyncio.Future[None] | None = None
        self._stopped: bool | None = None

    # -- what the engine tells -----------------------------------------------------------

    @property
    def worker_id(self) -> str:
        """This worker's id in claims."""
        return self.engine.worker_id

    @property
    def counts(self) -> Counter[str]:
        """The engine's running totals (claimed, completed, retried, failed, ...)."""
        return self.engine.counts

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return self.engine.in_flight

    def progress(self) -> dict[str, float | None]:
        """Latest progress each running handler reported, by job id."""
        return self.engine.progress()

    @property
    def running(self) -> bool:
        """Started, and its claim loop has not ended yet."""
        return self._ended is not None and not self._ended.done()

    # -- control ---------------------------------------------------------------------------

    async def start(self) -> AsyncWorker:
        """Start claiming and running jobs; answers itself at once. Stop it with :meth:`stop`.

        The engine's claim loop runs on a thread of its own; a failure to start (an
        outdated schema, no queues) ends it, and :meth:`run` or :meth:`stop` raise it.
        """
        self._check_loop()
        if self._ended is not None:
            raise RuntimeError("this worker was already started; make a new one")
        self._ended = self.loop.create_future()
        self._ended.add_done_callback(_mark_retrieved)
        # The application (uvicorn...) owns the process's signals: the engine installs none.
        run = functools.partial(self.engine.run, stop_signals=False)
        _in_thread(self.loop, self._ended, run, f"jobcore-aworker-{self.worker_id}")
        return self

    async def run(self) -> None:
        """Run until the task running this is cancelled (or the worker is stopped), then stop.

        Fits an anyio task group (``tg.start_soon(worker.run)``) or an ``asyncio`` task:
        cancelling it stops the worker as :meth:`stop` does (claims nothing more, drains
        in-flight handlers within ``drain_timeout``, gives prefetched jobs back) before the
        cancellation goes on. A failure that ended the worker is raised.
        """
        if self._ended is None:
            await self.start()
        ended = self._ended
        assert ended is not None
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            await _uncancellable(self.stop())
            raise

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop claiming, let in-flight handlers finish within ``timeout`` (default the
        ``drain_timeout``), abandon the rest, and wait for the worker to end (W04).

        Never blocks the event loop: the engine's blocking stop runs on a helper thread
        while this awaits it, so async handlers keep running on the loop and drain.
        Answers ``True`` when nothing had to be abandoned. A failure that ended the worker
        earlier (an outdated schema...) is raised here.
        """
        self._check_loop()
        if self._ended is None:  # never started
            return True
        if self._stopped is None:
            done: asyncio.Future[bool] = self.loop.create_future()
            _in_thread(self.loop, done, lambda: self.engine.stop(timeout), f"jobcore-aworker-stop-{self.worker_id}")
            self._stopped = await done
        if self.engine.wait(0):  # it ended: its thread posts that (or its failure) right after
            await asyncio.shield(self._ended)  # raises the failure that ended it, if one did
        return self._stopped

    def request_stop(self, drain_timeout: float | None = None) -> None:
        """Ask the worker to stop and drain; returns at once (see :meth:`Worker.request_stop`)."""
        self.engine.request_stop(drain_timeout)

    async def wait(self) -> None:
        """Wait until the worker has ended (after :meth:`request_stop`, a shutdown signal, a failure)."""
        if self._ended is None:
            raise RuntimeError("this worker was not started")
        await asyncio.shield(self._ended)

    async def __aenter__(self) -> AsyncWorker:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await _uncancellable(self.stop())

    def _check_loop(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self.loop:
            raise ConfigurationError(
                "an AsyncWorker was started or stopped outside the event loop it was built in",
                "await start() and stop() in the application's event loop that built the worker",
            )


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    """A failure that ended the worker was logged by it: no "exception never retrieved" on top."""
    if not future.cancelled():
        future.exception()


def _in_thread(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[T], call: Callable[[], T], name: str
) -> None:
    """Run the blocking ``call`` on a daemon thread; its answer (or exception) lands on ``future``.

    A daemon thread of its own rather than the loop's default executor: a worker's
    claim loop lives as long as the worker, and a stop may wait for a drain.
    """

    def settle(answer: T | None, failure: BaseException | None) -> None:
        if future.done():
            return
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(answer)  # type: ignore[arg-type]

    def main() -> None:
        answer: T | None = None
        failure: BaseException | None = None
        try:
            answer = call()
        except BaseException as exc:  # handed to the awaiting coroutine
            failure = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(settle, answer, failure)

    threading.Thread(target=main, name=name, daemon=True).start()


async def _uncancellable(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` to its end even if this task is cancelled meanwhile (once, or again and
    again as an anyio cancel scope does); a cancellation is raised again once it ended."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    with _anyio_shield():
        while True:
            try:
                answer = await asyncio.shield(task)
                break
            except asyncio.CancelledError:
                if task.done():
                    raise
                cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return answer


@contextlib.contextmanager
def _anyio_shield() -> Iterator[None]:
    """An anyio shielded cancel scope when anyio is loaded (it re-delivers a scope's
    cancellation on every await: shielded, the stop's awaits sleep instead of spinning)."""
    import sys  # noqa: PLC0415

    anyio = sys.modules.get("anyio")
    if anyio is None:
        yield
        return
    try:
        scope = anyio.CancelScope(shield=True)
        scope.__enter__()
    except Exception:  # no anyio-compatible task here
        yield
        return
    try:
        yield
    finally:
        scope.__exit__(None, None, None)
