"""Django integration: ``INSTALLED_APPS = [..., "jobcore.contrib.django"]``.

When Django starts, the app reads ``settings.JOBCORE`` and sets the process-wide driver
(:func:`jobcore.set_job_driver`): by default a PostgreSQL driver on the server of
``DATABASES["default"]``, whose ``enqueue`` inside ``transaction.atomic()`` joins Django's
transaction. ``python manage.py migrate`` installs jobcore's schema (this app's migration),
``python manage.py jobcore_worker`` runs a worker, and :func:`enqueue` enqueues on a Django
connection explicitly. Guide: docs/integrations/django.md. Needs ``jobcore-queue[django]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobcore.current import get_job_driver
from jobcore.errors import NotSupported
from jobcore.records import Job
from jobcore.registry import JobHandle

__all__ = ["enqueue", "enqueue_many"]


def _target(using: str | None) -> tuple[Any, Any]:
    """The process-wide driver and the psycopg connection of Django database ``using``."""
    from ._postgres import django_connection  # noqa: PLC0415 - psycopg and Django's ORM load on first use

    driver = get_job_driver()
    if "transactional_enqueue" not in driver.capabilities:
        raise NotSupported(
            f"the process-wide driver ({type(driver).__name__}) cannot enqueue inside a Django transaction",
            "use PostgreSQL: leave JOBCORE['URL'] out (the server of DATABASES['default']) or point it at that "
            "database; or enqueue with handle.enqueue(...), which commits at once",
        )
    alias = using if using is not None else getattr(driver, "django_database", "default")
    return driver, django_connection(alias)


def enqueue(handle_or_name: JobHandle | str, payload: Any = None, *, using: str | None = None, **options: Any) -> Job:
    """Enqueue on Django database ``using``'s own connection (default: ``JOBCORE["DATABASE"]``).

    Inside ``transaction.atomic(using=...)`` the job commits or rolls back with the block;
    outside one (Django's autocommit) it is stored at once. ``handle_or_name`` is a ``@job``
    handle (its queue, priority and ``max_attempts`` are the defaults) or a job name;
    ``options`` are :meth:`jobcore.JobHandle.enqueue`'s (``queue``, ``priority``, ``run_at``,
    ``delay``, ``max_attempts``, ``key``).
    """
    driver, conn = _target(using)
    if isinstance(handle_or_name, JobHandle):
        options = handle_or_name._options(**{
            "queue": None, "priority": None, "run_at": None, "delay": None, "max_attempts": None, "key": None,
            **options,
        })
        handle_or_name = handle_or_name.name
    job: Job = driver.enqueue(handle_or_name, payload, connection=conn, **options)
    return job


def enqueue_many(specs: Iterable[Any], *, using: str | None = None) -> list[Job]:
    """``driver.enqueue_many(specs)`` on Django database ``using``'s own connection (see :func:`enqueue`)."""
    driver, conn = _target(using)
    jobs: list[Job] = driver.enqueue_many(specs, connection=conn)
    return jobs
