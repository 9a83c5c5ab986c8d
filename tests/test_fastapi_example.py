"""docs/examples/fastapi_app.py, run as written (issue #18, item 8).

On the memory driver: the worker in the lifespan runs what the endpoints enqueue, and
the app's tests run jobs with jobcore.testing (sync TestClient, and pytest-asyncio with
httpx's ASGI transport). On PostgreSQL: the signup's job commits with the user row, and
a rolled-back signup leaves no job, counted by a separate driver.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient

from jobcore.testing import job_tester

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fastapi_app.py"
WAIT = 10.0


def _load() -> ModuleType:
    module = sys.modules.get("fastapi_app")
    if module is None:
        spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["fastapi_app"] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("JOBCORE_URL", raising=False)
    module = _load()
    module.SENT.clear()
    return module


def _finished(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        answer: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        if answer["state"] in ("done", "failed", "dead"):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.01)


def test_the_worker_in_the_lifespan_runs_what_endpoints_enqueue(example: ModuleType) -> None:
    """``uvicorn fastapi_app:app`` with no database: memory jobs, the worker in the lifespan."""
    with TestClient(example.create_app()) as client:
        welcome = client.post("/signup", json={"email": "ada@example.com"}).json()["job"]
        report = client.post("/reports", json={"days": 2}).json()["job"]
        assert _finished(client, welcome) == {
            "name": example.send_welcome.name, "state": "done", "result": "welcome sent to ada@example.com",
        }
        assert _finished(client, report)["result"] == {"rows": 48}
        assert client.get("/jobs/nope").status_code == 404
    assert example.SENT == ["ada@example.com"]


def test_app_tests_run_the_jobs_with_job_tester(example: ModuleType) -> None:
    """A sync test: the app without its worker, the jobs run by the tester."""
    with job_tester() as jobs, TestClient(example.create_app(jobs.async_driver, worker=False)) as client:
        client.post("/signup", json={"email": "bob@example.com"})
        jobs.assert_enqueued(example.send_welcome.name, {"email": "bob@example.com"})
        assert example.SENT == []  # nothing ran yet
        ran = jobs.run_due()
        assert [j.result for j in ran] == ["welcome sent to bob@example.com"]
    assert example.SENT == ["bob@example.com"]


@pytest.mark.asyncio
async def test_async_app_tests_run_the_jobs_on_the_test_loop(example: ModuleType) -> None:
    """pytest-asyncio: requests through httpx's ASGI transport, jobs awaited on the test's loop."""
    with job_tester() as jobs:
        app = example.create_app(jobs.async_driver, worker=False)
        async with app.router.lifespan_context(app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
                answer = await client.post("/reports", json={"days": 1})
                await client.post("/signup", json={"email": "eve@example.com"})
                await jobs.run_due_async()
                status = (await client.get(f"/jobs/{answer.json()['job']}")).json()
    assert status == {"name": example.build_report.name, "state": "done", "result": {"rows": 24}}
    assert example.SENT == ["eve@example.com"]


def test_signup_enqueues_in_the_request_transaction_on_postgresql(
    example: ModuleType, request: pytest.FixtureRequest
) -> None:
    """The job commits with the user row; a signup rolled back (address taken) leaves no job."""
    from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415

    from fixtures import postgres as fx  # noqa: PLC0415

    url = fx.server_url(request.config)
    pool = fx.shared_pool(request.config)
    schema = fx.schema_name()
    try:
        database_url = make_conninfo(url, options=f"-csearch_path={schema}")  # the app's tables beside the jobs
        app = example.create_app(AsyncPostgresDriver(url, schema=schema), database_url)
        with TestClient(app) as client:
            first = client.post("/signup", json={"email": "ada@example.com"})
            assert first.status_code == 200
            assert _finished(client, first.json()["job"])["state"] == "done"
            again = client.post("/signup", json={"email": "ada@example.com"})
            assert again.status_code == 409
            other = client.post("/signup", json={"email": "bob@example.com"})
            assert _finished(client, other.json()["job"])["state"] == "done"
        store = PostgresDriver(pool, schema=schema)  # an independent reader of what was stored
        welcomes = store.introspect.list(limit=10).jobs
        assert sorted(j.payload["email"] for j in welcomes) == ["ada@example.com", "bob@example.com"]
        with pool.connection() as conn:
            query = sql.SQL("SELECT email FROM {}.users ORDER BY email").format(sql.Identifier(schema))
            users = conn.execute(query).fetchall()
        assert [u[0] for u in users] == ["ada@example.com", "bob@example.com"]
        assert example.SENT == ["ada@example.com", "bob@example.com"]
    finally:
        fx.drop_schema(pool, schema)

