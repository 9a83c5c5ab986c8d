"""What the app's migrations run: jobcore's own, idempotent schema install (``driver.migrate()``).

Every jobcore release whose schema changes ships one more migration calling
:func:`install_schema`, so ``python manage.py migrate`` keeps the schema at what the
installed jobcore needs. Migrating backwards leaves jobcore's schema in place (its tables
hold jobs, not Django models); drop it by hand if you remove the app.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from django.apps import apps as django_apps

from jobcore.current import get_job_driver, set_job_driver
from jobcore.driver import JobDriver
from jobcore.errors import NoDriver

from ._settings import build_driver

if TYPE_CHECKING:
    from .apps import JobcoreConfig

__all__ = ["install_schema"]

log = logging.getLogger("jobcore.django")


def _current() -> JobDriver | None:
    try:
        return get_job_driver()
    except NoDriver:
        return None


def install_schema(apps: Any, schema_editor: Any) -> None:
    """Migrate jobcore's store when Django migrates ``JOBCORE["DATABASE"]`` (other aliases: nothing).

    Under Django's test runner the database migrated is the test database (another
    ``NAME``): the process-wide driver built at start-up is then replaced by one on it,
    so the tests' jobs land beside the tests' rows (:func:`_follow_test_database`).
    """
    connection = schema_editor.connection
    app = cast("JobcoreConfig", django_apps.get_app_config("jobcore"))
    config = app.config
    if connection.alias != config.database:
        return
    driver = app.driver
    name = connection.settings_dict.get("NAME")
    if config.url is None and getattr(driver, "database_name", name) != name:
        driver = _follow_test_database(app, connection)
    done = driver.migrate()
    log.info("jobcore schema: %s", done.describe())


def _follow_test_database(app: JobcoreConfig, connection: Any) -> JobDriver:
    """Point the app (and the process-wide driver, if it is the app's) at the test database
    Django's test runner just created on ``connection``. The driver on it is closed when the
    runner destroys that database (its connections would keep the DROP from running), and
    the start-up driver comes back."""
    original = app.driver
    fresh = build_driver(app.config, connection.settings_dict)
    if _current() is original:
        set_job_driver(fresh)
    app.driver = fresh
    creation = connection.creation
    destroy = creation.destroy_test_db

    def destroy_test_db(*args: Any, **kwargs: Any) -> Any:
        fresh.close()
        app.driver = original
        if _current() is fresh:
            set_job_driver(original)
        creation.destroy_test_db = destroy  # this instance only; once
        return destroy(*args, **kwargs)

    creation.destroy_test_db = destroy_test_db
    log.info("jobcore follows Django's test database %s", connection.settings_dict.get("NAME"))
    return fresh
