"""The fault scenarios: each injects one fault into real worker processes and measures.

A scenario takes a :class:`~tests.faults.harness.Store`, a plan (its sizes: the CI sizes
by default, the issue's in ``bench/faults.py``) and a work directory, and answers a
:class:`Report`: the counts of :func:`tests.faults.record.analyze` plus the scenario's
own timings. Scenarios assert nothing; the tests in this package judge the report, and
the bench prints it (so it also measures a tree where the faults still do harm).

Times are ``time.monotonic()`` throughout, comparable with the record's.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jobcore.parity._proxy import Proxy

from jobcore.errors import JobcoreError
from jobcore.records import JobSpec
from tests.faults import harness as h
from tests.faults.record import Execution, Figures, analyze, read_record

__all__ = [
    "DiskPlan", "FailoverPlan", "KillPlan", "OutagePlan", "PausePlan", "Report", "RestartPlan", "SkewPlan",
    "SlotsPlan", "StallPlan", "StandbyLostPlan", "fmt", "run_disk_full", "run_failover", "run_kill", "run_pause",
    "run_restart", "run_skew", "run_slots_taken", "run_stall", "run_standby_lost",
]

NO_SECONDS = float("nan")


@dataclasses.dataclass
class Report:
    """What one scenario measured.

    Attributes:
        fault: The scenario's name.
        backend: ``postgres`` or ``mongo``.
        figures: The record's counts.
        measures: Named figures of the scenario (seconds, counts), in the order to print them.
        notes: What else the reader should know (a missing option, a skipped step).
        seconds: How long the scenario ran.
    """

    fault: str
    backend: str
    figures: Figures
    measures: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    logs: str = ""

    def text(self) -> str:
        out = [f"[{self.fault} / {self.backend}] {self.seconds:.1f}s", f"  {self.figures.line()}"]
        out += [f"  {name}: {fmt(value)}" for name, value in self.measures.items()]
        out += [f"  note: {note}" for note in self.notes]
        return "\n".join(out)

    def explain(self) -> str:
        """The report, examples of each violation and the workers' last log lines."""
        return f"{self.text()}\n{self.figures.explain()}\n  worker logs (last lines):\n{self.logs}"


def fmt(value: Any) -> str:
    """A figure as the reports and the bench's table print it (NaN: not measured)."""
    if isinstance(value, float):
        return "-" if value != value else f"{value:.2f}"  # NaN: not measured
    if isinstance(value, list | tuple):
        return ", ".join(fmt(v) for v in value) or "-"
    return str(value)


def _dirs(workdir: Path) -> tuple[Path, Path]:
    record, logs = workdir / "record", workdir / "logs"
    record.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    return record, logs


def _applied(record: Path) -> int:
    """Effects applied so far (a cheap count over the record files)."""
    return sum(path.read_bytes().count(b" applied\n") for path in record.glob("exec-*.log"))


def _started(record: Path, job_id: str, pid: int | None = None) -> list[Execution]:
    return [e for e in read_record(record) if e.job_id == job_id and (pid is None or e.pid == pid)]


def _first_after(executions: Iterable[Execution], pid: int, moment: float) -> float:
    """Seconds from ``moment`` to ``pid``'s first execution start after it (NaN: none)."""
    starts = [e.start for e in executions if e.pid == pid and e.start >= moment]
    return min(starts) - moment if starts else NO_SECONDS


def _finish(
    fault: str, store: h.Store, fleet: h.Fleet, record: Path, enqueued: list[str], began: float, *,
    pending: Iterable[str] = (), due: dict[str, float] | None = None,
) -> tuple[Report, list[Execution]]:
    executions = read_record(record)
    final = h.all_jobs(store)
    figures = analyze(executions, final, enqueued, pending=pending, deaths=fleet.deaths, due=due)
    report = Report(fault, store.kind, figures, notes=list(fleet.notes), logs=fleet.tails())
    report.seconds = time.monotonic() - began
    return report, executions


def _drained(store: h.Store, pending: int = 0) -> Callable[[], bool]:
    return lambda: h.live_count(store) <= pending


# -- a. network stall --------------------------------------------------------------------


