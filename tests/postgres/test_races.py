"""Races the database must settle: one key holder among concurrent enqueues, one claimer per job."""

from __future__ import annotations

import threading
from typing import Any

from jobcore.records import JobFilter


def _together(count: int, fn: Any) -> list[Any]:
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_enqueues_of_one_key_insert_one_job(driver: Any) -> None:
    """Eight threads enqueue the same key at once: one row, and every answer names it."""
    for round_ in range(5):
        key = f"k{round_}"
        jobs = _together(8, lambda i, key=key: driver.enqueue("once", {"i": i}, key=key))
        assert len({j.id for j in jobs}) == 1
        assert sum(not j.duplicate for j in jobs) == 1
    assert len(driver.introspect.list(JobFilter(name="once")).jobs) == 5


def test_concurrent_enqueue_many_with_shared_keys(driver: Any) -> None:
    """Batches racing on overlapping keys each answer the single live holder per key."""
    batches = _together(4, lambda i: driver.enqueue_many([{"name": "b", "key": f"k{n}"} for n in range(i, i + 6)]))
    holders: dict[str, str] = {}
    for batch in batches:
        for job in batch:
            assert holders.setdefault(job.key, job.id) == job.id
    assert len(driver.introspect.list(JobFilter(name="b")).jobs) == len(holders) == 9


def test_batches_racing_on_keys_in_opposite_orders_do_not_deadlock(driver: Any) -> None:
    """Two batches naming the same keys in opposite orders both finish, each key held once."""
    keys = [f"k{n}" for n in range(1000)]  # long enough for two unsorted batches to deadlock
    for _ in range(2):
        driver.introspect.cancel_many(JobFilter(name="r"))
        batches = _together(2, lambda i: driver.enqueue_many(
            [{"name": "r", "key": k} for k in (keys if i == 0 else list(reversed(keys)))]
        ))
        first = {j.key: j.id for j in batches[0]}
        assert {j.key: j.id for j in batches[1]} == first
        assert [j.key for j in batches[0]] == keys  # answers in input order


def test_concurrent_claimers_never_share_a_job(driver: Any) -> None:
    """Four claimers drain 400 jobs in batches: every job is handed out exactly once."""
    driver.enqueue_many([{"name": "j", "payload": n} for n in range(400)])

    def drain(i: int) -> list[str]:
        got: list[str] = []
        while True:
            claimed = driver.claim(["default"], worker_id=f"w{i}", limit=7, lease=30).claimed
            if not claimed:
                return got
            got.extend(c.job.id for c in claimed)
            driver.ack_many([(c.token, None) for c in claimed])

    taken = [job for got in _together(4, drain) for job in got]
    assert len(taken) == len(set(taken)) == 400
