"""The sync verbs over an async driver: :class:`SyncBridge`.

Code written against the sync :class:`~jobcore.driver.JobDriver` (the worker engine, the
parity scenarios) can drive an async driver through a bridge: each verb submits the async
verb to an event loop and waits for its answer in the calling thread. The loop is one
the caller names (the application's, for :class:`~jobcore.AsyncWorker`) or the bridge's
own, on a thread it starts. The store I/O is the async driver's; only the caller's thread
waits, never the loop.

A bridge must never be called from its loop's own thread (that would wait on itself):
such a call is refused with ``JC_OPTION_INVALID`` instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Final, TypeVar

from jobcore.errors import BackendUnavailable, OptionInvalid

__all__ = ["SyncBridge", "bridged_factory"]

T = TypeVar("T")

_DOORS: Final = ("introspect", "leases", "schedules")


class _Loop:
    """An event loop running on a daemon thread of its own until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.stopped = False
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _main(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(asyncio.sleep(0))  # calls submitted before the stop become tasks
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=5.0))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)


class _Waiter:
    """Runs coroutines on a loop and waits for them in the calling thread."""

    __slots__ = ("loop", "owner")

    def __init__(self, loop: asyncio.AbstractEventLoop, owner: _Loop | None = None) -> None:
        self.loop = loop
        self.owner = owner

    def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise OptionInvalid(
                "a sync call through the bridge was made on the bridge's own event loop, which would wait on itself",
                "await the async driver's verb there instead of calling the sync one",
            )
        if (self.owner is not None and self.owner.stopped) or self.loop.is_closed():
            coro.close()
            raise BackendUnavailable(
                "the async driver behind this bridge was closed", "open a new driver; a closed one takes no calls"
            )
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed between the check and the submit
            coro.close()
            raise BackendUnavailable(
                "the async driver behind this bridge was closed", "open a new driver; a closed one takes no calls"
            ) from None
        return future.result()

    def sync(self, method: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> T:
            return self.wait(method(*args, **kwargs))

        return call


class _Proxy:
    """Sync access to an object with async methods (a driver's door): each coroutine
    function is waited for; everything else passes through."""

    def __init__(self, target: Any, waiter: _Waiter) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_waiter", waiter)
        object.__setattr__(self, "_cache", {})

    def __getattr__(self, name: str) -> Any:
        cache: dict[str, Any] = self._cache
        if name in cache:
            return cache[name]
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            value = cache[name] = self._waiter.sync(value)
        elif name in _DOORS:
            value = cache[name] = _Proxy(value, self._waiter)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return f"SyncBridge({self._target!r})"


class SyncBridge(_Proxy):
    """The sync :class:`~jobcore.driver.JobDriver` verbs over an async driver.

    Args:
        driver: An async driver (``AsyncPostgresDriver``, ``AsyncMongoDriver``,
            ``AsyncMemoryDriver``, or any :class:`~jobcore.door.AsyncFrontDoor`).
        loop: The event loop the driver's coroutines run on (the application's). The
            bridge must then be called from other threads only. Without it the bridge
            runs its own loop on a thread, stopped by :meth:`close`.
    """

    def __init__(self, driver: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        own = _Loop(f"jobcore-bridge-{id(self):x}") if loop is None else None
        waiter = _Waiter(own.loop, own) if own is not None else _Waiter(loop)  # type: ignore[arg-type]
        super().__init__(driver, waiter)
        object.__setattr__(self, "_own", own)

    @property
    def driver(self) -> Any:
        """The async driver bridged."""
        return self._target

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the async verbs run on."""
        loop: asyncio.AbstractEventLoop = self._waiter.loop
        return loop

    def close(self) -> None:
        """Close the async driver (on its loop), then stop the bridge's own loop, if it has one."""
        try:
            self._waiter.wait(self._target.close())
        finally:
            own: _Loop | None = self._own
            if own is not None:
                own.stop()

    def __enter__(self) -> SyncBridge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def bridged_factory(
    open_driver: Callable[[Any], AbstractAsyncContextManager[Any]],
) -> Callable[[Any], AbstractContextManager[SyncBridge]]:
    """A parity-suite driver factory (``(clock) -> context manager``) for an async driver.

    ``open_driver(clock)`` is an async context manager yielding a fresh async driver (and
    cleaning its store up on exit); it is entered and left on the bridge's own loop, and
    the scenario gets a :class:`SyncBridge` over the driver.
    """

    @contextlib.contextmanager
    def factory(clock: Any) -> Iterator[SyncBridge]:
        own = _Loop("jobcore-bridge-factory")
        waiter = _Waiter(own.loop, own)
        manager = open_driver(clock)
        try:
            driver = waiter.wait(manager.__aenter__())
            bridge = SyncBridge(driver, own.loop)
            object.__setattr__(bridge, "_waiter", waiter)  # knows its loop is stopping, and refuses
            try:
                yield bridge
            finally:
                waiter.wait(manager.__aexit__(None, None, None))
        finally:
            own.stop()

    return factory
