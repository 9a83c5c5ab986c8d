"""``python manage.py jobcore_worker [MODULE ...]``: ``jobcore worker`` inside the Django project.

The jobs are the ``jobs`` module of every installed app (``myapp/jobs.py``), or the modules
named. The driver is the one ``settings.JOBCORE`` describes, with the worker's connection
budget (``--connections``, default 4, unless ``OPTIONS`` sets ``pool_max``). Every other
option is ``jobcore worker``'s (the same parser, :func:`jobcore.cli.worker.add_worker_options`).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.apps import apps as django_apps
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.utils.module_loading import autodiscover_modules

from jobcore import validate as v
from jobcore.cli._output import exit_code_for
from jobcore.cli._process import import_jobs
from jobcore.cli.worker import WORKER_CONNECTIONS, add_worker_options, connection_budget, run_worker
from jobcore.contrib.django._settings import build_driver
from jobcore.contrib.django.apps import JobcoreConfig
from jobcore.errors import ConfigurationError, JobcoreError
from jobcore.registry import default_registry


class Command(BaseCommand):
    help = "Run a jobcore worker for the jobs of the installed apps (their jobs.py) until SIGTERM/SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "modules", nargs="*", metavar="MODULE",
            help="modules declaring jobs (default: the `jobs` module of every installed app)",
        )
        add_worker_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._run(options)
        except JobcoreError as exc:
            raise CommandError(f"{exc.code}: {exc.cause}\n  fix: {exc.fix}", returncode=exit_code_for(exc)) from exc

    def _run(self, options: dict[str, Any]) -> None:
        modules: list[str] = options.pop("modules")
        if modules:
            for module in modules:
                import_jobs(module)
        else:
            autodiscover_modules("jobs")
        if not len(default_registry):
            raise ConfigurationError(
                f"{', '.join(modules)} declare no @job handlers" if modules
                else "no installed app has a jobs.py declaring @job handlers",
                "declare @job handlers in a jobs.py of an installed app, or name their modules: "
                "manage.py jobcore_worker myapp.tasks",
            )
        app = django_apps.get_app_config("jobcore")
        assert isinstance(app, JobcoreConfig)
        config = app.config
        connections_given = options["connections"]
        if connections_given is not None:
            v.check_int(connections_given, "--connections", 1, 1000)
        if config.url is None:
            extra = {"pool_max": connections_given or WORKER_CONNECTIONS}
        else:
            extra = connection_budget(config.url, connections_given)
        driver = build_driver(config, connections[config.database].settings_dict, extra=extra)
        args = argparse.Namespace(**options, module=None, url=None, driver=driver)
        try:
            run_worker(args)
        finally:
            driver.close()
