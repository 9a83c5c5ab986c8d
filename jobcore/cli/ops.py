"""Operator commands of the ``jobcore`` CLI: see what is stuck, why, and fix it.

Every command here is a thin layer over ``driver.introspect`` (plus ``driver.migrate``),
so it behaves the same on every driver. Each takes ``--url`` (default ``$JOBCORE_URL``)
and ``--json``; reads print a readable table by default. Bulk forms of the operator verbs
(``cancel --state dead --queue mail``) move at most ``--limit`` rows per call; ``--all``
calls again until nothing remains, and every bulk form asks for confirmation on a
terminal unless ``--yes`` is given (without a terminal, ``--yes`` is required).
A refusal raises a coded :class:`~jobcore.errors.JobcoreError`; :mod:`jobcore.cli`
prints its code, cause and fix and exits with the status of its class.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobcore import validate as v
from jobcore.cli._output import (
    age,
    clip,
    iso,
    note,
    out,
    print_json,
    progress_cell,
    progress_line,
    table,
    when,
)
from jobcore.cli._store import common_options, open_store, store_url
from jobcore.cli._verbs import (
    STATE_ORDER,
    bulk_call,
    describe_filter,
    error_to_dict,
    estimate,
    parse_state,
    parse_time,
    run_one,
    stats_data,
)
from jobcore.driver import JobDriver
from jobcore.errors import OptionInvalid, redact
from jobcore.records import Job, JobError, JobFilter, JobState
from jobcore.vocabulary import GUARDS, not_found

__all__ = ["job_to_dict", "register"]


# -- JSON shape ------------------------------------------------------------------------


def job_to_dict(job: Job) -> dict[str, Any]:
    """``job`` as JSON-ready data: times as ISO 8601 strings (UTC, milliseconds), states as names.

    The shape of every job the CLI prints with ``--json``. ``duplicate`` is left out: it
    only means something on the answer of an ``enqueue``.
    """
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "key": job.key,
        "payload": job.payload,
        "result": job.result,
        "run_at": iso(job.run_at),
        "created_at": iso(job.created_at),
        "attempted_at": iso(job.attempted_at),
        "finished_at": iso(job.finished_at),
        "worker_id": job.worker_id,
        "claim_no": job.claim_no,
        "lease_expires_at": iso(job.lease_expires_at),
        "last_error": None if job.last_error is None else error_to_dict(job.last_error),
        "errors": [error_to_dict(e) for e in job.errors],
        "progress": None if job.progress is None else {
            "value": job.progress.value, "message": job.progress.message, "updated_at": iso(job.progress.updated_at),
        },
        "trace_context": job.trace_context,
    }


# -- text shape ------------------------------------------------------------------------


def _error_text(error: JobError | None) -> str:
    return "-" if error is None else clip(f"{error.type}: {error.message}")


def _jobs_table(jobs: Sequence[Job], *, finished: bool = False) -> str:
    headers = ["ID", "STATE", "QUEUE", "NAME", "ATTEMPT", "FINISHED" if finished else "RUN AT", "CREATED", "LAST ERROR"]
    rows = [
        [
            j.id, j.state.value, j.queue, j.name, f"{j.attempt}/{j.max_attempts}",
            when(j.finished_at if finished else j.run_at), when(j.created_at), _error_text(j.last_error),
        ]
        for j in jobs
    ]
    if any(j.state is JobState.RUNNING and j.progress is not None for j in jobs):
        # Running jobs' stored progress (rules G), only when one on the page reported some.
        headers.insert(5, "PROGRESS")
        for row, j in zip(rows, jobs, strict=True):
            row.insert(5, progress_cell(j.progress) if j.state is JobState.RUNNING else "-")
    return table(headers, rows)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _lease_text(job: Job, now: datetime) -> str:
    if job.lease_expires_at is None:
        return "-"
    left = job.lease_expires_at - now
    timing = f"lapsed {age(-left)} ago" if left <= timedelta(0) else f"{age(left)} left"
    return f"held by {job.worker_id} (claim {job.claim_no}) until {when(job.lease_expires_at)}, {timing}"


def _relatives_text(jobs: Sequence[Job]) -> str:
    """``12 (done), 13 (running)``, or ``-`` for none."""
    return ", ".join(f"{j.id} ({j.state.value})" for j in jobs) if jobs else "-"


def _show_text(job: Job, now: datetime, parents: Sequence[Job] = (), children: Sequence[Job] = ()) -> str:
    fields = [
        ("state", job.state.value),
        ("queue", job.queue),
        ("name", job.name),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("key", job.key if job.key is not None else "-"),
        ("run at", when(job.run_at)),
        ("created at", when(job.created_at)),
        ("attempted at", when(job.attempted_at)),
        ("finished at", when(job.finished_at)),
        ("lease", _lease_text(job, now)),
        ("progress", progress_line(job.progress, now)),
        ("payload", _json_text(job.payload)),
        ("result", _json_text(job.result) if job.result is not None else "-"),
        ("parents", _relatives_text(parents)),
        ("children", _relatives_text(children)),
    ]
    lines = [f"job {job.id}"]
    lines += [f"  {label:<13}{value}" for label, value in fields]
    if job.errors:
        lines.append(f"errors ({len(job.errors)}, oldest first):")
        lines += [
            f"  attempt {e.attempt}  {when(e.at)}  {e.type}: {' '.join(e.message.split())}" for e in job.errors
        ]
    else:
        lines.append("errors: none")
    return "\n".join(lines)


# -- arguments -------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """argparse type for ``--spread``: a finite number (its range is the driver's to check)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def _filter(args: argparse.Namespace) -> JobFilter | None:
    states = [parse_state(part) for given in args.state or () for part in given.split(",") if part.strip()]
    created_from = None if args.created_from is None else parse_time(args.created_from, "--created-from")
    created_to = None if args.created_to is None else parse_time(args.created_to, "--created-to")
    if not any((args.queue, args.name, states, args.id_prefix, created_from, created_to)):
        return None
    return JobFilter(
        queue=args.queue, name=args.name, state=states or None, id_prefix=args.id_prefix,
        created_from=created_from, created_to=created_to,
    )


# -- handlers --------------------------------------------------------------------------


def _cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        data = stats_data(driver.introspect.stats())
    if args.json:
        print_json(data)
        return 0
    if not data["queues"]:
        out("no jobs")
        return 0
    headers = ["QUEUE", *(s.value.upper() for s in STATE_ORDER), "OLDEST DUE"]
    rows = []
    for queue, entry in data["queues"].items():
        due_age = entry["oldest_due_age_seconds"]
        rows.append([
            queue, *(str(entry["counts"][s.value]) for s in STATE_ORDER),
            "-" if due_age is None else age(timedelta(seconds=due_age)),
        ])
    rows.append(["(all)", *(str(data["totals"][s.value]) for s in STATE_ORDER), ""])
    out(table(headers, rows))
    out(f"dead: {data['dead']}" + ("  (see `jobcore dead`)" if data["dead"] else ""))
    return 0


def _cmd_ls(args: argparse.Namespace) -> int:
    flt = _filter(args)
    with open_store(args) as driver:
        page = driver.introspect.list(flt, args.limit, after=args.after, before=args.before)
    if args.json:
        print_json({"jobs": [job_to_dict(j) for j in page.jobs], "after": page.after, "before": page.before})
        return 0
    out(_jobs_table(page.jobs) if page.jobs else "no jobs match")
    if page.after is not None:
        out(f"older: --after {page.after}")
    if page.before is not None:
        out(f"newer: --before {page.before}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        job = driver.introspect.get(args.id)
        now = driver.clock.now()
        # rules D: the jobs it waits on and those waiting on it
        parents = driver.introspect.parents(job.id) if job is not None else []
        children = driver.introspect.children(job.id) if job is not None else []
    if job is None:
        raise not_found(args.id)
    if args.json:
        print_json({**job_to_dict(job), "parents": [j.id for j in parents], "children": [j.id for j in children]})
    else:
        out(_show_text(job, now, parents, children))
    return 0


def _cmd_wait(args: argparse.Namespace) -> int:
    """Block until the job is finished (rules A) and print it as ``show`` does; a timeout is
    ``JC_WAIT_TIMEOUT`` (exit 7), the job left alone."""
    with open_store(args) as driver:
        job = driver.wait(args.id, timeout=args.timeout, poll=args.poll)
        now = driver.clock.now()
    if args.json:
        print_json(job_to_dict(job))
    else:
        out(_show_text(job, now))
    return 0


def _cmd_dead(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        jobs = driver.introspect.dead_letters(args.queue, args.limit)
    if args.json:
        print_json({"jobs": [job_to_dict(j) for j in jobs]})
    else:
        out(_jobs_table(jobs, finished=True) if jobs else "no dead jobs")
    return 0


def _cmd_rescue(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        result = driver.introspect.rescue()
    if args.json:
        print_json({"requeued": result.requeued, "buried": [job_to_dict(j) for j in result.buried]})
        return 0
    out(f"requeued {result.requeued} job(s) whose lease lapsed; buried {len(result.buried)}")
    for job in result.buried:
        out(f"  buried {job.id} ({job.name}, queue {job.queue}) -> {job.state.value}")
    return 0


def _cmd_slots(args: argparse.Namespace) -> int:
    with open_store(args) as driver:
        slots = driver.leases.holders(args.key, args.limit)
        now = driver.clock.now()
    if args.json:
        print_json({"slots": [
            {"key": s.key, "holder": s.holder, "expires_at": iso(s.expires_at),
             "seconds_left": (s.expires_at - now).total_seconds()}
            for s in slots
        ]})
        return 0
    if not slots:
        out("no slot is held")
        return 0
    rows = [[s.key, s.holder, when(s.expires_at), age(max(s.expires_at - now, timedelta(0)))] for s in slots]
    out(table(["KEY", "HOLDER", "EXPIRES", "LEFT"], rows))
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    dry = args.dry_run or args.sql
    with open_store(args) as driver:
        done = driver.migrate(dry_run=dry)
    target = redact(store_url(args) or "the given driver")
    if args.sql:
        # A script for a DBA to apply (SQL: one transaction), nothing else on stdout.
        sql = done.language == "sql"
        if not done.statements:
            out(f"{'--' if sql else '//'} {done.describe()}: nothing to apply")
            return 0
        if sql:
            out("BEGIN;")
        for statement in done.statements:
            out(f"{statement.strip()};")
        if sql:
            out("COMMIT;")
        return 0
    if args.json:
        print_json({
            "before": done.before, "after": done.after, "latest": done.latest, "applied": done.applied,
            "changed": done.changed, "statements": list(done.statements), "summary": done.describe(),
        })
        return 0
    out(f"schema of {target}: {done.describe()}")
    if dry:
        for statement in done.statements:
            out(f"  {' '.join(statement.split())}")
    return 0


def _confirm(question: Callable[[], str]) -> bool:
    """Ask on the terminal; refused outright when there is none (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise OptionInvalid(
            "a bulk change needs confirmation and there is no terminal to ask on",
            "check the selection with `jobcore ls` and the same filters, then pass --yes",
        )
    note(f"{question()} [y/N] ", end="")
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _bulk(verb: str, driver: JobDriver, flt: JobFilter, args: argparse.Namespace) -> int:
    intro = driver.introspect
    limit = args.limit if args.limit is not None else v.MAX_BULK_ROWS
    v.check_bulk_limit(limit)  # refuse a bad --limit before asking anything
    if not args.yes:

        def question() -> str:
            matching = estimate(intro.stats(), flt, GUARDS[verb].states)
            count = "" if matching is None else f" ({matching} match now)"
            scope = "until none remain" if args.all else f"at most {limit}"
            return f"{verb} jobs where {describe_filter(flt)}{count}, {scope}?"

        if not _confirm(question):
            note("not confirmed; nothing changed")
            return 1
    total, calls = 0, 0
    while True:
        result = bulk_call(
            verb, intro, flt, limit, reason=getattr(args, "reason", None), spread=getattr(args, "spread", None)
        )
        total, calls = total + result.affected, calls + 1
        if args.all:
            note(f"{verb}: {total} {GUARDS[verb].past} so far, {result.remaining} remaining")
        # A call that moved nothing would move nothing next time either: stop rather than spin.
        if not args.all or result.remaining == 0 or result.affected == 0:
            break
    if args.json:
        print_json({"verb": verb, "affected": total, "remaining": result.remaining, "calls": calls})
    else:
        more = " (run again, or pass --all)" if result.remaining and not args.all else ""
        out(f"{GUARDS[verb].past} {total} job(s) in {calls} call(s); {result.remaining} remaining{more}")
    return 0


def _verb_handler(verb: str) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        bulk_options = [n for n in ("all", "yes", "limit", "spread") if getattr(args, n, None) not in (None, False)]
        flt = _filter(args) if verb != "resume" else None
        if args.id is not None:
            if flt is not None or bulk_options:
                given = ", ".join(f"--{n}" for n in bulk_options) or "filters"
                raise OptionInvalid(
                    f"{verb} was given a job id and bulk options ({given}) together",
                    f"use `jobcore {verb} ID` for one job, or filters (--state/--queue/--name) without an id",
                )
            with open_store(args) as driver:
                job = run_one(verb, driver.introspect, args.id, reason=getattr(args, "reason", None))
            if args.json:
                print_json(job_to_dict(job))
            else:
                out(f"{GUARDS[verb].past} job {job.id} ({job.name}, queue {job.queue}); state {job.state.value}")
            return 0
        if flt is None:
            selector = "a job id" if verb == "resume" else "a job id or at least one filter (--state/--queue/--name)"
            raise OptionInvalid(f"{verb} needs {selector}", f"e.g. `jobcore {verb} ID`")
        with open_store(args) as driver:
            return _bulk(verb, driver, flt, args)

    return handler


# -- registration ----------------------------------------------------------------------


def _filter_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("filters")
    group.add_argument("--queue", help="only this queue")
    group.add_argument("--name", help="only jobs of this name")
    group.add_argument(
        "--state", action="append", metavar="STATE",
        help="only these states (repeatable, or comma-separated: --state dead,failed)",
    )
    group.add_argument("--id-prefix", help="only ids starting with this text")
    group.add_argument("--created-from", metavar="TIME", help="created at or after (ISO 8601; no offset means UTC)")
    group.add_argument("--created-to", metavar="TIME", help="created strictly before (ISO 8601)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the operator commands to the ``jobcore`` parser."""
    common = common_options()

    def add(name: str, summary: str) -> argparse.ArgumentParser:
        return subparsers.add_parser(name, parents=[common], help=summary, description=summary)

    p = add("stats", "counts per queue and state, the oldest due job's age per queue, the dead count")
    p.set_defaults(func=_cmd_stats)

    p = add("ls", "list jobs, newest first, one page at a time")
    _filter_options(p)
    p.add_argument("--limit", type=int, default=v.DEFAULT_PAGE, help=f"page size, 1..{v.MAX_PAGE}")
    paging = p.add_mutually_exclusive_group()
    paging.add_argument("--after", metavar="CURSOR", help="the next older page (a cursor printed by ls)")
    paging.add_argument("--before", metavar="CURSOR", help="the next newer page (a cursor printed by ls)")
    p.set_defaults(func=_cmd_ls)

    p = add("show", "one job in full: payload, result, lease, progress and error history")
    p.add_argument("id", metavar="ID")
    p.set_defaults(func=_cmd_show)

    p = add("wait", "wait until a job is finished, then print it in full (exit 7 when --timeout passes first)")
    p.add_argument("id", metavar="ID")
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="give up after this long (default 60)",
    )
    p.add_argument(
        "--poll", type=float, default=1.0, metavar="SECONDS",
        help="longest pause between two reads of the job (default 1; stores sending wake-ups answer sooner)",
    )
    p.set_defaults(func=_cmd_wait)

    p = add("dead", "the dead-letter queue, most recently finished first")
    p.add_argument("--queue", help="only this queue")
    p.add_argument("--limit", type=int, default=v.DEFAULT_PAGE, help=f"how many, 1..{v.MAX_PAGE}")
    p.set_defaults(func=_cmd_dead)

    summaries = {
        "cancel": "stop live jobs (they become cancelled)",
        "requeue": "run finished jobs again (they become ready)",
        "remove": "delete jobs that are not running",
        "promote": "make scheduled jobs due now",
    }
    for verb, summary in summaries.items():
        p = add(verb, f"{summary}: one by ID, or every job matching the filters")
        p.add_argument("id", metavar="ID", nargs="?", help="one job (omit to use the filters)")
        _filter_options(p)
        p.add_argument("--limit", type=int, default=None, help=f"rows per call, 1..{v.MAX_BULK_ROWS} (default max)")
        p.add_argument("--all", action="store_true", help="call again until no matching job remains")
        p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
        if verb == "cancel":
            p.add_argument("--reason", help="recorded in each job's error history")
        if verb == "requeue":
            p.add_argument(
                "--spread", type=_seconds, default=None, metavar="SECONDS",
                help="spread new due times over this window (default 10 ms a row, at most 30 s)",
            )
        p.set_defaults(func=_verb_handler(verb))

    p = add("resume", "move a suspended (parked) job back to ready")
    p.add_argument("id", metavar="ID")
    p.set_defaults(func=_verb_handler("resume"))

    p = add("slots", "fleet concurrency slots: who holds which lease key, until when (unexpired only)")
    p.add_argument("--key", help="only this key")
    p.add_argument("--limit", type=int, default=v.DEFAULT_PAGE, help=f"how many, 1..{v.MAX_PAGE}")
    p.set_defaults(func=_cmd_slots)

    p = add("rescue", "put jobs whose lease lapsed back to ready (bury those on their final attempt)")
    p.set_defaults(func=_cmd_rescue)

    p = add("migrate", "install or upgrade the store's schema and indexes (idempotent)")
    p.add_argument(
        "--dry-run", action="store_true", help="write nothing: say what would be done and list the statements"
    )
    p.add_argument(
        "--sql", action="store_true",
        help="write nothing: print the statements a migration would run as one script (SQL for PostgreSQL, "
        "mongosh commands for MongoDB), for DBAs who apply DDL themselves",
    )
    p.set_defaults(func=_cmd_migrate)
