"""Plumbing for the fault scenarios: stores, worker processes, faketime, waiting, final rows.

Used by the pytest scenarios (tests/faults/test_*.py) and by ``bench/faults.py`` alike, so
it imports nothing from pytest at module level and asserts nothing: scenarios measure,
tests judge.

* :class:`Store`: one isolated store (a PostgreSQL schema or a MongoDB database) with a
  driver in this process (on the real clock), the URL worker processes use, and, for a
  server the scenario started itself (:func:`own_postgres`, :func:`own_mongo`), a way to
  stop and start that server.
* :class:`Fleet`: real ``python -m jobcore.cli worker`` processes running
  :mod:`tests.faults.fault_jobs`, each optionally under ``faketime``, that the scenario
  can SIGSTOP, SIGCONT, SIGKILL and replace. It passes ``--margin`` only where the
  jobcore under test has it (:func:`margin_supported`), so the same scenarios measure an
  older tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import jobcore
from jobcore.clock import SystemClock
from jobcore.records import Job, JobFilter, JobSpec

__all__ = [
    "JOBS_MODULE", "QUEUE", "Fleet", "Store", "WorkerProc", "all_jobs", "enqueue", "faketime_missing",
    "margin_supported", "own_mongo", "own_postgres", "require_faketime", "skewed_env", "store_from_driver",
    "wait_until", "worker_env",
]

HERE = Path(__file__).resolve().parent
JOBS_MODULE = HERE / "fault_jobs.py"
SKEW_CLIENT = HERE / "skew_client.py"
FAKETIME_SITE = HERE / "faketime_site"
QUEUE = "faults"
PAGE = 200
"""Rows per ``introspect.list`` page (the most it answers)."""
WORKER_APP = "jc_fault_worker"
"""PostgreSQL ``application_name`` of the workers' sessions (what pg_terminate_backend picks)."""


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it answers something true (answered) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = predicate()
        except Exception:  # a store call during an outage: keep waiting
            answer = None
        if answer:
            return answer
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


# -- the processes' environment ----------------------------------------------------------


def _holds_jobcore(entry: str) -> Path | None:
    candidate = Path(entry or ".") / "jobcore"
    return candidate.resolve() if candidate.is_dir() else None


def worker_env(record_dir: Path, *, skewed: bool = False, **extra: str) -> dict[str, str]:
    """The environment of worker and client processes: the jobcore this process imported,
    the record directory, and monotonic time left alone by faketime (``skewed``: with the
    start-up shim ``faketime_site/sitecustomize.py`` that works around libfaketime's sleeps)."""
    own = Path(jobcore.__file__).resolve().parent
    # Keep every sys.path entry except one holding a different jobcore (a bench running an
    # older tree's jobcore must not hand its workers this tree's): workers run the jobcore
    # under test, whatever the current directory.
    path = [p for p in sys.path if _holds_jobcore(p) in (None, own)]
    if skewed:
        path.insert(0, str(FAKETIME_SITE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "FAULT_RECORD_DIR": str(record_dir)}
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    env.update(extra)
    return env


@functools.lru_cache(maxsize=4)
def _worker_help(executable: str) -> str:
    env = worker_env(Path(tempfile.gettempdir()))
    done = subprocess.run(
        [executable, "-m", "jobcore.cli", "worker", "--help"], capture_output=True, text=True, env=env,
        cwd=tempfile.gettempdir(), timeout=60, check=False,
    )
    return done.stdout


def margin_supported() -> bool:
    """Whether ``jobcore worker`` (the jobcore under test) takes ``--margin``."""
    return "--margin" in _worker_help(sys.executable)


def libfaketime() -> str | None:
    """Path of libfaketime (Debian's ``faketime`` package brings it), or None."""
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                    "/usr/local/lib/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def faketime_missing() -> str | None:
    """Why processes cannot be run under a skewed clock here, or None when they can."""
    if libfaketime() is None:
        return "Debian's faketime is not installed (apt-get install faketime): no libfaketime.so.1"
    return None


def require_faketime() -> None:
    """Skip the calling test when libfaketime is missing, naming the package; under
    ``CI=true`` fail instead (CI installs it: ``bash dev test`` as root)."""
    import pytest  # noqa: PLC0415 - only tests call this; the bench checks faketime_missing()

    why = faketime_missing()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; under CI=true the clock-skew scenario must run (`bash dev test` installs it as root)",
                    pytrace=False)
    pytest.skip(why)