@dataclasses.dataclass
class StallPlan:
    """Worker A reaches the store through a proxy that freezes; worker B reaches it directly."""

    freeze: float = 15.0
    lease: float = 6.0
    margin: float = 1.5
    long_ms: int = 12_000
    after_jobs: int = 3
    poll: float = 0.2


def run_stall(store: h.Store, plan: StallPlan, workdir: Path) -> Report:
    """A runs a long job when its link freezes; B reclaims it once the lease lapses; then thaw."""
    record, logs = _dirs(workdir)
    fleet = h.Fleet(record, logs)
    began = time.monotonic()
    proxy = Proxy(*store.address).start()
    t_freeze: float | None = None
    t_thaw = NO_SECONDS
    notes: list[str] = []
    after: list[str] = []
    b_pid = -1
    try:
        long_id = h.enqueue(store, [h.work(plan.long_ms)])[0]
        common = {"lease": plan.lease, "margin": plan.margin, "poll": plan.poll}
        a = fleet.spawn("A", store.worker_url(proxy.port), concurrency=2, **common)
        if not h.wait_until(lambda: _started(record, long_id, a.pid), 60):
            notes.append("A never started the long job: no fault injected")
        else:
            b_pid = fleet.spawn("B", store.worker_url(), concurrency=1, **common).pid
            time.sleep(1.5)  # B is up (imported, connected) before the freeze
            proxy.freeze()
            t_freeze = time.monotonic()
            time.sleep(plan.freeze)
            proxy.thaw()
            t_thaw = time.monotonic()
            after = h.enqueue(store, [h.work(100)] * plan.after_jobs)
            timeout = plan.long_ms / 1000 + 4 * plan.lease + 30
            if not h.wait_until(_drained(store), timeout, 0.25):
                notes.append(f"jobs still live {timeout:.0f}s after the thaw")
    finally:
        proxy.thaw()
        fleet.stop()
        proxy.close()
    report, runs = _finish("network stall", store, fleet, record, [long_id, *after], began)
    report.notes += notes
    if t_freeze is not None:
        mine = [e for e in runs if e.job_id == long_id and e.pid == a.pid]
        theirs = [e for e in runs if e.job_id == long_id and e.pid == b_pid]
        a_end = mine[0].until(fleet.deaths) if mine else NO_SECONDS
        b_start = theirs[0].start if theirs else NO_SECONDS
        report.measures.update({
            "freeze s": plan.freeze,
            "A's handler ended, s after the freeze": a_end - t_freeze,
            "A's handler outcome": mine[0].outcome if mine else "-",
            "B started the job, s after the freeze": b_start - t_freeze,
            "A ended before B started by, s (negative: both ran)": b_start - a_end,
            "A claims again, s after the thaw": _first_after(runs, a.pid, t_thaw),
        })
        report.measures["B ran the job"] = bool(theirs)
    return report


# -- b. clock skew -----------------------------------------------------------------------


@dataclasses.dataclass
class SkewPlan:
    """Workers whose clocks are off by +/- ``offset`` beside a correct one."""

    offset: str = "1h"
    held: int = 2
    held_ms: int = 8_000
    ready: int = 30
    skewed_ready: int = 6
    skewed_delayed: int = 2
    later: int = 3
    job_ms: int = 500
    lease: float = 6.0
    margin: float = 1.5
    poll: float = 0.2


