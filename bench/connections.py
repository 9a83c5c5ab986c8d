"""How many PostgreSQL connections one ``jobcore worker`` process holds (a script, not a test).

    .venv/bin/python bench/connections.py [--jobs 20000] [--concurrency 8,64] [--tree DIR]

Starts a throwaway server (as the test fixtures do) unless ``--url`` names one, enqueues
``--jobs`` jobs whose handler does nothing, runs ``jobcore worker --concurrency N`` over
them, and samples ``pg_stat_activity`` every 10 ms by the worker's ``application_name``:
connections held while idle (before the jobs are enqueued, and after the drain) and the
most held at once while draining. ``--tree DIR`` runs the worker from another checkout's
package layout (``DIR/jobcore`` with ``drivers`` as ``DIR/jobcore/drivers``), to measure
the tree before a change; ``--extra`` passes worker options (``--connections 2``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg

from fixtures.postgres import LocalServer, find_binaries

JOBS = textwrap.dedent(
    """
    from jobcore import job

    @job(name="conn.noop", queue="conn")
    def noop(payload):
        return None
    """
)
_RUN_FROM_TREE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()];"
    " sys.path.insert(0, sys.argv.pop(1)); from jobcore.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _held(conn: psycopg.Connection, name: str) -> int:
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def measure(url: str, jobs: int, concurrency: int, tree: str | None, extra: list[str]) -> dict[str, float]:
    schema = f"jc_conn_{secrets.token_hex(3)}"
    name = f"jc_conn_{secrets.token_hex(3)}"
    worker_url = f"{url}?application_name={name}&schema={schema}"
    folder = Path(tempfile.mkdtemp())
    (folder / "conn_jobs.py").write_text(JOBS)
    admin = psycopg.connect(url, autocommit=True)
    from jobcore.drivers.postgres import PostgresDriver  # noqa: PLC0415

    driver = PostgresDriver(url, schema=schema)
    driver.migrate()
    argv = ["worker", str(folder / "conn_jobs.py"), "--url", worker_url, "--concurrency", str(concurrency),
            "--no-scheduler", *extra]
    cmd = [sys.executable, "-c", _RUN_FROM_TREE, tree, *argv] if tree else [sys.executable, "-m", "jobcore.cli", *argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = open(folder / "worker.log", "w")  # noqa: SIM115 - a file, not a pipe: a full pipe would stall the worker
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        up = time.monotonic() + 120
        while _held(admin, name) == 0 and time.monotonic() < up:  # started: its first claim connected
            time.sleep(0.05)
        time.sleep(3)  # then idle, polling
        idle = max(_held(admin, name) for _ in range(20) if time.sleep(0.01) is None)
        for start in range(0, jobs, 1000):
            driver.enqueue_many([{"name": "conn.noop", "queue": "conn", "payload": n}
                                 for n in range(start, min(jobs, start + 1000))])
        began = time.monotonic()
        most = 0
        done = 0
        while done < jobs:
            for _ in range(50):  # sample every 10 ms, count progress every 0.5 s
                most = max(most, _held(admin, name))
                time.sleep(0.01)
            row = admin.execute(f'SELECT count(*) FROM "{schema}".jobs WHERE state = %s', ("done",)).fetchone()
            done = int(row[0]) if row else 0
            if proc.poll() is not None or time.monotonic() - began > 900:
                raise RuntimeError(f"worker stopped or stalled; see {folder}/worker.log")
        took = time.monotonic() - began
        time.sleep(2)
        after = _held(admin, name)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
        driver.close()
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
    return {"idle": idle, "draining_max": most, "idle_after": after, "jobs_per_s": jobs / took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("JOBCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", default="8,64")
    parser.add_argument("--tree", default=None, help="run the worker from this package layout (a tree before a change)")
    parser.add_argument("--extra", default="", help="more worker options, space-separated")
    args = parser.parse_args()
    server = None
    url = args.url
    if not url:
        bindir = find_binaries()
        if bindir is None:
            sys.exit("no PostgreSQL binaries; pass --url")
        server = LocalServer(bindir).start()
        url = server.url
    try:
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            figures = measure(url, args.jobs, concurrency, args.tree, args.extra.split())
            label = f"concurrency {concurrency}{' ' + args.extra if args.extra else ''}"
            print(f"{label}: " + ", ".join(f"{k}={v:.0f}" for k, v in figures.items()), flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