def skewed_env(env: dict[str, str], offset: str | None) -> dict[str, str]:
    """``env`` with the wall clock off by ``offset`` (e.g. ``+1h``), as ``faketime -f OFFSET`` sets it.

    libfaketime is preloaded directly rather than through the ``faketime`` wrapper, which
    forks: the worker is then this test's own child, so its pid is the record's and
    signals reach it. Monotonic time stays real (``FAKETIME_DONT_FAKE_MONOTONIC=1``).
    """
    if offset is None:
        return env
    lib = libfaketime()
    if lib is None:
        raise RuntimeError(faketime_missing())
    preload = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    return {**env, "LD_PRELOAD": preload, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


# -- stores ------------------------------------------------------------------------------


def _with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in options]
    return urlunsplit(parts._replace(query=urlencode([*query, *options.items()])))


@dataclasses.dataclass
class Store:
    """One isolated store: a driver here, the URL workers use, the server's address.

    Attributes:
        kind: ``postgres`` or ``mongo``.
        driver: A driver in this process, on the real clock (the correct client).
        url: Reaches the same schema/database from another process.
        server: The scenario's own server (``stop()``/``start()``), or None for a shared one.
    """

    kind: str
    driver: Any
    url: str
    server: Any = None
    disk: Any = None
    """The :class:`SmallDisk` the jobs live on (:func:`own_postgres_on_small_disk`), else None."""
    cleanups: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        assert parts.hostname is not None
        assert parts.port is not None
        return parts.hostname, parts.port

    def worker_url(self, port: int | None = None, host: str = "127.0.0.1") -> str:
        """The URL a worker process uses, through ``host:port`` (a proxy) when given."""
        url = self.url
        if port is not None:
            parts = urlsplit(url)
            auth = parts.netloc.rpartition("@")[0]
            url = urlunsplit(parts._replace(netloc=f"{auth + '@' if auth else ''}{host}:{port}"))
        if self.kind == "postgres":
            url = _with_query(url, application_name=WORKER_APP)
        return url

    def close(self) -> None:
        for fn in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                fn()
        self.cleanups.clear()


def store_from_driver(driver: Any) -> Store:
    """A store around a driver the test suite made (shared server, isolated schema/database)."""
    kind = {"PostgresDriver": "postgres", "MongoDriver": "mongo"}.get(type(driver).__name__)
    if kind is None:
        raise ValueError(f"no fault scenarios for {type(driver).__name__}")
    return Store(kind=kind, driver=driver, url=str(driver.url))


def _bindir() -> str:
    from fixtures.postgres import find_binaries  # noqa: PLC0415 - fixtures/ is a test-tree package

    bindir = find_binaries()
    if bindir is None:
        raise RuntimeError("no initdb/postgres binaries for a server of the scenario's own")
    return bindir


def _postgres_store(server: Any, url: str) -> Store:
    """A migrated schema of its own at ``url`` on ``server`` (started: stopped again if this fails)."""
    from jobcore.drivers.postgres import PostgresDriver  # noqa: PLC0415

    try:
        driver = PostgresDriver.from_url(f"{url}?schema=jc_fault_{uuid.uuid4().hex[:8]}", clock=SystemClock())
        driver.migrate()
    except Exception:
        server.stop()
        raise
    store = Store(kind="postgres", driver=driver, url=str(driver.url), server=server)
    store.cleanups += [server.stop, driver.close]
    return store


