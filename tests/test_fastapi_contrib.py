"""jobcore.contrib.fastapi: the lifespan runs driver and worker with the app; the dependency hands out the driver."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from jobcore.drivers.memory import AsyncMemoryDriver

import jobcore
from jobcore import Registry
from jobcore.contrib.fastapi import JobDriverDep, lifespan
from jobcore.errors import JobcoreError


def _app(registry: Registry, **options: Any) -> FastAPI:
    app = FastAPI(lifespan=lifespan(registry=registry, **options))

    @app.post("/greet/{name}")
    async def greet(name: str, jobs: JobDriverDep) -> dict[str, str]:
        job = await jobs.enqueue("greet", {"name": name}, queue="mail")
        return {"job": job.id}

    @app.get("/jobs/{job_id}")
    async def status(job_id: str, jobs: JobDriverDep) -> dict[str, Any]:
        found = await jobs.introspect.get(job_id)
        assert found is not None
        return {"state": found.state.value, "result": found.result}

    return app


def _registry(seen: list[str]) -> Registry:
    registry = Registry()

    @registry.job(name="greet", queue="mail")
    async def greet(payload: dict[str, str]) -> str:
        seen.append(payload["name"])
        return f"hello {payload['name']}"

    return registry


def _wait_done(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        body = client.get(f"/jobs/{job_id}").json()
        if body["state"] == "done":
            return dict(body)
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {body}")


def test_the_lifespan_runs_a_worker_and_the_dependency_hands_out_its_driver() -> None:
    seen: list[str] = []
    with TestClient(_app(_registry(seen), url="memory://", poll_interval=0.02)) as client:
        job_id = client.post("/greet/ada").json()["job"]
        assert _wait_done(client, job_id) == {"state": "done", "result": "hello ada"}
    assert seen == ["ada"]


def test_without_a_worker_jobs_wait_for_workers_elsewhere() -> None:
    seen: list[str] = []
    with TestClient(_app(_registry(seen), url="memory://", worker=False)) as client:
        job_id = client.post("/greet/bob").json()["job"]
        time.sleep(0.3)
        assert client.get(f"/jobs/{job_id}").json()["state"] == "ready"
    assert seen == []


def test_a_given_driver_is_process_wide_meanwhile_and_left_open() -> None:
    seen: list[str] = []
    driver = AsyncMemoryDriver()
    previous = jobcore.set_async_job_driver(None)
    try:
        with TestClient(_app(_registry(seen), driver=driver, poll_interval=0.02)) as client:
            assert jobcore.get_async_job_driver() is driver
            _wait_done(client, client.post("/greet/cy").json()["job"])
        with pytest.raises(JobcoreError):
            jobcore.get_async_job_driver()  # restored to none
    finally:
        jobcore.set_async_job_driver(previous)
    assert driver.twin.introspect.stats().counts["mail"]  # still usable: not closed by the app


def test_no_store_is_a_coded_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBCORE_URL", raising=False)
    with pytest.raises(JobcoreError) as refusal, TestClient(_app(Registry())):
        pass
    assert refusal.value.code == "JC_CONFIGURATION"
    assert "JOBCORE_URL" in str(refusal.value.fix)
    with pytest.raises(JobcoreError) as both:
        lifespan("memory://", driver=AsyncMemoryDriver())
    assert both.value.code == "JC_CONFIGURATION"


def test_the_url_comes_from_jobcore_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBCORE_URL", "memory://")
    seen: list[str] = []
    with TestClient(_app(_registry(seen), poll_interval=0.02)) as client:
        _wait_done(client, client.post("/greet/dee").json()["job"])
    assert seen == ["dee"]
