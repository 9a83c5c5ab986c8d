"""Prometheus metrics (``jobcore-queue[metrics]``): scraped over HTTP from a running worker."""

from __future__ import annotations

import builtins
import logging
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from jobcore.backoff import Backoff
from jobcore.cli import main
from jobcore.clock import ManualClock
from jobcore.errors import ConfigurationError
from jobcore.metrics import MetricsServer, start_metrics_server
from jobcore.records import JobState
from jobcore.registry import Registry, default_registry
from jobcore.worker import Worker

LEASE = timedelta(seconds=30)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return value


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` from GET /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def driver() -> MemoryDriver:
    return MemoryDriver(clock=ManualClock(datetime(2030, 1, 1, 12, tzinfo=timezone.utc)))


@pytest.fixture
def server(driver: MemoryDriver) -> Iterator[MetricsServer]:
    with start_metrics_server(0, driver=driver, registry=CollectorRegistry(), addr="127.0.0.1") as running:
        yield running


def test_a_scrape_shows_worker_counts_and_store_gauges(driver: MemoryDriver, server: MetricsServer) -> None:
    """Started, settled by outcome, durations, burials and lease losses; queue depth, due age, dead count."""
    registry = Registry()
    started, release = threading.Event(), threading.Event()

    @registry.job(name="ok")
    def ok(payload: int) -> int:
        if payload == 0:
            started.set()
            release.wait(5.0)
        return payload

    @registry.job(name="boom", max_attempts=2, backoff=Backoff(base=0.0, jitter=0.0))
    def boom(payload: int) -> int:
        raise ValueError(payload)

    buried = driver.enqueue("ok", 9, max_attempts=1)
    driver.claim(["default"], worker_id="crashed", lease=LEASE)
    driver.clock.advance(LEASE + timedelta(seconds=1))  # type: ignore[attr-defined]
    for n in (1, 2):
        ok.enqueue(n, driver=driver)
    boom.enqueue(3, driver=driver)
    cancelled = ok.enqueue(0, driver=driver)
    driver.enqueue("ok", 4, queue="later")  # due in a queue no worker claims: depth and age
    worker = Worker(
        ["default"], driver=driver, registry=registry, lease=LEASE, poll_interval=0.01, heartbeat_interval=0.01,
        rescue_interval=None, drain_timeout=2.0,
    ).start()
    try:
        assert started.wait(5.0)
        driver.introspect.cancel(cancelled.id)
        wait_until(lambda: worker.counts["lost"] == 1 and worker.counts["dead_lettered"] == 1, "the endings")
        wait_until(lambda: worker.counts["completed"] == 2, "the completed jobs")
    finally:
        release.set()
        worker.stop(2.0)
    driver.clock.advance(timedelta(seconds=90))  # type: ignore[attr-defined]
    metrics = scrape(server.port)

    def value(name: str, **labels: str) -> float:
        return metrics[(name, tuple(sorted(labels.items())))]

    ok_job = {"queue": "default", "job_name": "ok"}
    boom_job = {"queue": "default", "job_name": "boom"}
    assert value("jobcore_jobs_started_total", **ok_job) == 3
    assert value("jobcore_jobs_started_total", **boom_job) == 2
    assert value("jobcore_jobs_settled_total", **ok_job, outcome="completed") == 2
    assert value("jobcore_jobs_settled_total", **boom_job, outcome="retry") == 1
    assert value("jobcore_jobs_settled_total", **boom_job, outcome="dead_lettered") == 1
    assert value("jobcore_attempt_duration_seconds_count", **ok_job, outcome="completed") == 2
    assert value("jobcore_attempt_duration_seconds_bucket", **ok_job, outcome="completed", le="+Inf") == 2
    assert value("jobcore_lease_losses_total", **ok_job, outcome="called_off") == 1
    assert value("jobcore_jobs_buried_total", **ok_job, outcome="dead") == 1
    assert value("jobcore_store_up") == 1
    assert value("jobcore_queue_jobs", queue="default", state="done") == 2
    assert value("jobcore_queue_jobs", queue="default", state="dead") == 2
    assert value("jobcore_queue_jobs", queue="default", state="cancelled") == 1
    assert value("jobcore_queue_jobs", queue="default", state="ready") == 0
    assert value("jobcore_queue_jobs", queue="later", state="ready") == 1
    assert value("jobcore_dead_jobs", queue="default") == 2
    assert value("jobcore_queue_oldest_due_age_seconds", queue="later") == 90
    assert ("jobcore_queue_oldest_due_age_seconds", (("queue", "default"),)) not in metrics
    assert driver.introspect.get(buried.id).state is JobState.DEAD  # type: ignore[union-attr]


def test_a_closed_server_stops_counting_and_frees_its_names(driver: MemoryDriver) -> None:
    """After close() the same registry takes a new server; nothing is counted twice."""
    registry = CollectorRegistry()
    start_metrics_server(0, driver=driver, registry=registry, addr="127.0.0.1").close()
    with start_metrics_server(0, driver=driver, registry=registry, addr="127.0.0.1") as again:
        assert ("jobcore_store_up", ()) in scrape(again.port)


def test_a_busy_port_is_a_coded_configuration_error(driver: MemoryDriver, server: MetricsServer) -> None:
    """Serving on a port already taken is refused with a fix."""
    with pytest.raises(ConfigurationError, match="pick a free --metrics-port"):
        start_metrics_server(server.port, driver=driver, registry=CollectorRegistry(), addr="127.0.0.1")


def test_without_the_extra_metrics_are_refused_with_the_install_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """No prometheus_client: a JC_CONFIGURATION error naming jobcore-queue[metrics]."""
    real_import = builtins.__import__

    def no_prometheus(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("prometheus_client"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_prometheus)
    with pytest.raises(ConfigurationError) as caught:
        start_metrics_server(0)
    assert caught.value.code == "JC_CONFIGURATION"
    assert caught.value.fix == "pip install 'jobcore-queue[metrics]'"


def test_worker_command_serves_metrics_on_the_port_given(
    tmp_path: Path, server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``jobcore worker --metrics-port`` serves /metrics while it runs; a busy port exits 5 with the fix."""
    path = tmp_path / "metrics_jobs.py"
    path.write_text(textwrap.dedent(
        """
        from jobcore import job

        @job(name="metrics.stop", queue="metrics")
        def stop(payload):
            raise SystemExit(0)
        """
    ))
    try:
        # The fixture's server holds its port: the worker must refuse it, exit 5 and not run.
        assert main(["worker", str(path), "--metrics-port", str(server.port)], driver=MemoryDriver()) == 5
        driver = MemoryDriver()
        codes: list[int] = []
        caplog.set_level(logging.INFO, logger="jobcore")
        runner = threading.Thread(target=lambda: codes.append(main(
            ["worker", str(path), "--metrics-port", "0", "--poll-interval", "0.05"], driver=driver,
        )))
        runner.start()
        try:
            line = wait_until(
                lambda: next((r for r in caplog.records if r.getMessage().startswith("serving metrics")), None),
                "the metrics server to start",
            )
            port = int(line.args[0])
            metrics = scrape(port)
            assert metrics[("jobcore_store_up", ())] == 1
            assert ("jobcore_queue_jobs", (("queue", "metrics"), ("state", "ready"))) not in metrics
            driver.enqueue("metrics.stop", None, queue="metrics")
        finally:
            runner.join(5)
        assert codes == [0]
    finally:
        default_registry.remove("metrics.stop")
        sys.modules.pop("metrics_jobs", None)
