"""A ``jobcore worker`` process holds a bounded number of PostgreSQL connections, whatever its concurrency.

Counted by the server (``pg_stat_activity``, by the worker's ``application_name``), sampled
every 20 ms while the worker drains jobs whose handlers hold their slot for a moment.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fixtures import postgres as fx
from jobcore.cli.worker import WORKER_CONNECTIONS, connection_budget
from jobcore.errors import OptionInvalid

JOBS = textwrap.dedent(
    """
    import time
    from jobcore import job

    @job(name="budget.nap", queue="budget")
    def nap(payload):
        time.sleep(0.005)
    """
)
COUNT = 600


def _drain(pg_url: str, pool: Any, tmp_path: Path, *extra: str) -> int:
    """Run a worker over COUNT jobs; answer the most connections the server saw it hold at once."""
    from jobcore.drivers.postgres import PostgresDriver  # noqa: PLC0415

    schema = fx.schema_name()
    name = f"jc_budget_{secrets.token_hex(4)}"
    url = f"{pg_url}?application_name={name}&schema={schema}"
    driver = PostgresDriver(pool, schema=schema)
    jobs = tmp_path / "budget_jobs.py"
    jobs.write_text(JOBS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        driver.migrate()
        driver.enqueue_many([{"name": "budget.nap", "queue": "budget", "payload": n} for n in range(COUNT)])
        log = open(tmp_path / "worker.log", "w+")  # noqa: SIM115 - a file: a full pipe would stall the worker
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobcore.cli", "worker", str(jobs), "--url", url, "--no-scheduler",
             "--poll-interval", "0.05", *extra],
            stdout=subprocess.DEVNULL, stderr=log, env=env,
        )
        most = 0
        deadline = time.monotonic() + 60
        drained = False
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                with pool.connection() as conn:
                    held = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                    ).fetchone()[0]
                    most = max(most, held)
                if driver.introspect.stats().count("done") == COUNT:
                    drained = True
                    break
                time.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.seek(0)
            err = log.read()
            log.close()
        assert drained, f"{driver.introspect.stats().count('done')} of {COUNT} done within 60 s: {err[-2000:]}"
        return most
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


@pytest.mark.parametrize("concurrency", [8, 32])
def test_a_worker_holds_its_budget_whatever_its_concurrency(
    pg_url: str, pool: Any, tmp_path: Path, concurrency: int
) -> None:
    """Default budget: WORKER_CONNECTIONS pooled + 1 LISTEN, at concurrency 8 and 32 alike."""
    most = _drain(pg_url, pool, tmp_path, "--concurrency", str(concurrency))
    assert 2 <= most <= WORKER_CONNECTIONS + 1


def test_connections_sets_the_budget(pg_url: str, pool: Any, tmp_path: Path) -> None:
    """``--connections 2`` at concurrency 16: at most 2 pooled + 1 LISTEN, and every job done."""
    most = _drain(pg_url, pool, tmp_path, "--concurrency", "16", "--connections", "2")
    assert 2 <= most <= 3


@pytest.mark.parametrize("bad", [0, -1, True, "4", 2.0])
def test_a_budget_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    with pytest.raises(OptionInvalid, match="--connections"):
        connection_budget("postgresql://h/db", bad)


def test_the_budget_goes_to_drivers_with_a_pool_and_yields_to_the_url() -> None:
    assert connection_budget("postgresql://h/db", None) == {"pool_max": WORKER_CONNECTIONS}
    assert connection_budget("postgresql://h/db?pool_max=7", None) == {}
    assert connection_budget("postgresql://h/db?pool_max=7", 3) == {"pool_max": 3}
    assert connection_budget("mongodb://h/db?maxPoolSize=9", None) == {}
    assert connection_budget("mongodb://h/db", 2) == {"pool_max": 2}
    assert connection_budget("memory://", 2) == {}