def run_skew(store: h.Store, plan: SkewPlan, workdir: Path) -> Report:
    """C holds live leases; +offset and -offset clients rescue, enqueue and work beside it."""
    record, logs = _dirs(workdir)
    fleet = h.Fleet(record, logs)
    began = time.monotonic()
    ahead, behind = f"+{plan.offset}", f"-{plan.offset}"
    common = {"lease": plan.lease, "margin": plan.margin, "poll": plan.poll}
    notes: list[str] = []
    measures: dict[str, Any] = {}
    enqueued: list[str] = []
    pending: list[str] = []
    due: dict[str, float] = {}
    try:
        held = h.enqueue(store, [h.work(plan.held_ms)] * plan.held)
        enqueued += held
        c = fleet.spawn("C", store.worker_url(), concurrency=plan.held, **common)

        def all_held_started() -> bool:
            return all(_started(record, job_id, c.pid) for job_id in held)

        if not h.wait_until(all_held_started, 60):
            notes.append("C did not start every held job")
        # A skewed process's rescue while C holds live leases: must requeue nothing.
        for offset in (ahead, behind):
            rescued = h.skew_client(store, record, offset, "rescue")
            measures[f"rescue under {offset}: live jobs requeued"] = rescued["requeued"]
        now = time.monotonic()
        later_at = store.driver.clock.now() + timedelta(minutes=30)
        enqueued += h.enqueue(store, [h.work(plan.job_ms)] * plan.ready)
        later = h.enqueue(store, [h.work(100, run_at=later_at)] * plan.later)
        enqueued += later
        pending += later
        for offset in (ahead, behind):
            made = h.skew_client(
                store, record, offset, "enqueue", str(plan.skewed_ready), str(plan.skewed_delayed), str(plan.job_ms)
            )
            enqueued += made["ready"] + made["delayed"]
            pending += made["delayed"]
        due = dict.fromkeys(pending, now + 30 * 60)
        fleet.spawn("P", store.worker_url(), concurrency=2, clock_offset=ahead, **common)
        fleet.spawn("M", store.worker_url(), concurrency=2, clock_offset=behind, **common)

        waiting = set(pending)

        def drained() -> bool:
            return all(str(job.state) in ("done", "failed", "dead", "cancelled") or job.id in waiting
                       for job in h.all_jobs(store))

        timeout = plan.held_ms / 1000 + 4 * plan.lease + 40
        if not h.wait_until(drained, timeout, 0.5):
            notes.append(f"jobs still live after {timeout:.0f}s")
    finally:
        fleet.stop()
    report, runs = _finish("clock skew", store, fleet, record, enqueued, began, pending=pending, due=due)
    report.notes += notes
    held_set = set(enqueued[: plan.held])
    live_taken = [e for e in runs if e.job_id in held_set and e.claim_no > 1]
    report.measures.update(measures)
    report.measures["held jobs claimed again (live lease taken)"] = len({e.job_id for e in live_taken})
    report.measures["jobs due in 30 min that ran"] = len({e.job_id for e in runs if e.job_id in due})
    return report


# -- c. paused worker --------------------------------------------------------------------


def _hold_backlog(
    store: h.Store, record: Path, worker: h.WorkerProc, *, warm: int, quick: int, long_ms: int, concurrency: int,
    max_attempts: int | None = None,
) -> tuple[list[str], bool]:
    """Bring ``worker`` to hold jobs it claimed ahead but has not started; answers (ids, done).

    It first drains ``warm`` instant jobs, so it learns that a job takes less than a claim
    round trip and claims ahead of its free slots. Then ``concurrency`` long jobs (first by
    priority) and ``quick`` instant ones arrive in one batch: its next claim takes the long
    ones and a prefetch of instant ones, the long ones fill every slot, and the instant
    ones wait, claimed and leased, until a slot frees (``long_ms`` later). Each long job
    sleeps in one step, so one that was paused ends as soon as it resumes and its runner
    turns to the waiting ones at once. Answers once every long job started.
    """
    ids = h.enqueue(store, [h.work(0, max_attempts=max_attempts)] * warm)
    if not h.wait_until(_drained(store), 60, 0.05):
        return ids, False
    longs = h.enqueue(store, [
        *[h.work(long_ms, step=long_ms, priority=10, max_attempts=max_attempts)] * concurrency,
        *[h.work(0, max_attempts=max_attempts)] * quick,
    ])
    ids += longs

    def longs_started() -> bool:
        return all(_started(record, job_id, worker.pid) for job_id in longs[:concurrency])

    return ids, bool(h.wait_until(longs_started, 30, 0.02))


@dataclasses.dataclass
class PausePlan:
    """W1 SIGSTOPped for ``pause_leases`` leases, holding claimed jobs, while W2 drains; then SIGCONTed."""

    warm: int = 300
    quick: int = 1000
    long_ms: int = 2500
    lease: float = 2.0
    margin: float = 0.5
    pause_leases: float = 3.0
    concurrency: int = 2
    poll: float = 0.1
    latency: float = 0.002
    """Seconds a proxy adds each way between W1 and the store: a claim round trip longer than
    a job, so W1 claims ahead of its slots (on loopback PostgreSQL it hardly would)."""


