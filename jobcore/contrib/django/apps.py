"""The Django app: ``INSTALLED_APPS = [..., "jobcore.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.db import connections

from jobcore.current import set_job_driver
from jobcore.driver import JobDriver

from ._settings import Config, build_driver, read_config

__all__ = ["JobcoreConfig"]


class JobcoreConfig(AppConfig):
    """Reads ``settings.JOBCORE`` when Django starts and makes its driver the process-wide one
    (:func:`jobcore.set_job_driver`), so ``handle.enqueue(...)`` works anywhere in the project.

    Attributes:
        config: ``settings.JOBCORE``, checked.
        driver: The driver set at start-up (the migration may re-point it at a test database).
    """

    name = "jobcore.contrib.django"
    label = "jobcore"
    verbose_name = "jobcore"
    default = True
    config: Config
    driver: JobDriver

    def ready(self) -> None:
        self.config = read_config(settings)
        self.driver = build_driver(self.config, connections[self.config.database].settings_dict)
        set_job_driver(self.driver)
