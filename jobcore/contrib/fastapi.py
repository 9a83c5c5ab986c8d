"""FastAPI and Starlette: jobcore's driver and worker in the application's lifespan, the driver as a dependency.

::

    from fastapi import Depends, FastAPI
    from jobcore.contrib.fastapi import JobDriverDep, lifespan

    app = FastAPI(lifespan=lifespan("postgresql://app@db/app", queues=["mail"], concurrency=8))

    @app.post("/signup")
    async def signup(email: str, jobs: JobDriverDep):
        job = await jobs.enqueue("send_welcome", {"to": email})
        return {"job": job.id}

:func:`lifespan` opens an async driver (or takes yours), makes it the process-wide async
driver (so ``await handle.enqueue_async(...)`` works anywhere), runs an
:class:`~jobcore.AsyncWorker` on the application's event loop while the app serves, and on
shutdown drains the worker, then closes the driver it opened. The driver is also in the
lifespan state (``request.state.jobcore``), which :func:`job_driver` (the dependency behind
:data:`JobDriverDep`) reads. Starlette takes the same ``lifespan=``; only
:data:`JobDriverDep` needs FastAPI.

An application with a lifespan of its own enters jobcore's inside it::

    @contextlib.asynccontextmanager
    async def app_lifespan(app):
        async with lifespan(url, queues=["mail"])(app) as state, open_my_pool() as pool:
            yield {**state, "pool": pool}
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Annotated, Any

from jobcore.current import connect_async, get_async_job_driver, set_async_job_driver
from jobcore.driver import AsyncJobDriver
from jobcore.errors import ConfigurationError
from jobcore.registry import Registry, default_registry

if TYPE_CHECKING:
    from starlette.requests import Request
else:
    try:
        from starlette.requests import Request
    except ImportError:  # pragma: no cover - only without Starlette, where nothing here is usable
        Request = Any

__all__ = ["JobDriverDep", "job_driver", "lifespan"]


def lifespan(
    url: str | None = None,
    *,
    driver: AsyncJobDriver | None = None,
    queues: Sequence[str] | str | None = None,
    worker: bool = True,
    migrate: bool = False,
    registry: Registry | None = None,
    **worker_options: Any,
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """An ASGI lifespan running jobcore with the application: ``FastAPI(lifespan=lifespan(url))``.

    Args:
        url: The store (default ``JOBCORE_URL``); opened with :func:`jobcore.connect_async`
            and closed on shutdown. Not with ``driver``.
        driver: An async driver of yours instead (left open on shutdown).
        queues: The worker's queues (default: every queue of the registry's jobs).
        worker: Run an :class:`~jobcore.AsyncWorker` in this process; ``False`` for web
            processes that only enqueue (workers run elsewhere, e.g. ``jobcore worker``).
        migrate: Install or upgrade the schema at start-up (scratch databases and demos;
            deploy with ``jobcore migrate`` instead).
        registry: Where handlers are looked up (default: ``@job``'s).
        **worker_options: The rest of :class:`~jobcore.AsyncWorker`'s keywords
            (``concurrency``, ``lease``, ``drain_timeout``...).

    Raises:
        ConfigurationError: ``JC_CONFIGURATION`` (when the app starts) with neither ``url``,
            ``driver`` nor ``JOBCORE_URL``, or with both ``url`` and ``driver``.
    """
    if url is not None and driver is not None:
        raise ConfigurationError("lifespan() was given both url= and driver=", "pass one of them")
    jobs_registry = registry if registry is not None else default_registry

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[dict[str, Any]]:
        target = url or os.environ.get("JOBCORE_URL")
        if driver is None and not target:
            raise ConfigurationError(
                "jobcore's lifespan has no store: neither url= nor driver= was given, and JOBCORE_URL is not set",
                "pass lifespan(url) or set JOBCORE_URL",
            )
        jobs = driver if driver is not None else connect_async(str(target))
        try:
            if migrate:
                await jobs.migrate()
            previous = set_async_job_driver(jobs)
            try:
                if not worker:
                    yield {"jobcore": jobs}
                    return
                from jobcore.worker import AsyncWorker  # noqa: PLC0415 - web processes without workers skip it

                names = queues if queues is not None else sorted(jobs_registry.queues())
                async with AsyncWorker(names, driver=jobs, registry=jobs_registry, **worker_options) as running:
                    yield {"jobcore": jobs, "jobcore_worker": running}
            finally:
                set_async_job_driver(previous)
        finally:
            if driver is None:
                await jobs.close()

    return run


def job_driver(request: Request) -> AsyncJobDriver:
    """The FastAPI dependency handing out the lifespan's driver (else the process-wide async one)."""
    found = getattr(request.state, "jobcore", None)
    return found if found is not None else get_async_job_driver()


try:
    from fastapi import Depends
except ImportError:  # pragma: no cover - Starlette alone: use job_driver(request) directly
    JobDriverDep: Any = AsyncJobDriver
else:
    JobDriverDep = Annotated[AsyncJobDriver, Depends(job_driver)]
    """``jobs: JobDriverDep`` in an endpoint's parameters: the lifespan's async driver."""
