"""``jobcore scheduler`` and ``jobcore schedules``: run the periodic schedules, and see and steer them.

``jobcore scheduler`` runs a :class:`~jobcore.scheduler.Scheduler` in the foreground
until SIGTERM or SIGINT: it imports the ``--app`` modules (so their ``@job(schedule=...)``
declarations reach the store), then fires every due occurrence of every schedule in the
store. Any number may run at once, beside the schedulers inside ``jobcore worker``.

``jobcore schedules`` lists the store's schedules with their next and last occurrence
and last outcome (``--json`` for the full records); ``pause NAME``, ``resume NAME`` and
``remove NAME`` steer one (an unknown name is ``JC_SCHEDULE_NOT_FOUND``, exit 3). These
read only the store: the next occurrence is computed from the stored definition.
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable
from typing import Any

from jobcore import validate as v
from jobcore.cli._output import out, print_json, table
from jobcore.cli._process import add_log_level_option, import_jobs, logging_to_stderr, on_stop_signals
from jobcore.cli._store import add_migrate_option, add_url_option, common_options, open_store, prepare_schema
from jobcore.clock import to_millis
from jobcore.errors import ScheduleNotFound
from jobcore.records import Schedule
from jobcore.registry import default_registry
from jobcore.scheduler import DEFAULT_TICK, Scheduler, describe

__all__ = ["register"]

_log = logging.getLogger("jobcore.scheduler")


def register(subparsers: Any) -> None:
    """Add the ``scheduler`` and ``schedules`` sub-commands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "scheduler", help="fire periodic schedules until SIGTERM/SIGINT",
        description=(
            "Declare the schedules the --app modules register, then fire every due occurrence of every "
            "schedule in the store until SIGTERM/SIGINT. Any number may run at once (workers run one too)."
        ),
    )
    add_url_option(parser)
    parser.add_argument(
        "--app", action="append", default=[], metavar="MODULE",
        help="dotted module name or .py path declaring jobs and schedules (repeatable; default: none)",
    )
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_TICK,
        help=f"most seconds between ticks (default {DEFAULT_TICK:g}; sooner when an occurrence falls due)",
    )
    add_migrate_option(parser, "scheduler")
    add_log_level_option(parser)
    parser.set_defaults(func=_cmd_scheduler)

    common = common_options()
    listing = subparsers.add_parser(
        "schedules", parents=[common], help="list periodic schedules; pause, resume or remove one",
        description=(
            "List the store's schedules: spec, time zone, next occurrence, last occurrence (the watermark), "
            "last outcome and job, paused. Times are UTC."
        ),
    )
    listing.set_defaults(func=_cmd_list)
    # The verbs repeat --url/--json so they work after the name too; SUPPRESS keeps an
    # option given before the verb from being reset by the verb's own default.
    verb_common = argparse.ArgumentParser(add_help=False)
    add_url_option(verb_common, suppress=True)
    verb_common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    verbs = listing.add_subparsers(dest="action", metavar="ACTION")
    for name, summary, func in (
        ("pause", "stop a schedule firing (idempotent)", _cmd_pause),
        ("resume", "let a paused schedule fire again; occurrences during the pause never fire", _cmd_resume),
        ("remove", "delete a schedule and its watermark (a scheduler that declares it creates it anew)", _cmd_remove),
    ):
        verb = verbs.add_parser(name, parents=[verb_common], help=summary, description=summary)
        verb.add_argument("name", metavar="NAME", help="the schedule's name, as `jobcore schedules` lists it")
        verb.set_defaults(func=func)


# -- jobcore scheduler -------------------------------------------------------------------


def _cmd_scheduler(args: argparse.Namespace) -> int:
    with logging_to_stderr(args.log_level):
        return _run_scheduler(args)


def _run_scheduler(args: argparse.Namespace) -> int:
    v.check_seconds(args.interval, "--interval")  # before anything is imported or connected
    for module in args.app:
        import_jobs(module)
    with open_store(args) as driver:
        prepare_schema(driver, migrate=args.migrate, what="scheduler")
        scheduler = Scheduler(driver, registry=default_registry, interval=args.interval)
        restore = _install_signal_handlers(scheduler.request_stop)
        try:
            declared = scheduler.declare()
            _log.info(
                "scheduler %s started; declared %d schedules: %s", scheduler.scheduler_id, len(declared),
                ", ".join(s.name for s in declared) or "-",
            )
            # The loop runs in its own thread: a signal handler that sets the loop's event
            # while this (main) thread sat inside that same event's wait could deadlock.
            scheduler.start()
            while not scheduler.wait(0.5):
                pass
            _log.info("scheduler %s stopped", scheduler.scheduler_id)
        finally:
            restore()
    return 0


def _install_signal_handlers(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT end the loop after the current tick. Answers an undo function."""

    def on_signal(sig: signal.Signals) -> None:
        _log.warning("%s received: stopping the scheduler", sig.name)
        stop()

    return on_stop_signals(on_signal)


# -- jobcore schedules ---------------------------------------------------------------------


def _short_time(iso: str | None) -> str:
    return "-" if iso is None else iso.replace("T", " ").replace(".000Z", "Z")


def _spec(row: dict[str, Any]) -> str:
    definition = row["definition"]
    if row["kind"] == "cron" and isinstance(definition.get("expr"), str):
        return str(definition["expr"])
    return str(row["spec"])


def _cmd_list(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        now = to_millis(driver.clock.now())
        rows = [describe(s, now) for s in driver.schedules.list()]
    if args.json:
        print_json({"schedules": rows})
        return 0
    if not rows:
        out("no schedules (a scheduler declares them when it starts: `jobcore scheduler --app MODULE`)")
        return 0
    headers = ["NAME", "SPEC", "TZ", "NEXT", "LAST", "OUTCOME", "LAST JOB", "PAUSED"]
    cells = (
        [
            r["name"], _spec(r), r["tz"] or "-", _short_time(r["next_occurrence"]),
            _short_time(r["last_occurrence"]), r["last_outcome"] or "-", r["last_job_id"] or "-",
            "yes" if r["paused"] else "no",
        ]
        for r in rows
    )
    out(table(headers, cells))
    return 0


def _verb(args: argparse.Namespace, action: str) -> int:
    with open_store(args) as driver:
        store = driver.schedules
        answer: Schedule | bool | None = getattr(store, action)(args.name)
        if answer is None or answer is False:
            raise ScheduleNotFound(f"no schedule named {args.name!r:.80}")
        shown = describe(answer, to_millis(driver.clock.now())) if isinstance(answer, Schedule) else None
    if getattr(args, "json", False):
        print_json(shown if shown is not None else {"name": args.name, "removed": True})
    else:
        out(f"schedule {args.name} {action}d")
    return 0


def _cmd_pause(args: argparse.Namespace) -> int:
    return _verb(args, "pause")


def _cmd_resume(args: argparse.Namespace) -> int:
    return _verb(args, "resume")


def _cmd_remove(args: argparse.Namespace) -> int:
    return _verb(args, "remove")
