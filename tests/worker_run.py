"""Running a worker in a thread until its jobs are done: shared by the worker's own tests."""

from __future__ import annotations

import threading
import time
from typing import Any

from jobcore.records import JobState
from jobcore.worker import Worker


def run_until_done(worker: Worker, store: Any, jobs: int, what: str = "the jobs") -> None:
    """Run ``worker`` in a thread until ``store`` (a driver, read through its introspection)
    holds ``jobs`` done jobs, then stop it and wait for its thread to end."""
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while store.introspect.stats().count(JobState.DONE) < jobs:
        assert time.monotonic() < deadline, f"the worker did not finish {what}"
        time.sleep(0.01)
    worker.request_stop()
    thread.join(10)
    assert not thread.is_alive(), "the worker did not stop"
