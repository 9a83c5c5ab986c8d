"""jobcore under the roles docs/deploy.md prescribes: an owner that migrates, a worker role with data rights only.

The grants are read from docs/deploy.md itself (the ``grants:setup`` and ``grants:worker``
blocks), so the page and what is tested cannot drift. Every long-running command and
every CLI read and verb then runs as real processes under the worker role; the test
fails if a CLI command exists that it does not run.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from fixtures import postgres as fx
from jobcore import cli
from jobcore.current import connect
from jobcore.records import JobState

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy.md"
WAIT = 30.0

JOBS = textwrap.dedent(
    """
    from datetime import timedelta
    from jobcore import every, job

    @job(name="fine", queue="lp")
    def fine(payload):
        return payload

    @job(name="broken", queue="lp", max_attempts=1)
    def broken(payload):
        raise RuntimeError("boom")

    @job(name="tick", queue="lp_tick", schedule=every(timedelta(seconds=1)))
    def tick(payload):
        return None
    """
)


def doc_block(marker: str) -> list[str]:
    """The SQL statements of the ```sql block after ``<!-- grants:marker -->`` in docs/deploy.md."""
    text = DEPLOY.read_text()
    found = re.search(rf"<!-- grants:{marker} -->\s*```sql\n(.*?)```", text, re.S)
    assert found, f"docs/deploy.md has no grants:{marker} block"
    return [s.strip() for s in found.group(1).split(";") if s.strip()]


class Roles:
    """The owner and worker roles of one test, named uniquely (roles are cluster-wide)."""

    def __init__(self, admin_url: str, schema: str) -> None:
        self.admin_url = admin_url
        self.schema = schema
        tag = secrets.token_hex(3)
        self.owner, self.worker = f"jc_owner_{tag}", f"jc_worker_{tag}"
        self.password = f"pw_{secrets.token_hex(6)}"
        params = conninfo_to_dict(admin_url)
        self.host, self.port = params.get("host", "127.0.0.1"), params.get("port", "5432")
        self.dbname = params["dbname"]

    def adapt(self, statement: str) -> str:
        """A statement of docs/deploy.md with this test's names in place of the page's."""
        out = statement.replace("jobcore_owner", "\0owner").replace("jobcore_worker", "\0worker")
        out = out.replace("DATABASE app", f'DATABASE "{self.dbname}"').replace("'change-me'", f"'{self.password}'")
        out = re.sub(r"\bjobcore\.", f"{self.schema}.", out)
        out = out.replace("SCHEMA jobcore", f"SCHEMA {self.schema}")
        return out.replace("\0owner", self.owner).replace("\0worker", self.worker)

    def url(self, role: str) -> str:
        return (
            f"postgresql://{role}:{quote(self.password)}@{self.host}:{self.port}/{quote(self.dbname)}"
            f"?schema={self.schema}"
        )

    def run_as(self, role: str, statements: list[str]) -> None:
        with psycopg.connect(self.url(role).split("?")[0], autocommit=True) as conn:
            for statement in statements:
                conn.execute(self.adapt(statement).encode())

    def drop(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE".encode())
            for role in (self.worker, self.owner):
                conn.execute(f"DROP OWNED BY {role}".encode()) if _exists(conn, role) else None
                conn.execute(f"DROP ROLE IF EXISTS {role}".encode())


def _exists(conn: psycopg.Connection[Any], role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None


@pytest.fixture
def roles(pg_url: str) -> Iterator[Roles]:
    made = Roles(pg_url, fx.schema_name())
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for statement in doc_block("setup"):
                conn.execute(made.adapt(statement).encode())
        yield made
    finally:
        made.drop()


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("JOBCORE_URL", None)
    return env


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed ``jobcore`` command, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "jobcore.cli", *argv], check=False, capture_output=True, text=True, timeout=120,
        env=_env(),
    )


def _ok(*argv: str) -> str:
    done = _cli(*argv)
    assert done.returncode == 0, f"jobcore {' '.join(argv[:2])} failed ({done.returncode}): {done.stderr}"
    assert "permission denied" not in done.stderr
    return done.stdout


def _web_pages(url: str, *paths: str) -> dict[str, str]:
    """``jobcore web`` under the role of ``url``, as an operator runs it: each page's text (every one a 200)."""
    import socket  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore.cli", "web", "--url", url, "--port", str(port), "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        pages: dict[str, str] = {}
        deadline = time.monotonic() + WAIT
        for path in paths:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                        assert answer.status == 200
                        pages[path] = answer.read().decode()
                        break
                except OSError:
                    assert proc.poll() is None, proc.communicate()[1]
                    assert time.monotonic() < deadline, "jobcore web never answered"
                    time.sleep(0.2)
        return pages
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert "permission denied" not in err


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _running(proc: subprocess.Popen[str], what: str, check: Callable[[], bool]) -> tuple[int, str]:
    """Wait until ``check()`` while ``proc`` runs, then SIGTERM it; answers its status and stderr."""
    try:
        _until(what, check)
    except AssertionError:
        _, err = _stop(proc)
        raise AssertionError(f"timed out waiting for {what}; its stderr:\n{err[-3000:]}") from None
    return _stop(proc)


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def test_everything_runs_under_the_documented_worker_role(roles: Roles, tmp_path: Path) -> None:
    """Owner migrates (no CREATE on the database); the worker role, granted exactly docs/deploy.md's
    block, runs a worker, a scheduler, pruning and every CLI read and verb without a permission error."""
    owner, worker = roles.url(roles.owner), roles.url(roles.worker)
    jobs = tmp_path / "lp_jobs.py"
    jobs.write_text(JOBS)

    # Before any grant the worker refuses to start, coded, pointing at the grants.
    refused = _cli("worker", str(jobs), "--url", worker)
    assert refused.returncode == 6
    assert "JC_DB_ERROR" in refused.stderr
    assert "docs/deploy.md" in refused.stderr
    # With the schema visible but not migrated, it refuses as outdated, and runs no DDL.
    usage = [s for s in doc_block("worker") if s.startswith("GRANT USAGE ON SCHEMA")]
    roles.run_as(roles.owner, usage)
    refused = _cli("worker", str(jobs), "--url", worker)
    assert refused.returncode == 6
    assert "JC_SCHEMA_OUTDATED" in refused.stderr
    assert "jobcore migrate" in refused.stderr
    assert "--migrate" in refused.stderr

    assert "installed version" in _ok("migrate", "--url", owner)
    roles.run_as(roles.owner, doc_block("worker"))
    assert "already at version" in _ok("migrate", "--url", worker)  # reads the version; runs no DDL
    assert "already at version" in _ok("migrate", "--dry-run", "--url", worker)

    app = connect(worker)  # the application enqueues under the worker role too
    try:
        parents = [app.enqueue("fine", {"n": n}, queue="lp") for n in range(6)]
        child = app.enqueue("fine", {"n": 95}, queue="lp_child", depends_on=parents[:2])  # rules D
        dead = app.enqueue("broken", {"n": -1}, queue="lp", max_attempts=1)
        later = app.enqueue("fine", {"n": 99}, queue="lp_later", delay=3600)
        parked_job = app.enqueue("fine", {"n": 98}, queue="lp_park")
        claimed = app.claim(["lp_park"], worker_id="operator", lease=30).claimed[0]
        app.nack(claimed.token, "needs a look", park=True)
        doomed = app.enqueue("fine", {"n": 96}, queue="lp_later", delay=3600)

        proc = subprocess.Popen(
            [sys.executable, "-m", "jobcore.cli", "worker", str(jobs), "--url", worker, "--queues", "lp",
             "--concurrency", "2", "--poll-interval", "0.1", "--prune-interval", "0.5", "--no-scheduler"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        status, err = _running(proc, "the worker to finish the queue", lambda: (
            app.introspect.stats().count("done", "lp") == 6 and app.introspect.stats().count("dead", "lp") == 1
        ))
        assert status == 0, err
        assert "permission denied" not in err
        assert "JC_DB_ERROR" not in err
        assert app.introspect.stats().count(JobState.DONE, "lp") == 6
        assert app.introspect.get(dead.id).state == JobState.DEAD
        assert app.introspect.get(child.id).state == JobState.READY  # released by the trigger, as this role

        sched = subprocess.Popen(
            [sys.executable, "-m", "jobcore.cli", "scheduler", "--app", str(jobs), "--url", worker,
             "--interval", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        status, err = _running(
            sched, "the scheduler to fire", lambda: app.introspect.stats().count("ready", "lp_tick") >= 1
        )
        assert status == 0, err
        assert "permission denied" not in err

        stuck = app.enqueue("fine", {"n": 97}, queue="lp_stuck")
        app.claim(["lp_stuck"], worker_id="gone", lease=0.001)  # a lapsed lease for rescue
        ran: set[str] = set()

        def op(*argv: str) -> str:
            ran.add(argv[0])
            return _ok(*argv, "--url", worker)

        assert "lp" in op("stats")
        assert dead.id in op("ls", "--queue", "lp")
        assert "boom" in op("show", dead.id)
        assert dead.id in op("dead")
        op("requeue", dead.id)
        op("cancel", dead.id)
        assert dead.id in op("wait", dead.id, "--timeout", "5")  # rules A: LISTEN and the mark, as this role
        op("promote", later.id)
        op("resume", parked_job.id)
        assert "requeued 1" in op("rescue")
        op("remove", doomed.id)
        op("requeue", "--queue", "lp", "--state", "done", "--yes")  # the bulk statements too
        op("cancel", "--queue", "lp", "--yes")
        assert "tick" in op("schedules")
        op("schedules", "pause", "tick")
        op("schedules", "resume", "tick")
        op("schedules", "remove", "tick")
        assert app.leases.acquire("lp-quota", 1, "lp-holder", 60) is True
        assert "lp-holder" in op("slots")
        ran.add("web")
        assert "lp-holder" in _web_pages(worker, "/", "/jobs", "/slots")["/slots"]
        ran.update({"migrate", "worker", "scheduler"})

        assert app.introspect.get(dead.id).state == JobState.CANCELLED
        assert app.introspect.get(later.id).state == JobState.READY
        assert app.introspect.get(parked_job.id).state == JobState.READY
        assert app.introspect.get(stuck.id).state == JobState.READY
        assert app.introspect.get(doomed.id) is None
        assert app.introspect.stats().count(JobState.CANCELLED, "lp") == 7
        assert app.introspect.stats().count(JobState.DONE) == 0
        assert "removed" in op("prune", "--cancelled", "0", "--all").lower()
        assert app.introspect.stats().count(JobState.CANCELLED) == 0

        # A command the CLI grows is run here too, or this fails.
        commands = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
        assert commands - {"demo"} == ran
    finally:
        app.close()


def test_a_worker_role_cannot_migrate_and_is_told_why(roles: Roles) -> None:
    """The worker role running `jobcore migrate` on an empty schema gets a coded refusal naming the grants page."""
    roles.run_as(roles.owner, [])  # the owner can log in
    with psycopg.connect(roles.admin_url, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA {roles.schema} TO {roles.worker}".encode())
    done = _cli("migrate", "--url", roles.url(roles.worker))
    assert done.returncode == 6, done.stderr
    assert "JC_DB_ERROR" in done.stderr
    assert "docs/deploy.md" in done.stderr
    assert "permission denied" in done.stderr
