"""A worker holding many jobs on a far-away store keeps every lease (W01, F02).

The store is made far away for real: every connection passes a TCP proxy holding each
chunk 10 ms each way, so a round trip takes about 21 ms however little it carries. Renewed
one ``heartbeat`` call each, 150 leases took 3.2 s a round, past ``lease - margin`` (2.4 s
of a 3 s lease): 155-159 handlers were called off while the store answered every call, and
89-90 of the 150 jobs ran again. Renewed in ``heartbeat_many`` calls, a round is one call:
6 calls renewed 600 leases of 4 s jobs (5 calls, 450 leases, for the 3.5 s jobs here), and no
handler was called off.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from jobcore.drivers.postgres import PostgresDriver

from jobcore.registry import Registry
from jobcore.worker import Worker
from tests.postgres.proxy import Proxy

JOBS = 150
LEASE = 3.0
RUN = 3.5
"""Seconds each handler runs: more than the lease, so every job needs its lease renewed."""


def test_a_worker_holding_150_jobs_on_a_store_21_ms_away_keeps_every_lease(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]],
) -> None:
    """Every job runs once and completes; no lease is lost; renewals go out a batch at a time."""
    driver, proxy = proxied(store_clock=True)
    registry = Registry()
    runs: list[int] = []  # the independent record: one entry per handler run
    lock = threading.Lock()

    @registry.job(name="far.long", queue="far")
    def long(payload: int) -> None:
        with lock:
            runs.append(payload)
        time.sleep(RUN)

    long.enqueue_many(list(range(JOBS)), driver=driver)
    renewals: list[int] = []
    batch = driver.heartbeat_many

    def counted(tokens: list[object], lease: float) -> list[bool]:
        renewals.append(len(tokens))
        return batch(tokens, lease)  # type: ignore[arg-type]

    driver.heartbeat_many = counted  # type: ignore[method-assign]
    proxy.latency = 0.01
    worker = Worker(["far"], driver=driver, registry=registry, concurrency=JOBS, lease=LEASE, prefetch=0,
                    poll_interval=0.2, rescue_interval=None, summary_interval=None)
    worker.start()
    try:
        deadline = time.monotonic() + 40
        while worker.counts["completed"] < JOBS and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.stop(10.0)
    ran = collections.Counter(runs)
    assert sorted(ran) == list(range(JOBS))
    assert [job for job, times in ran.items() if times > 1] == []
    assert (worker.counts["completed"], worker.counts["lost"]) == (JOBS, 0)
    assert sum(renewals) >= JOBS  # every lease renewed at least once
    assert len(renewals) * 10 <= sum(renewals)  # in calls of ten leases or more
