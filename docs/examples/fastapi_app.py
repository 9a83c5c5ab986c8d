"""A FastAPI service with jobcore: jobs enqueued in the request's transaction, the worker in the lifespan.

Run it (``pip install 'jobcore-queue[postgres]' fastapi uvicorn``)::

    DATABASE_URL=postgresql://app@localhost/app uvicorn fastapi_app:app

or with no database at all (jobs in memory, users not stored): ``uvicorn fastapi_app:app``.

* ``POST /signup`` stores the user and enqueues the welcome mail **in one transaction**:
  both or neither (a taken e-mail address rolls the job back with the user row).
* ``POST /reports`` enqueues a job with no transaction of its own.
* ``GET /jobs/{id}`` reads a job back.
* The lifespan migrates the store and runs an :class:`~jobcore.AsyncWorker` on the
  application's event loop: ``send_welcome`` (async) runs there, ``build_report``
  (sync, blocking) on a worker thread. Shutting the app down drains the worker.

tests/test_fastapi_example.py runs this file as it is, on the memory driver and on
PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import jobcore
from jobcore import AsyncWorker, job

SENT: list[str] = []  # stands in for a mail service


@job(queue="mail", max_attempts=5)
async def send_welcome(payload: dict[str, Any]) -> str:
    """Async: runs on the application's event loop (it could use the app's async clients)."""
    SENT.append(payload["email"])
    return f"welcome sent to {payload['email']}"


@job(queue="reports", timeout=60)
def build_report(payload: dict[str, Any]) -> dict[str, int]:
    """Sync and blocking: runs on a worker thread, so the event loop never waits for it."""
    time.sleep(0.01)  # stands in for a slow computation
    return {"rows": payload["days"] * 24}


class Signup(BaseModel):
    email: str


class Report(BaseModel):
    days: int


def create_app(driver: Any = None, database_url: str | None = None, *, worker: bool = True) -> FastAPI:
    """The application.

    Args:
        driver: An async jobcore driver (default: ``connect_async`` of ``JOBCORE_URL``, else
            of ``DATABASE_URL``, else ``memory://``); the app closes it when it shuts down.
        database_url: The application's own database (default ``DATABASE_URL``; with none,
            users are not stored).
        worker: Run the worker in the lifespan (tests that run jobs with
            ``jobcore.testing`` turn it off).
    """
    database_url = database_url or os.environ.get("DATABASE_URL")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        jobs = driver or jobcore.connect_async(os.environ.get("JOBCORE_URL") or database_url or "memory://")
        await jobs.migrate()
        pool = await _open_database(database_url) if database_url else None
        app.state.jobs, app.state.pool = jobs, pool
        previous = jobcore.set_async_job_driver(jobs)  # for handle.enqueue_async(...)
        try:
            if not worker:
                yield
            else:
                async with AsyncWorker(["mail", "reports"], driver=jobs, concurrency=8):
                    yield  # the application serves requests; the worker runs beside it
        finally:  # the worker has drained by now (in-flight jobs finished or given back)
            jobcore.set_async_job_driver(previous)
            if pool is not None:
                await pool.close()
            await jobs.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/signup")
    async def signup(body: Signup) -> dict[str, str]:
        pool = app.state.pool
        if pool is None:  # no database configured: only the job
            welcome = await send_welcome.enqueue_async({"email": body.email})
            return {"job": welcome.id}
        import psycopg  # noqa: PLC0415 - only with a database

        try:
            async with pool.connection() as conn, conn.transaction():
                # The job joins this transaction: it exists only if the user row commits.
                welcome = await app.state.jobs.enqueue(
                    send_welcome.name, {"email": body.email}, queue=send_welcome.queue, connection=conn
                )
                await conn.execute("INSERT INTO users (email) VALUES (%s)", (body.email,))
        except psycopg.errors.UniqueViolation:
            raise HTTPException(409, f"{body.email} has already signed up") from None  # rolled back: no job
        return {"job": welcome.id}

    @app.post("/reports")
    async def reports(body: Report) -> dict[str, str]:
        report = await build_report.enqueue_async({"days": body.days})
        return {"job": report.id}

    @app.get("/jobs/{job_id}")
    async def job_status(job_id: str) -> dict[str, Any]:
        found = await app.state.jobs.introspect.get(job_id)
        if found is None:
            raise HTTPException(404, f"no job {job_id}")
        return {"name": found.name, "state": str(found.state), "result": found.result}

    return app


async def _open_database(url: str) -> Any:
    """The application's own connection pool and table (psycopg's async pool)."""
    from psycopg_pool import AsyncConnectionPool  # noqa: PLC0415 - only with a database

    pool: Any = AsyncConnectionPool(url, min_size=1, max_size=10, open=False)
    await pool.open()
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS users (email text PRIMARY KEY)")
    return pool


app = create_app()