def run_pause(store: h.Store, plan: PausePlan, workdir: Path) -> Report:
    """W1 runs long jobs in every slot and holds prefetched ones when it is paused for 3 leases."""
    record, logs = _dirs(workdir)
    fleet = h.Fleet(record, logs)
    began = time.monotonic()
    common = {"lease": plan.lease, "margin": plan.margin, "poll": plan.poll, "concurrency": plan.concurrency}
    notes: list[str] = []
    t_stop: float | None = None
    t_cont = NO_SECONDS
    held: set[tuple[str, int]] = set()
    enqueued: list[str] = []
    proxy = Proxy(*store.address, latency=plan.latency).start()
    try:
        w1 = fleet.spawn("W1", store.worker_url(proxy.port), **common)
        enqueued, ready = _hold_backlog(
            store, record, w1, warm=plan.warm, quick=plan.quick, long_ms=plan.long_ms, concurrency=plan.concurrency
        )
        if not ready:
            notes.append("W1 never held its long jobs: no pause injected")
        else:
            held = h.held_by(store, "W1")
            t_stop = fleet.pause(w1)
            fleet.spawn("W2", store.worker_url(), **common)
            time.sleep(max(0.0, t_stop + plan.pause_leases * plan.lease - time.monotonic()))
            t_cont = fleet.resume(w1)
            timeout = 6 * plan.lease + 60
            if not h.wait_until(_drained(store), timeout, 0.25):
                notes.append(f"jobs still live {timeout:.0f}s after the pause")
    finally:
        fleet.stop()
        proxy.close()
    report, runs = _finish("paused worker", store, fleet, record, enqueued, began)
    report.notes += notes
    if t_stop is not None:
        in_flight = [e for e in runs if e.pid == w1.pid and e.start < t_stop < e.until(fleet.deaths)]
        by_job: dict[str, list[Execution]] = {}
        for e in runs:
            by_job.setdefault(e.job_id, []).append(e)
        # Started after the resume under a claim W1 held before the pause (that lease lapsed
        # during it: F03), or under a claim older than one another execution had started.
        stale_after = [
            e for e in runs if e.pid == w1.pid and e.start >= t_cont and (
                (e.job_id, e.claim_no) in held
                or any(o.claim_no > e.claim_no and o.start <= e.start for o in by_job[e.job_id])
            )
        ]
        report.measures.update({
            "jobs W1 held when paused (running + claimed ahead)": len(held),
            "W1 executions in flight at the pause": len(in_flight),
            "pause s": t_cont - t_stop,
            "W1 started after resuming under a lost lease": len(stale_after),
            "W1 executions after resuming": sum(1 for e in runs if e.pid == w1.pid and e.start >= t_cont),
        })
    return report


# -- d. database restart, d2. primary failover -------------------------------------------


@dataclasses.dataclass
class OutagePlan:
    """Workers drain ``jobs`` quick jobs; once ``down_after`` of them are done, the store goes away."""

    jobs: int = 3000
    job_ms: int = 20
    workers: int = 3
    concurrency: int = 4
    lease: float = 15.0
    margin: float = 2.0
    down_after: float = 0.15
    """Fraction of the jobs done when the fault is injected."""
    poll: float = 0.2
    step_ms: int | None = None
    """How often a job checks whether it was called off (ms; its whole length when None)."""


@dataclasses.dataclass
class RestartPlan(OutagePlan):
    """The server stops for ``outage`` seconds mid-drain, then sessions are killed a few times."""

    outage: float = 10.0
    terminate_rounds: int = 3
    terminate_every: float = 1.0


@dataclasses.dataclass
class FailoverPlan(OutagePlan):
    """The primary is lost mid-drain; ``gap`` seconds later its synchronous standby is promoted."""

    gap: float = 2.0
    rejoin: bool = True
    """Then bring the old primary back as a standby, first in the URL, and kill the workers'
    sessions: they connect again, and must skip it."""


def _slowest(seconds: list[float]) -> float:
    """The largest of ``seconds``, NaN (a worker that never claimed again) above all."""
    return max(seconds, key=lambda x: math.inf if math.isnan(x) else x)


