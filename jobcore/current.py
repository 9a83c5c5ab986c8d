"""The process-wide driver: build one from a URL, choose it, and reach it from anywhere.

Applications pick their backend in one place (``set_job_driver(connect(url))``) and the
rest of the code, ``@job`` handles included, calls ``get_job_driver()``. Tests swap in a
memory driver with ``use_job_driver``.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from jobcore.driver import AsyncJobDriver, Duration, JobDriver
from jobcore.errors import (
    URL_SCHEME,
    DriverUnavailable,
    JobNotCancellable,
    NoDriver,
    OptionInvalid,
    UrlInvalid,
    redact,
)
from jobcore.records import Job

__all__ = [
    "cancel_job",
    "cancel_job_async",
    "connect",
    "connect_async",
    "get_async_job_driver",
    "get_job_driver",
    "set_async_job_driver",
    "set_job_driver",
    "use_async_job_driver",
    "use_job_driver",
    "wait_for_job",
    "wait_for_job_async",
]

_SCHEMES: dict[str, tuple[str, str, str]] = {
    "memory": ("jobcore.drivers.memory", "MemoryDriver", ""),
    "postgresql": ("jobcore.drivers.postgres", "PostgresDriver", "postgres"),
    "postgres": ("jobcore.drivers.postgres", "PostgresDriver", "postgres"),
    "mongodb": ("jobcore.drivers.mongo", "MongoDriver", "mongo"),
    "mongodb+srv": ("jobcore.drivers.mongo", "MongoDriver", "mongo"),
}
_ENTRY_POINT_GROUP = "jobcore.drivers"
_ASYNC_ENTRY_POINT_GROUP = "jobcore.async_drivers"

_lock = threading.Lock()
_current: JobDriver | None = None
_current_async: AsyncJobDriver | None = None


def connect(url: str, **options: Any) -> JobDriver:
    """Build a driver from ``url``: ``memory://``, ``postgresql://...``, ``mongodb://...``.

    Extra keyword options go to the driver's ``from_url`` (``clock=...`` on every
    driver). Third-party drivers register a scheme under the ``jobcore.drivers``
    entry-point group, naming a class with a ``from_url(url, **options)`` classmethod.
    """
    factory = _driver_class(url, flavour="")
    _refuse_unknown_options(factory, options)
    return factory(url, **options)  # type: ignore[no-any-return]


def connect_async(url: str, **options: Any) -> AsyncJobDriver:
    """Build an async driver from ``url``, as :func:`connect` builds a sync one.

    ``AsyncMemoryDriver``, ``AsyncPostgresDriver`` or ``AsyncMongoDriver``, with the same
    options; nothing is opened until the first awaited verb (``await driver.migrate()``).
    Third-party async drivers register under the ``jobcore.async_drivers`` entry-point group.
    """
    factory = _driver_class(url, flavour="Async")
    _refuse_unknown_options(factory, options)
    return factory(url, **options)  # type: ignore[no-any-return]


_URL_START = re.compile(URL_SCHEME)
"""What a driver URL starts with: a scheme and ``://``."""


def _driver_class(url: object, *, flavour: str) -> Callable[..., Any]:
    """The ``from_url`` of the class serving ``url`` in ``flavour`` (``""`` sync, ``"Async"``)."""
    if isinstance(url, str) and url != url.strip() and _URL_START.match(url.strip()):
        _refuse_whitespace(url)
    if not isinstance(url, str) or not _URL_START.match(url):
        # "://" elsewhere than after a scheme (a keyword/value string whose password holds
        # it) is no URL either: it used to be refused as "no driver handles :// URLs".
        fix = None
        if isinstance(url, str) and "=" in url:
            fix = (
                "a libpq keyword/value string is not a driver URL: write it as "
                "postgresql://user:password@host:port/db?option=value (or pass it to PostgresDriver)"
            )
        raise UrlInvalid(f"{repr(redact(url))[:80]} is not a driver URL", fix)
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # e.g. an unbalanced "[" in the host
        raise UrlInvalid(f"{repr(redact(url))[:80]} is not a valid URL ({redact(exc)})") from None
    target = _SCHEMES.get(scheme)
    if target is None:
        from importlib.metadata import entry_points  # noqa: PLC0415 - loads email, zipfile...: only for plug-ins

        group = _ASYNC_ENTRY_POINT_GROUP if flavour else _ENTRY_POINT_GROUP
        for ep in entry_points(group=group):
            if ep.name == scheme:
                return ep.load().from_url  # type: ignore[no-any-return]
        raise UrlInvalid(f"no jobcore {'async ' if flavour else ''}driver handles {scheme}:// URLs")
    module_name, class_name, extra = target
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DriverUnavailable(
            f"the {scheme}:// driver needs packages that are not installed ({exc.name})",
            f"pip install 'jobcore-queue[{extra}]'",
        ) from exc
    return getattr(module, flavour + class_name).from_url  # type: ignore[no-any-return]


