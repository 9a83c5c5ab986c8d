"""Prometheus metrics for a worker and its store (the optional ``jobcore-queue[metrics]`` extra).

Worker metrics are fed by the structured events of :mod:`jobcore.events` (a hook, so
they count whatever the logging configuration); store metrics are read from
``driver.introspect.stats()`` on each scrape by a collector, so they are never stale.
:func:`start_metrics_server` serves both on ``http://ADDR:PORT/metrics``;
``jobcore worker --metrics-port PORT`` calls it. Every name starts with ``jobcore_``
(the table is in docs/metrics.md). ``prometheus_client`` is imported only here, and only
when metrics are asked for, so jobcore works without the extra.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from jobcore import events
from jobcore.driver import JobDriver
from jobcore.errors import ConfigurationError
from jobcore.records import JobState

__all__ = ["DURATION_BUCKETS", "MetricsServer", "WorkerMetrics", "start_metrics_server"]

logger = logging.getLogger("jobcore.metrics")

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Histogram buckets (seconds) of ``jobcore_attempt_duration_seconds``: jobs run from ms to an hour."""

_JOB_LABELS = ("queue", "job_name")


def _prometheus() -> Any:
    """The ``prometheus_client`` module, or a coded error saying how to install it."""
    try:
        import prometheus_client  # noqa: PLC0415 - optional dependency, imported on first use
        import prometheus_client.core  # noqa: PLC0415 - the metric families collectors yield
    except ImportError as exc:
        raise ConfigurationError(
            "metrics need the prometheus-client package, which is not installed",
            "pip install 'jobcore-queue[metrics]'",
        ) from exc
    return prometheus_client


class WorkerMetrics:
    """The worker counters and histogram on ``registry``, updated by :meth:`on_event`.

    Args:
        registry: A ``prometheus_client.CollectorRegistry`` (default: the global one).
    """

    def __init__(self, registry: Any = None) -> None:
        prom = _prometheus()
        self.registry = registry if registry is not None else prom.REGISTRY
        reg = self.registry
        self.started = prom.Counter(
            "jobcore_jobs_started", "Attempts this process started.", _JOB_LABELS, registry=reg
        )
        self.settled = prom.Counter(
            "jobcore_jobs_settled", "Settles that landed, by outcome.", (*_JOB_LABELS, "outcome"), registry=reg
        )
        self.duration = prom.Histogram(
            "jobcore_attempt_duration_seconds", "Real seconds from an attempt's start to its settle landing.",
            (*_JOB_LABELS, "outcome"), buckets=DURATION_BUCKETS, registry=reg,
        )
        self.lease_losses = prom.Counter(
            "jobcore_lease_losses", "Attempts whose lease was lost (outcome not recorded).",
            (*_JOB_LABELS, "outcome"), registry=reg,
        )
        self.buried = prom.Counter(
            "jobcore_jobs_buried", "Final attempts buried after their lease lapsed (C08).",
            (*_JOB_LABELS, "outcome"), registry=reg,
        )
        self.rescued = prom.Counter(
            "jobcore_jobs_rescued", "Jobs with lapsed leases a rescue sweep put back to ready.", registry=reg
        )
        self.pruned = prom.Counter(
            "jobcore_jobs_pruned", "Finished jobs a pruning run deleted, by state.", ("state",), registry=reg
        )
        self._metrics = (
            self.started, self.settled, self.duration, self.lease_losses, self.buried, self.rescued, self.pruned,
        )

    def on_event(self, event: events.Event) -> None:
        """Count one event (an :mod:`jobcore.events` hook)."""
        labels = (event.queue or "", event.job_name or "")
        if event.event == "started":
            self.started.labels(*labels).inc()
        elif event.event == "settled":
            outcome = event.outcome or ""
            self.settled.labels(*labels, outcome).inc()
            if event.duration_s is not None:
                self.duration.labels(*labels, outcome).observe(event.duration_s)
        elif event.event == "lease_lost":
            self.lease_losses.labels(*labels, event.outcome or "").inc()
        elif event.event == "buried":
            self.buried.labels(*labels, event.outcome or "").inc()
        elif event.event == "rescued":
            self.rescued.inc(event.count or 0)
        elif event.event == "pruned":
            self.pruned.labels(event.outcome or "").inc(event.count or 0)

    def unregister(self) -> None:
        """Take the metrics off the registry."""
        for metric in self._metrics:
            self.registry.unregister(metric)