def _drain_through(
    store: h.Store, plan: OutagePlan, workdir: Path, fault: str, inject: Callable[[], tuple[float, dict[str, Any]]],
) -> Report:
    """Workers drain while ``inject()`` takes the store away and brings it back; it answers the
    store's return (monotonic) and its own measures. Measures every worker's first claim after
    that return, and after each moment ``inject`` names in its measures as ``"@ <what>"``."""
    record, logs = _dirs(workdir)
    fleet = h.Fleet(record, logs)
    began = time.monotonic()
    notes: list[str] = []
    t_down = NO_SECONDS
    t_up: float | None = None
    extra: dict[str, Any] = {}
    try:
        enqueued = h.enqueue(store, [h.work(plan.job_ms, step=plan.step_ms or plan.job_ms)] * plan.jobs)
        for n in range(plan.workers):
            fleet.spawn(
                f"W{n + 1}", store.worker_url(), concurrency=plan.concurrency, lease=plan.lease, margin=plan.margin,
                poll=plan.poll,
            )
        if not h.wait_until(lambda: _applied(record) >= plan.down_after * plan.jobs, 120, 0.05):
            notes.append(f"the workers never got going: no {fault} injected")
        else:
            t_down = time.monotonic()
            t_up, extra = inject()
            timeout = 4 * plan.lease + 120
            if not h.wait_until(_drained(store), timeout, 0.25):
                notes.append(f"jobs still live {timeout:.0f}s after the store came back")
            extra["every job done, s after the store came back"] = time.monotonic() - t_up
    finally:
        fleet.stop()
    report, runs = _finish(fault, store, fleet, record, enqueued, began)
    report.notes += notes
    if t_up is not None:
        recovery = [_first_after(runs, w.pid, t_up) for w in fleet.workers]
        report.measures.update({
            "store gone s (until it takes writes)": t_up - t_down,
            "each worker claims again, s after the store came back": recovery,
            "slowest worker to claim again s": _slowest(recovery),
            "jobs done before the fault": sum(1 for e in runs if e.effect == "applied" and (e.end or 0) < t_down),
        })
        for name, value in extra.items():
            if name.startswith("@ "):  # a later moment: when each worker claimed again after it
                after = [_first_after(runs, w.pid, value) for w in fleet.workers]
                report.measures[f"slowest worker to claim again after {name[2:]}, s"] = _slowest(after)
            else:
                report.measures[name] = value
    return report


def _terminate_workers(url: str) -> int:
    """pg_terminate_backend on every worker session of the server at ``url``; answers how many were killed."""
    import psycopg  # noqa: PLC0415 - PostgreSQL only

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (h.WORKER_APP,)
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


def run_restart(store: h.Store, plan: RestartPlan, workdir: Path) -> Report:
    """Workers drain while the store stops, restarts and (PostgreSQL) has their sessions killed."""
    server = store.server
    if server is None:
        raise ValueError("the restart scenario needs a server of its own (own_postgres / own_mongo)")

    def inject() -> tuple[float, dict[str, Any]]:
        t_down = time.monotonic()
        server.stop(remove=False)
        time.sleep(max(0.0, t_down + plan.outage - time.monotonic()))
        server.start()
        t_up = time.monotonic()  # start() answers once the server accepts connections
        killed = []
        if store.kind == "postgres":
            for _ in range(plan.terminate_rounds):
                time.sleep(plan.terminate_every)
                killed.append(_terminate_workers(server.url))
        return t_up, {"sessions killed per round": killed}

    return _drain_through(store, plan, workdir, "database restart", inject)


@dataclasses.dataclass
class StandbyLostPlan(OutagePlan):
    """The synchronous standby is gone for ``outage`` seconds mid-drain: every commit on the
    primary waits for it. Longer than ``call_timeout`` (10 s), so calls meet their bound;
    shorter than the lease less the margin, so no settle may be lost to it (F05)."""

    outage: float = 11.0
    lease: float = 20.0


