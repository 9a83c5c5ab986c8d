"""``python manage.py jobcore_migrate [--dry-run | --sql]``: ``jobcore migrate`` on the driver of ``settings.JOBCORE``.

``python manage.py migrate`` installs the schema too (this app's migration); this command
shows the plan or the SQL for a DBA, or migrates a store named by ``JOBCORE["URL"]`` alone.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobcore.cli import main
from jobcore.current import get_job_driver


class Command(BaseCommand):
    help = "Install or upgrade jobcore's schema on the store settings.JOBCORE names (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="write nothing: say what would be done")
        parser.add_argument("--sql", action="store_true", help="write nothing: print the statements as one script")
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = ["migrate", *(f"--{flag.replace('_', '-')}" for flag in ("dry_run", "sql", "json") if options[flag])]
        status = main(argv, driver=get_job_driver())
        if status:
            raise CommandError(f"jobcore migrate exited with status {status}", returncode=status)