def _refuse_whitespace(url: str) -> None:
    """Refuse a URL with whitespace around it, naming it, whatever its scheme: a URL read from
    a file or a secret often ends in a newline, which PyMongo keeps in the database's name
    (``db`` and a newline: another database, silently)."""
    scheme = url.strip().split("://", 1)[0]
    sides = (("starts", url[: len(url) - len(url.lstrip())]), ("ends", url[len(url.rstrip()):]))
    where = " and ".join(f"{side} with {blank!r}" for side, blank in sides if blank)
    raise UrlInvalid(
        f"the {scheme}:// URL {where}",
        "strip the whitespace around it (a URL read from a file or a secret often ends in a newline)",
    )


def _refuse_unknown_options(factory: Callable[..., Any], options: dict[str, Any]) -> None:
    """Refuse an option the driver class behind ``factory`` (a ``from_url`` classmethod) does not
    take, naming the ones it does, before anything is built: it used to surface as Python's
    own ``TypeError`` from deep inside the driver. A class taking ``**kwargs`` checks its own."""
    cls = getattr(factory, "__self__", None)
    if not options or not isinstance(cls, type):
        return
    params = inspect.signature(cls).parameters.values()
    if any(param.kind is param.VAR_KEYWORD for param in params):
        return
    taken = sorted(param.name for param in params if param.kind is param.KEYWORD_ONLY)
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise OptionInvalid(
            f"{cls.__name__} takes no option {', '.join(repr(name) for name in unknown)}",
            f"pass only {', '.join(taken)} as keywords; a driver's other settings go in the URL's query",
        )


def set_job_driver(driver: JobDriver | None) -> JobDriver | None:
    """Choose the process-wide driver (``None`` clears it); answers the previous one."""
    global _current
    with _lock:
        previous, _current = _current, driver
    return previous


def get_job_driver() -> JobDriver:
    """The process-wide driver, or ``JC_NO_DRIVER`` when none was chosen."""
    driver = _current
    if driver is None:
        raise NoDriver("no job driver has been set for this process")
    return driver


@contextlib.contextmanager
def use_job_driver(driver: JobDriver) -> Iterator[JobDriver]:
    """Use ``driver`` as the process-wide one inside the ``with`` block, then restore."""
    previous = set_job_driver(driver)
    try:
        yield driver
    finally:
        set_job_driver(previous)


def cancel_job(job_id: str, reason: str | None = None, *, driver: JobDriver | None = None) -> Job:
    """Cancel a live job or raise ``JC_JOB_NOT_CANCELLABLE`` (finished or unknown) (O01)."""
    target = driver if driver is not None else get_job_driver()
    job = target.introspect.cancel(job_id, reason)
    if job is None:
        raise JobNotCancellable(f"job {job_id} is finished or does not exist")
    return job


def wait_for_job(job_id: str, *, timeout: Duration, poll: Duration = 1.0, driver: JobDriver | None = None) -> Job:
    """The job once it is finished, waiting up to ``timeout`` (rules A): ``driver.wait`` on the
    process-wide driver (or ``driver``). Raises ``JC_WAIT_TIMEOUT`` (the job left alone) or
    ``JC_JOB_NOT_FOUND``; see :meth:`jobcore.driver.JobDriver.wait`."""
    target = driver if driver is not None else get_job_driver()
    return target.wait(job_id, timeout=timeout, poll=poll)


def set_async_job_driver(driver: AsyncJobDriver | None) -> AsyncJobDriver | None:
    """Choose the process-wide async driver (``None`` clears it); answers the previous one.

    ``await handle.enqueue_async(...)`` and :func:`cancel_job_async` use it. It is
    separate from :func:`set_job_driver`: an application may have both, over one store.
    """
    global _current_async
    with _lock:
        previous, _current_async = _current_async, driver
    return previous


def get_async_job_driver() -> AsyncJobDriver:
    """The process-wide async driver, or ``JC_NO_DRIVER`` when none was chosen."""
    driver = _current_async
    if driver is None:
        raise NoDriver(
            "no async job driver has been set for this process",
            "call jobcore.set_async_job_driver(jobcore.connect_async(url)) at start-up",
        )
    return driver


@contextlib.contextmanager
def use_async_job_driver(driver: AsyncJobDriver) -> Iterator[AsyncJobDriver]:
    """Use ``driver`` as the process-wide async one inside the ``with`` block, then restore."""
    previous = set_async_job_driver(driver)
    try:
        yield driver
    finally:
        set_async_job_driver(previous)


async def cancel_job_async(job_id: str, reason: str | None = None, *, driver: AsyncJobDriver | None = None) -> Job:
    """:func:`cancel_job` on an async driver (the process-wide async one by default)."""
    target = driver if driver is not None else get_async_job_driver()
    job = await target.introspect.cancel(job_id, reason)
    if job is None:
        raise JobNotCancellable(f"job {job_id} is finished or does not exist")
    assert isinstance(job, Job)
    return job


async def wait_for_job_async(
    job_id: str, *, timeout: Duration, poll: Duration = 1.0, driver: AsyncJobDriver | None = None,
) -> Job:
    """:func:`wait_for_job` on an async driver (the process-wide async one by default); the
    event loop runs on while it waits."""
    target = driver if driver is not None else get_async_job_driver()
    return await target.wait(job_id, timeout=timeout, poll=poll)