def run_standby_lost(store: h.Store, plan: StandbyLostPlan, workdir: Path) -> Report:
    """Workers drain over a primary and its synchronous standby; the standby stops for
    ``outage`` seconds, then starts again. Meanwhile the primary commits each write and holds
    it, locks and all, until a standby confirms it, so every write waits; an enqueue tried
    from this process then is answered when its bound passes or the standby is back: its
    answer is in ``measures`` (``enqueue while the standby was gone``)."""
    import psycopg  # noqa: PLC0415 - PostgreSQL only

    pair = store.server
    if pair is None or not hasattr(pair, "standby"):
        raise ValueError("the standby scenario needs a primary and a standby of its own (own_postgres_pair)")

    def inject() -> tuple[float, dict[str, Any]]:
        t_gone = time.monotonic()
        pair.standby.stop(remove=False)
        answer: list[str] = []

        def enqueue() -> None:
            try:
                store.driver.enqueue_many([h.work(plan.job_ms)])
                answer.append("stored")
            except JobcoreError as exc:
                answer.append(f"{exc.code}: {exc.cause} (fix: {exc.fix})")

        producer = threading.Thread(target=enqueue, daemon=True)
        producer.start()
        time.sleep(max(0.0, t_gone + plan.outage - time.monotonic()))
        with psycopg.connect(pair.primary.url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
        pair.standby.start()
        t_up = time.monotonic()
        producer.join(30)
        return t_up, {
            "commits held for the standby when it came back": row[0] if row else 0,
            "enqueue while the standby was gone": answer[0] if answer else "no answer",
        }

    return _drain_through(store, plan, workdir, "synchronous standby lost", inject)


@dataclasses.dataclass
class SlotsPlan(OutagePlan):
    """Other connections hold every slot the workers' role may have for ``outage`` seconds."""

    outage: float = 5.0
    others: int = 3
    """Connections the others hold: the role's ``CONNECTION LIMIT`` while they do."""


SLOT_REFUSAL = "too many connections for role"
"""What the server logs (and answers) for each connection a role at its limit tries."""


def run_slots_taken(store: h.Store, plan: SlotsPlan, workdir: Path) -> Report:
    """Workers drain as a role that is no superuser; mid-drain other connections of that role
    hold every slot its ``CONNECTION LIMIT`` allows and the workers' sessions are killed, so
    each connection a worker tries is refused ("too many connections for role"), as when
    another fleet or an application holds them. After ``outage`` seconds the others close and
    the limit is lifted. Measures the refusals the server logged meanwhile, per worker per second."""
    import psycopg  # noqa: PLC0415 - PostgreSQL only
    from psycopg import sql  # noqa: PLC0415

    server = store.server
    role = urlsplit(store.url).username
    if server is None or not role or store.kind != "postgres":
        raise ValueError("the slots scenario needs a PostgreSQL server of its own and a role (own_postgres_as_app)")
    log = Path(server.root) / "server.log"
    limit = sql.SQL("ALTER ROLE {} CONNECTION LIMIT {}")

    def refusals() -> int:
        return log.read_bytes().count(SLOT_REFUSAL.encode())

    def inject() -> tuple[float, dict[str, Any]]:
        with psycopg.connect(server.url, autocommit=True) as admin:
            others = [psycopg.connect(store.url.partition("?")[0]) for _ in range(plan.others)]
            try:
                admin.execute(limit.format(sql.Identifier(role), plan.others))
                before, t_taken = refusals(), time.monotonic()
                killed = _terminate_workers(server.url)
                time.sleep(max(0.0, t_taken + plan.outage - time.monotonic()))
                refused, held = refusals() - before, time.monotonic() - t_taken
            finally:
                for conn in others:
                    conn.close()
                admin.execute(limit.format(sql.Identifier(role), -1))
        return time.monotonic(), {
            "worker sessions killed": killed,
            "connections refused for want of a slot, per worker per second": refused / held / plan.workers,
        }

    return _drain_through(store, plan, workdir, "connection slots taken", inject)


@dataclasses.dataclass
class RowLockPlan(OutagePlan):
    """Another session holds the rows of ``rows`` running jobs locked for ``outage`` seconds."""

    outage: float = 15.0
    rows: int = 2
    lease: float = 6.0
    margin: float = 1.5


def run_row_locked(store: h.Store, plan: RowLockPlan, workdir: Path) -> Report:
    """Workers drain while another session (an operator's ``SELECT ... FOR UPDATE`` left open
    in psql, a bulk ``UPDATE``) holds the rows of ``plan.rows`` running jobs, longer than their
    lease. Measures which jobs were locked, and the executions called off or run again of
    jobs that were not locked: one locked row must hold back no other job."""
    import psycopg  # noqa: PLC0415 - PostgreSQL only
    from psycopg import sql  # noqa: PLC0415

    if store.kind != "postgres":
        raise ValueError("the row-lock scenario holds PostgreSQL rows")
    schema = store.driver.schema
    locked: list[str] = []

    def inject() -> tuple[float, dict[str, Any]]:
        pick = sql.SQL("SELECT id FROM {} WHERE state = 'running' AND NOT held ORDER BY id LIMIT %s FOR UPDATE")
        with psycopg.connect(store.url.partition("?")[0], connect_timeout=5) as conn:
            deadline = time.monotonic() + 30
            while len(locked) < plan.rows and time.monotonic() < deadline:  # started jobs, running now
                conn.rollback()
                locked[:] = [str(row[0]) for row in conn.execute(
                    pick.format(sql.Identifier(schema, "jobs")), (plan.rows,)
                ).fetchall()]
                if len(locked) < plan.rows:
                    time.sleep(0.02)
            time.sleep(plan.outage)
            conn.rollback()
        return time.monotonic(), {"jobs whose rows were locked": list(locked)}

    report = _drain_through(store, plan, workdir, "rows locked by another session", inject)
    others = [e for e in read_record(_dirs(workdir)[0]) if e.job_id not in locked]
    again = {line.split()[1] for line in report.figures.details.get("completed_run_again", [])}
    report.measures["completed jobs run again, locked jobs aside"] = len(again - set(locked))
    report.measures["executions called off, locked jobs aside"] = sum(1 for e in others if e.outcome == "called_off")
    return report


@dataclasses.dataclass
class DiskPlan(OutagePlan):
    """The disk the jobs live on is full for ``outage`` seconds mid-drain."""

    outage: float = 5.0
    refused_batch: int = 200
    """Jobs of the enqueue tried while the disk is full (a batch, so it needs new pages)."""


def run_disk_full(store: h.Store, plan: DiskPlan, workdir: Path) -> Report:
    """Workers drain while the disk holding the jobs' tables is full (``store.disk``, a
    :class:`~tests.faults.harness.SmallDisk`), then has room again. Meanwhile an enqueue of
    ``refused_batch`` jobs is tried from this process: its answer is in ``measures``
    (``enqueue while the disk was full``); nothing of it may be stored."""
    disk = store.disk
    if disk is None:
        raise ValueError("the disk scenario needs the jobs on a disk of its own (own_postgres_on_small_disk)")

    def inject() -> tuple[float, dict[str, Any]]:
        t_full = time.monotonic()
        disk.fill()
        try:
            store.driver.enqueue_many([h.work(plan.job_ms)] * plan.refused_batch)
            refused = "stored"
        except JobcoreError as exc:
            refused = f"{exc.code}: {exc.cause}"
        time.sleep(max(0.0, t_full + plan.outage - time.monotonic()))
        disk.free()
        return time.monotonic(), {"disk filled by": disk.kind, "enqueue while the disk was full": refused}

    return _drain_through(store, plan, workdir, "full disk", inject)


def run_failover(store: h.Store, plan: FailoverPlan, workdir: Path) -> Report:
    """Workers drain over a URL listing a primary and its standby; the primary crashes, the standby is promoted.

    Between the two, an enqueue is tried from this process (up to three times: the first
    may meet its pooled connection lost with the primary): its last coded refusal is in
    ``measures`` (``enqueue while no host takes writes``), and nothing of it may be stored.
    With ``plan.rejoin`` the old primary then comes back as a standby, first in the URL,
    and the workers' sessions are killed: every one of them connects again.
    """
    pair = store.server
    if pair is None or not hasattr(pair, "promote"):
        raise ValueError("the failover scenario needs a primary and a standby of its own (own_postgres_pair)")

    def inject() -> tuple[float, dict[str, Any]]:
        t_down = time.monotonic()
        pair.crash_primary()
        refused = "not tried"
        for _ in range(3):  # the first call may meet its pooled connection lost with the primary
            try:
                store.driver.enqueue_many([h.work(plan.job_ms)])
                refused = "stored"
            except JobcoreError as exc:
                refused = f"{exc.code}: {exc.cause}"
            if "takes writes" in refused or refused == "stored":
                break
        time.sleep(max(0.0, t_down + plan.gap - time.monotonic()))
        pair.promote()
        t_up = time.monotonic()
        measures: dict[str, Any] = {"enqueue while no host takes writes": refused}
        if plan.rejoin:
            pair.rejoin()
            measures["old primary back as a standby, s after the promotion"] = time.monotonic() - t_up
            measures["@ their sessions were killed"] = time.monotonic()
            measures["worker sessions killed then"] = _terminate_workers(pair.standby.url)
        return t_up, measures

    return _drain_through(store, plan, workdir, "primary failover", inject)


# -- e. killed worker --------------------------------------------------------------------


@dataclasses.dataclass
class KillPlan:
    """W1 SIGKILLed while it holds claimed, unstarted one-attempt jobs; then a poison job."""

    warm: int = 300
    quick: int = 500
    long_ms: int = 2000
    concurrency: int = 2
    lease: float = 2.0
    margin: float = 0.5
    poison_attempts: int = 2
    poll: float = 0.1
    latency: float = 0.002
    """As :attr:`PausePlan.latency`."""


def run_kill(store: h.Store, plan: KillPlan, workdir: Path) -> Report:
    """SIGKILL W1 holding prefetched max_attempts=1 jobs, W2 finishes; a poison job kills its workers."""
    record, logs = _dirs(workdir)
    fleet = h.Fleet(record, logs)
    began = time.monotonic()
    common = {"lease": plan.lease, "margin": plan.margin, "poll": plan.poll, "concurrency": plan.concurrency}
    notes: list[str] = []
    held: set[tuple[str, int]] = set()
    poison_id = ""
    enqueued: list[str] = []
    proxy = Proxy(*store.address, latency=plan.latency).start()
    try:
        w1 = fleet.spawn("K1", store.worker_url(proxy.port), **common)
        enqueued, ready = _hold_backlog(
            store, record, w1, warm=plan.warm, quick=plan.quick, long_ms=plan.long_ms, concurrency=plan.concurrency,
            max_attempts=1,
        )
        if not ready:
            notes.append("K1 never held its long jobs: no kill injected")
        else:
            held = h.held_by(store, "K1")
            fleet.kill(w1)
            fleet.spawn("K2", store.worker_url(), **common)
            timeout = 6 * plan.lease + 60
            if not h.wait_until(_drained(store), timeout, 0.25):
                notes.append(f"jobs still live {timeout:.0f}s after the kill")
            spec = JobSpec(name="fault.poison", queue=h.QUEUE, payload={}, max_attempts=plan.poison_attempts)
            poison_id = h.enqueue(store, [spec])[0]
            enqueued.append(poison_id)
            deadline = time.monotonic() + plan.poison_attempts * (3 * plan.lease + 15) + 30
            replaced = 2
            while time.monotonic() < deadline:
                for _ in fleet.reap():
                    replaced += 1
                    fleet.spawn(f"K{replaced}", store.worker_url(), **common)
                job = store.driver.introspect.get(poison_id)
                if job is not None and str(job.state) in ("dead", "failed", "done", "cancelled"):
                    break
                time.sleep(0.1)
            else:
                notes.append("the poison job was never buried")
    finally:
        fleet.stop()
        proxy.close()
    report, runs = _finish("killed worker", store, fleet, record, enqueued, began)
    report.notes += notes
    report.measures["jobs K1 held when killed (running + claimed ahead)"] = len(held)
    if poison_id:
        poison = store.driver.introspect.get(poison_id)
        report.measures.update({
            "poison job state": str(poison.state) if poison else "missing",
            "poison job attempts (of max)": f"{poison.attempt if poison else '-'} of {plan.poison_attempts}",
            "poison job runs": sum(1 for e in runs if e.job_id == poison_id),
            "workers the poison job killed": sum(1 for e in runs if e.job_id == poison_id and e.outcome == "killed"),
        })
    return report
