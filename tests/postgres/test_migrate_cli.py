"""Explicit migrations from the command line: nothing runs DDL unless told to, and `migrate` says what it did.

Real processes against a fresh schema: the worker and the scheduler refuse an uninstalled
schema (and leave it uninstalled), `--migrate` installs it, `migrate --dry-run` writes
nothing, and the script `migrate --sql` prints, applied with psql as a DBA would, is a
full install that `migrate` then finds current.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobcore.drivers.postgres import _schema

from fixtures import postgres as fx

WAIT = 30.0

JOBS = textwrap.dedent(
    """
    from jobcore import job

    @job(name="noop", queue="mig")
    def noop(payload):
        return None
    """
)


@pytest.fixture
def fresh(pg_url: str, pool: Any) -> Iterator[str]:
    """A URL to a schema nothing was installed in (dropped at teardown)."""
    schema = fx.schema_name()
    sep = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{sep}schema={schema}"
    finally:
        fx.drop_schema(pool, schema)


def _version(pool: Any, url: str) -> int | None:
    schema = url.rsplit("schema=", 1)[1]
    with pool.connection() as conn:
        return _schema.current_version(conn, schema)


def _jobcore(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("JOBCORE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "jobcore.cli", *argv], check=False, capture_output=True, text=True, timeout=timeout,
        env=env,
    )


def test_worker_and_scheduler_refuse_an_uninstalled_schema_and_run_no_ddl(
    fresh: str, pool: Any, tmp_path: Path
) -> None:
    jobs = tmp_path / "mig_jobs.py"
    jobs.write_text(JOBS)
    for argv in (["worker", str(jobs)], ["scheduler", "--app", str(jobs)]):
        done = _jobcore(*argv, "--url", fresh)
        assert done.returncode == 6, done.stderr
        assert done.stderr.startswith("error JC_SCHEMA_OUTDATED: jobcore's schema on this store is not installed")
        assert "run `jobcore migrate --url ...`" in done.stderr
        assert "--migrate" in done.stderr
        assert _version(pool, fresh) is None  # nothing was created


def test_worker_with_migrate_installs_the_schema_and_says_so(fresh: str, pool: Any, tmp_path: Path) -> None:
    jobs = tmp_path / "mig_jobs.py"
    jobs.write_text(JOBS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore.cli", "worker", str(jobs), "--url", fresh, "--migrate", "--no-scheduler"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    deadline = time.monotonic() + WAIT
    while _version(pool, fresh) != _schema.LATEST and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    assert f"schema: installed version {_schema.LATEST}" in err
    assert _version(pool, fresh) == _schema.LATEST


def test_dry_run_writes_nothing_and_the_sql_script_installs_with_psql(fresh: str, pool: Any, tmp_path: Path) -> None:
    dry = _jobcore("migrate", "--dry-run", "--url", fresh)
    assert dry.returncode == 0, dry.stderr
    first = dry.stdout.splitlines()[0]
    assert first.endswith(f": would install version {_schema.LATEST}")
    assert any("CREATE TABLE" in line for line in dry.stdout.splitlines()[1:])
    assert _version(pool, fresh) is None

    script = _jobcore("migrate", "--sql", "--url", fresh)
    assert script.returncode == 0, script.stderr
    lines = script.stdout.strip().splitlines()
    assert (lines[0], lines[-1]) == ("BEGIN;", "COMMIT;")
    assert _version(pool, fresh) is None
    path = tmp_path / "jobcore-migration.sql"
    path.write_text(script.stdout)
    bindir = fx.find_binaries()
    assert bindir is not None, "psql comes with the PostgreSQL binaries the fixture runs"
    conninfo = fresh.split("?", maxsplit=1)[0]
    applied = subprocess.run(
        [os.path.join(bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-f", str(path)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    assert _version(pool, fresh) == _schema.LATEST

    again = _jobcore("migrate", "--url", fresh)
    assert again.stdout.endswith(f": already at version {_schema.LATEST}\n")
    assert _jobcore("migrate", "--sql", "--url", fresh).stdout == (
        f"-- already at version {_schema.LATEST}: nothing to apply\n"
    )


def test_migrate_says_installed_then_already(fresh: str, pool: Any) -> None:
    first = _jobcore("migrate", "--url", fresh)
    assert first.returncode == 0, first.stderr
    assert first.stdout.endswith(f": installed version {_schema.LATEST}\n")
    assert "password" not in first.stdout
    second = _jobcore("migrate", "--url", fresh)
    assert second.stdout.endswith(f": already at version {_schema.LATEST}\n")