OTHER_DEFAULTS: Final = {
    "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard", "TimeZone": "Asia/Kolkata",
    "client_encoding": "LATIN1", "default_transaction_isolation": "repeatable read", "extra_float_digits": "-15",
}
"""Server settings every session defaults to that jobcore's statements do not read (see
docs/drivers/postgres.md "Session defaults"): :func:`own_postgres` takes them."""


def own_postgres(**defaults: str) -> Store:
    """A PostgreSQL server of this scenario's own (it may stop and restart it), one schema in
    it; ``defaults`` are server settings (``-c name=value``, as ``postgresql.conf`` would set
    them: every session's defaults)."""
    from fixtures.postgres import LocalServer  # noqa: PLC0415 - fixtures/ is a test-tree package

    extra = tuple(part for name, value in defaults.items() for part in ("-c", f"{name}={value}"))
    server = LocalServer(_bindir(), extra=extra).start()
    return _postgres_store(server, server.url)


APP_ROLE: Final = "jc_app"
"""The login role :func:`own_postgres_as_app` gives the driver and the workers."""


def own_postgres_as_app() -> Store:
    """:func:`own_postgres`, with the driver and the workers connecting as :data:`APP_ROLE`, a
    login role that is no superuser (a superuser passes a role's ``CONNECTION LIMIT``); it owns
    the schema. ``server.url`` stays the superuser's."""
    import psycopg  # noqa: PLC0415 - PostgreSQL only

    from fixtures.postgres import LocalServer  # noqa: PLC0415 - fixtures/ is a test-tree package

    server = LocalServer(_bindir()).start()
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
            conn.execute(f"GRANT CREATE ON DATABASE postgres TO {APP_ROLE}")
    except Exception:
        server.stop()
        raise
    parts = urlsplit(server.url)
    return _postgres_store(server, urlunsplit(parts._replace(netloc=f"{APP_ROLE}@{parts.netloc.rpartition('@')[2]}")))


class SmallDisk:
    """A disk the jobs' tables can fill: ``fill()`` leaves it no room, ``free()`` gives it back.

    As root (a CI machine), a tmpfs of ``size_mb`` is mounted for the scenario and holds the
    tablespace of the database the store uses: PostgreSQL then meets a real full disk
    (``could not extend file ...: No space left on device``, SQLSTATE 53100) on every write
    that needs a new page, while its WAL, elsewhere, goes on. Where mounting is refused, a
    trigger on the store's jobs table raises that error on every insert and update instead
    (:attr:`kind` says which).
    """

    def __init__(self, server: Any, size_mb: int = 64) -> None:
        self.server = server
        self.size_mb = size_mb
        self.mount = tempfile.mkdtemp(prefix="jobcore-disk-")
        self.filler = os.path.join(self.mount, "filler")
        self.kind = "trigger"
        self.schema = ""

    def prepare(self) -> str:
        """Mount and set up the tablespace where that is allowed; answers the URL to use."""
        import psycopg  # noqa: PLC0415 - PostgreSQL only

        mounted = self.server.user is not None and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", self.mount],
            capture_output=True, check=False,
        ).returncode == 0
        if not mounted:
            return str(self.server.url)
        self.kind = "tmpfs"
        space = os.path.join(self.mount, "space")
        os.mkdir(space)
        shutil.chown(self.mount, user=self.server.user)
        shutil.chown(space, user=self.server.user)
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE jc_small LOCATION '{space}'")
            conn.execute("CREATE DATABASE jc_small TABLESPACE jc_small")
        return str(self.server.url).rpartition("/")[0] + "/jc_small"

    def arm(self, store: Store) -> None:
        """Without a tmpfs: the trigger that plays the full disk on ``store``'s jobs table."""
        if self.kind != "trigger":
            return
        import psycopg  # noqa: PLC0415 - PostgreSQL only

        self.schema = store.driver.schema
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(f'CREATE TABLE "{self.schema}".jc_disk_full (armed boolean)')
            conn.execute(
                f'CREATE FUNCTION "{self.schema}".jc_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
                f'IF EXISTS (SELECT 1 FROM "{self.schema}".jc_disk_full) THEN RAISE EXCEPTION '
                "'could not extend file \"base/5/16385\": No space left on device' USING ERRCODE = 'disk_full', "
                "HINT = 'Check free disk space.'; END IF; RETURN NEW; END $$"
            )
            conn.execute(
                f'CREATE TRIGGER jc_disk_full BEFORE INSERT OR UPDATE ON "{self.schema}".jobs '
                f'FOR EACH ROW EXECUTE FUNCTION "{self.schema}".jc_disk_full()'
            )

    def _trigger(self, full: bool) -> None:
        import psycopg  # noqa: PLC0415 - PostgreSQL only

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{self.schema}".jc_disk_full')
            if full:
                conn.execute(f'INSERT INTO "{self.schema}".jc_disk_full VALUES (true)')

    def fill(self) -> None:
        """Leave no room: write a file until the tmpfs refuses (or arm the trigger)."""
        if self.kind == "trigger":
            self._trigger(True)
            return
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                os.write(fd, chunk)
        except OSError:  # ENOSPC: the disk is full (the last partial write filled it)
            pass
        finally:
            os.close(fd)

    def free(self) -> None:
        """Give the room back."""
        if self.kind == "trigger":
            self._trigger(False)
        else:
            os.unlink(self.filler)

    def release(self) -> None:
        """Unmount (after the server stopped) and remove the mount point."""
        if self.kind == "tmpfs":
            subprocess.run(["umount", "-l", self.mount], capture_output=True, check=False)
        shutil.rmtree(self.mount, ignore_errors=True)


