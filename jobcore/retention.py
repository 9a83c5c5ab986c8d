"""Periodic pruning of finished jobs, one pruner fleet-wide at a time (rules R).

A :class:`Pruner` wakes every ``interval`` seconds (real time, with a little jitter so a
fleet started together spreads out), takes the fleet lease :data:`PRUNE_LEASE_KEY`
through ``driver.leases`` (limit 1) and, only while it holds it, calls
``introspect.prune`` in passes until nothing is eligible or the run's bound
(``max_passes`` passes of ``limit`` rows) is reached. Each worker runs one (see
``Worker(retention=...)``); whichever takes the lease prunes, the others find it
held and go back to sleep.

The lease is taken for ``interval`` (in the driver's clock) and renewed before each
further pass, and it is *not* released when a run ends: it stands as "pruned
recently" until it lapses, so a fleet of N workers prunes about once per interval
rather than N times. :meth:`Pruner.stop` releases it, so a restarted fleet is not
kept waiting. Pruning is safe to overlap anyway (every delete repeats its guard), so
a run that outlives its lease costs work, never correctness.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import timedelta

from jobcore import events
from jobcore import validate as v
from jobcore.driver import JobDriver
from jobcore.errors import OptionInvalid
from jobcore.records import JobState, PruneResult, RetentionPolicy

__all__ = ["DEFAULT_PRUNE_INTERVAL", "DEFAULT_PRUNE_PASSES", "PRUNE_LEASE_KEY", "Pruner"]

logger = logging.getLogger("jobcore.retention")

PRUNE_LEASE_KEY = "jobcore:prune"
"""The fleet lease a pruner holds while it prunes (limit 1: one pruner at a time)."""
DEFAULT_PRUNE_INTERVAL = 300.0
"""Seconds between pruning runs: often enough that one run's work stays small."""
DEFAULT_PRUNE_PASSES = 10
"""Most ``introspect.prune`` calls in one run (10 x 10,000 rows by default)."""
_JITTER = 0.1
_MIN_INTERVAL = 0.001
_MAX_INTERVAL = v.MAX_LEASE.total_seconds()


class Pruner:
    """Prunes ``driver``'s finished jobs by ``policy`` every ``interval`` seconds.

    Args:
        driver: The store.
        holder: This pruner's name in the fleet lease (a worker passes its worker id).
        policy: The retention policy (default: :class:`RetentionPolicy`'s defaults).
        interval: Seconds between runs; also the lease's time to live.
        limit: Rows one ``prune`` call deletes at most (1..MAX_PRUNE_ROWS).
        batch: Rows per delete step (1..MAX_BULK_ROWS).
        max_passes: ``prune`` calls one run makes at most.
    """

    def __init__(
        self,
        driver: JobDriver,
        *,
        holder: str,
        policy: RetentionPolicy | None = None,
        interval: float = DEFAULT_PRUNE_INTERVAL,
        limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH,
        max_passes: int = DEFAULT_PRUNE_PASSES,
    ) -> None:
        self.policy, self.limit, self.batch = v.check_prune(policy, limit, batch)
        self.driver = driver
        self.holder = v.check_name(holder, "holder")
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not (_MIN_INTERVAL <= interval <= _MAX_INTERVAL)
        ):
            raise OptionInvalid(
                f"prune interval must be seconds from {_MIN_INTERVAL} to {_MAX_INTERVAL:g}, got {interval!r:.40}",
                "pass e.g. 300 (five minutes)",
            )
        self.interval = float(interval)
        self.max_passes = v.check_int(max_passes, "max_passes", 1, 1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False  # took the lease at least once: stop() has something to free
        self._rng = random.Random()

    # -- one run -------------------------------------------------------------------------

    def run_once(self) -> PruneResult | None:
        """Take the fleet lease and prune until nothing is eligible (at most ``max_passes`` calls).

        Answers the rows removed over the run and those still eligible after it, or
        ``None`` when another pruner holds the lease. Errors of the store propagate.
        """
        leases, ttl = self.driver.leases, timedelta(seconds=self.interval)
        if not leases.acquire(PRUNE_LEASE_KEY, 1, self.holder, ttl):
            return None
        self._held = True
        removed = dict.fromkeys(sorted(s for s in JobState if s.is_finished), 0)
        result: PruneResult | None = None
        passes = 0
        for done in range(self.max_passes):
            # Only while holding the lease: a pruner that lost it (it lapsed during a long
            # pass and another took it) stops here.
            if done and (self._stop.is_set() or not leases.renew(PRUNE_LEASE_KEY, self.holder, ttl)):
                break
            result = self.driver.introspect.prune(self.policy, limit=self.limit, batch=self.batch)
            passes += 1
            for state, count in result.removed.items():
                removed[JobState(state)] += count
            if result.total_remaining == 0 or result.total_removed == 0:
                break
        assert result is not None  # the first pass always runs
        summary = PruneResult(removed=removed, remaining=dict(result.remaining))
        self._announce(summary, passes)
        return summary

    def _announce(self, summary: PruneResult, passes: int) -> None:
        for state, count in summary.removed.items():
            if count:
                events.emit(
                    "pruned",
                    None,
                    "pruned %d %s jobs older than %s",
                    count,
                    state.value,
                    self.policy.age(state),
                    outcome=state.value,
                    count=count,
                    worker_id=self.holder,
                )
        if summary.total_remaining:
            logger.warning(
                "pruning left %d eligible jobs after %d passes; they go in the next run (raise the limit or "
                "shorten the prune interval if this persists)",
                summary.total_remaining,
                passes,
            )

    # -- the background thread -----------------------------------------------------------

    def start(self) -> Pruner:
        """Run :meth:`run_once` every ``interval`` seconds in a daemon thread; answers itself."""
        if self._thread is not None:
            raise RuntimeError("this pruner was already started; make a new one")
        self._thread = threading.Thread(target=self._loop, name=f"jobcore-pruner-{self.holder}", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        # The first run waits one interval too: a worker that starts (or a test that
        # starts one) does not delete anything in its first minutes.
        while not self._stop.wait(self.interval * (1 + self._rng.uniform(0, _JITTER))):
            try:
                self.run_once()
            except Exception:  # a store outage must not end pruning for the worker's life
                logger.exception("pruning run failed; trying again in %gs", self.interval)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (a run in progress ends after its current pass) and free the lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if not self._held:
            return
        try:
            self.driver.leases.release(PRUNE_LEASE_KEY, self.holder)
        except Exception:  # the lease lapses on its own; stopping must not fail on a store outage
            logger.warning("could not release the prune lease; it lapses on its own", exc_info=True)