class StoreCollector:
    """Reads ``driver.introspect.stats()`` on each scrape into the ``jobcore_queue_*`` gauges."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver

    def describe(self) -> list[Any]:
        """Nothing up front, so registering never calls the store."""
        return []

    def collect(self) -> Iterator[Any]:
        """The gauges as of now; a store that cannot answer gives ``jobcore_store_up 0``."""
        core = _prometheus().core
        up = core.GaugeMetricFamily("jobcore_store_up", "1 when the last scrape could read the store's stats.")
        try:
            stats = self.driver.introspect.stats()
        except Exception:  # a scrape must answer even when the store is down
            logger.warning("metrics scrape could not read the store's stats", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        depth = core.GaugeMetricFamily("jobcore_queue_jobs", "Jobs per queue and state.", labels=["queue", "state"])
        dead = core.GaugeMetricFamily("jobcore_dead_jobs", "Dead-lettered jobs per queue.", labels=["queue"])
        age = core.GaugeMetricFamily(
            "jobcore_queue_oldest_due_age_seconds", "Age of the oldest due ready/scheduled job per queue.",
            labels=["queue"],
        )
        for queue, counts in sorted(stats.counts.items()):
            for state in JobState:
                depth.add_metric([queue, state.value], counts.get(state, 0))
            dead.add_metric([queue], counts.get(JobState.DEAD, 0))
        for queue, oldest in sorted(stats.oldest_due_age.items()):
            age.add_metric([queue], oldest.total_seconds())
        yield from (up, depth, dead, age)


class MetricsServer:
    """A running metrics endpoint; :meth:`close` stops it and detaches its metrics.

    Attributes:
        port: The port it listens on (the real one when 0 was asked).
        worker_metrics: The counters fed by the events hook.
    """

    def __init__(self, server: Any, thread: threading.Thread, worker_metrics: WorkerMetrics, collector: Any) -> None:
        self._server, self._thread, self._collector = server, thread, collector
        self.worker_metrics = worker_metrics
        self.port: int = server.server_port

    def close(self) -> None:
        """Stop serving, stop counting events, unregister the metrics."""
        events.remove_hook(self.worker_metrics.on_event)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
        self.worker_metrics.unregister()
        if self._collector is not None:
            self.worker_metrics.registry.unregister(self._collector)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_metrics_server(
    port: int, *, driver: JobDriver | None = None, registry: Any = None, addr: str = "0.0.0.0",  # noqa: S104
) -> MetricsServer:
    """Serve the worker metrics (and the store's, when ``driver`` is given) on ``addr:port``.

    ``port=0`` picks a free port (read it from the answer's ``port``). ``registry`` is a
    ``prometheus_client.CollectorRegistry`` (default: the global one). Raises a coded
    :class:`~jobcore.errors.ConfigurationError` when the extra is not installed.
    """
    prom = _prometheus()
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigurationError(f"metrics port {port!r} is not a port number", "pass a port between 1 and 65535")
    reg = registry if registry is not None else prom.REGISTRY
    worker_metrics = WorkerMetrics(reg)
    collector = None
    if driver is not None:
        collector = StoreCollector(driver)
        reg.register(collector)
    try:
        server, thread = prom.start_http_server(port, addr=addr, registry=reg)
    except OSError as exc:
        worker_metrics.unregister()
        if collector is not None:
            reg.unregister(collector)
        raise ConfigurationError(
            f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}", "pick a free --metrics-port"
        ) from exc
    events.add_hook(worker_metrics.on_event)
    return MetricsServer(server, thread, worker_metrics, collector)