def own_postgres_on_small_disk() -> Store:
    """:func:`own_postgres`, the store's jobs on a :class:`SmallDisk` (``store.disk``)."""
    from fixtures.postgres import LocalServer  # noqa: PLC0415 - fixtures/ is a test-tree package

    server = LocalServer(_bindir()).start()
    disk = SmallDisk(server)
    try:
        url = disk.prepare()
    except Exception:
        server.stop()
        disk.release()
        raise
    try:
        store = _postgres_store(server, url)  # stops the server if it fails
    except Exception:
        disk.release()
        raise
    try:
        disk.arm(store)
    except Exception:
        store.close()  # the driver and the server
        disk.release()
        raise
    store.disk = disk
    store.cleanups.insert(0, disk.release)  # cleanups run last first: after the server stopped
    return store


def own_postgres_pair() -> Store:
    """A primary and a synchronous standby of this scenario's own (``server`` is the
    :class:`~fixtures.postgres.StandbyPair`), one schema; the URL lists both hosts, the
    primary first, and leaves ``target_session_attrs`` to the driver."""
    from fixtures.postgres import StandbyPair  # noqa: PLC0415 - fixtures/ is a test-tree package

    pair = StandbyPair(_bindir())
    try:
        pair.start()
    except Exception:
        pair.stop()
        raise
    return _postgres_store(pair, pair.url())


def own_postgres_through_pgbouncer(**settings: str) -> Store:
    """:func:`own_postgres` with PgBouncer (transaction pooling, its defaults but ``settings``)
    in front: the driver and the workers go through it, wake-ups over the server itself."""
    from jobcore.drivers.postgres import PostgresDriver  # noqa: PLC0415

    from fixtures.pgbouncer import Bouncer, find_pgbouncer  # noqa: PLC0415 - fixtures/ is a test-tree package

    binary = find_pgbouncer()
    if binary is None:
        raise RuntimeError("no pgbouncer binary (apt-get install pgbouncer)")
    direct = own_postgres()
    try:
        bouncer = Bouncer(binary, direct.server.url, settings=settings).start()
        direct.cleanups.append(bouncer.stop)
        driver = PostgresDriver(bouncer.url, schema=direct.driver.schema, clock=SystemClock(),
                                listen_url=direct.server.url)
    except Exception:
        direct.close()
        raise
    direct.cleanups.append(driver.close)
    return Store(kind="postgres", driver=driver, url=str(driver.url), server=direct.server, cleanups=direct.cleanups)


class SecantusServer:
    """The MongoDB-wire test server on a fixed port and storage directory: ``stop()``, ``start()``."""

    def __init__(self) -> None:
        from fixtures.mongo import free_port  # noqa: PLC0415

        self.port = free_port()
        self.storage = tempfile.mkdtemp(prefix="jobcore-fault-secantus-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> SecantusServer:
        from fixtures.mongo import start_secantus  # noqa: PLC0415

        self.proc, _, _ = start_secantus(self.port, self.storage)
        return self

    def stop(self, *, remove: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if remove:
            shutil.rmtree(self.storage, ignore_errors=True)


def own_mongo() -> Store:
    """A MongoDB-wire server of this scenario's own (secantusd-py, or ``mongod`` when on PATH)."""
    from jobcore.drivers.mongo import MongoDriver  # noqa: PLC0415

    server = SecantusServer().start()
    try:
        driver = MongoDriver(
            f"mongodb://127.0.0.1:{server.port}/jc_fault_{uuid.uuid4().hex[:8]}?directConnection=true",
            clock=SystemClock(),
        )
        driver.migrate()
    except Exception:
        server.stop(remove=True)
        raise
    store = Store(kind="mongo", driver=driver, url=str(driver.url), server=server)
    store.cleanups += [functools.partial(server.stop, remove=True), driver.close]
    return store


def enqueue(store: Store, specs: list[JobSpec], batch: int = 1000) -> list[str]:
    """Enqueue ``specs`` in batches; answers their ids in order."""
    ids: list[str] = []
    for start in range(0, len(specs), batch):
        ids += [job.id for job in store.driver.enqueue_many(specs[start:start + batch])]
    return ids


def work(ms: int, *, step: int = 50, max_attempts: int | None = None, **options: Any) -> JobSpec:
    """A ``fault.work`` job sleeping ``ms`` milliseconds in steps of ``step``."""
    return JobSpec(name="fault.work", queue=QUEUE, payload={"ms": ms, "step": step}, max_attempts=max_attempts,
                   **options)


def all_jobs(store: Store) -> list[Job]:
    """Every job of the scenario's queue, as the store has it now."""
    return _listed(store, JobFilter(queue=QUEUE))


def _listed(store: Store, where: JobFilter) -> list[Job]:
    jobs: list[Job] = []
    page = store.driver.introspect.list(where, limit=PAGE)
    jobs.extend(page.jobs)
    while page.after is not None:
        page = store.driver.introspect.list(where, limit=PAGE, after=page.after)
        jobs.extend(page.jobs)
    return jobs


def live_count(store: Store) -> int:
    """Jobs of the scenario's queue not finished yet (ready, scheduled, running, suspended)."""
    stats = store.driver.introspect.stats()
    return sum(stats.count(state, QUEUE) for state in ("ready", "scheduled", "running", "suspended"))


def held_by(store: Store, worker_id: str) -> set[tuple[str, int]]:
    """``(job id, claim_no)`` of the jobs ``running`` under ``worker_id`` now (started or claimed ahead)."""
    running = _listed(store, JobFilter(queue=QUEUE, state="running"))
    return {(job.id, job.claim_no) for job in running if job.worker_id == worker_id}


# -- worker processes --------------------------------------------------------------------


def _death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when the scenario's process dies, so
    an interrupted run leaves no worker behind. The libc function is looked up here, in the
    parent: the child, forked from a process with threads, only makes the one call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # noqa: PLC0415

        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_DIE_WITH_PARENT = _death_signal()


@dataclasses.dataclass
class WorkerProc:
    """One worker process the fleet started."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"    {self.name}| {line}" for line in text[-lines:])


class Fleet:
    """Worker processes over one store, run with the fault jobs module; stopped by :meth:`stop`.

    ``deaths`` maps the pid of every worker that died (killed by the scenario, or by its
    own poison job) to the monotonic time it died, as :func:`tests.faults.record.analyze`
    wants it.
    """

    def __init__(self, record_dir: Path, log_dir: Path) -> None:
        self.record_dir, self.log_dir = record_dir, log_dir
        self.workers: list[WorkerProc] = []
        self.deaths: dict[int, float] = {}
        self.margin = margin_supported()
        self.notes: list[str] = []
        if not self.margin:
            self.notes.append("this jobcore's worker has no --margin: ran without one")
        self._count = 0

    def spawn(
        self, name: str, url: str, *, concurrency: int = 2, lease: float = 6.0, margin: float | None = None,
        poll: float = 0.2, rescue: float = 1.0, drain: float = 5.0, clock_offset: str | None = None,
    ) -> WorkerProc:
        """Start ``jobcore worker`` (its wall clock off by ``clock_offset``, e.g. ``+1h``, when given)."""
        self._count += 1
        log = self.log_dir / f"worker-{self._count}-{name}.log"
        cmd = [
            sys.executable, "-m", "jobcore.cli", "worker", str(JOBS_MODULE),
            "--url", url, "--queues", QUEUE, "--concurrency", str(concurrency), "--lease", f"{lease:g}",
            "--poll-interval", f"{poll:g}", "--rescue-interval", f"{rescue:g}", "--drain-timeout", f"{drain:g}",
            "--log-level", "WARNING", "--worker-id", name, "--no-prune", "--no-scheduler",
        ]
        if margin is not None and self.margin:
            cmd[cmd.index("--poll-interval"):cmd.index("--poll-interval")] = ["--margin", f"{margin:g}"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.log_dir,
                preexec_fn=_DIE_WITH_PARENT,  # noqa: PLW1509 - one prctl call, looked up before the fork
                env=skewed_env(worker_env(self.record_dir, skewed=clock_offset is not None), clock_offset),
            )
        worker = WorkerProc(name, proc, log, time.monotonic())
        self.workers.append(worker)
        return worker

    def kill(self, worker: WorkerProc) -> float:
        """SIGKILL ``worker``; answers (and records) when it died."""
        worker.proc.send_signal(signal.SIGKILL)
        died = time.monotonic()
        worker.proc.wait()
        self.deaths[worker.pid] = died
        return died

    def pause(self, worker: WorkerProc) -> float:
        worker.proc.send_signal(signal.SIGSTOP)
        return time.monotonic()

    def resume(self, worker: WorkerProc) -> float:
        worker.proc.send_signal(signal.SIGCONT)
        return time.monotonic()

    def reap(self) -> list[WorkerProc]:
        """Workers that exited by themselves since the last call (their deaths recorded)."""
        gone = []
        for worker in self.workers:
            if worker.pid not in self.deaths and worker.proc.poll() is not None:
                self.deaths[worker.pid] = time.monotonic()
                gone.append(worker)
        return gone

    def alive(self) -> list[WorkerProc]:
        return [w for w in self.workers if w.proc.poll() is None]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (drain) every live worker; SIGKILL what is still there after ``timeout``."""
        live = self.alive()
        for worker in live:
            worker.proc.send_signal(signal.SIGCONT)  # a paused one must run to drain
            worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for worker in live:
            try:
                worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(worker)

    def tails(self, lines: int = 10) -> str:
        return "\n".join(w.tail(lines) for w in self.workers)

    @contextlib.contextmanager
    def running(self) -> Iterator[Fleet]:
        try:
            yield self
        finally:
            self.stop()


def skew_client(store: Store, record_dir: Path, offset: str, *args: str) -> Any:
    """Run ``skew_client.py`` with its wall clock off by ``offset``; answers its JSON output."""
    done = subprocess.run(
        [sys.executable, str(SKEW_CLIENT), store.worker_url(), *args],
        capture_output=True, text=True, env=skewed_env(worker_env(record_dir, skewed=True), offset),
        cwd=str(record_dir), timeout=120, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"skew client {args} under {offset} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
