"""The MongoDB driver's prune reads: each state's oldest finished rows come straight off jc_finished."""

from __future__ import annotations

from typing import Any

from jobcore.drivers.mongo import MongoDriver
from jobcore.drivers.mongo import _introspect as intro
from jobcore.parity._support import finished_job

from jobcore.clock import ManualClock
from jobcore.records import JobState, RetentionPolicy


def _stages(plan: Any) -> list[str]:
    """Every ``stage`` name anywhere in an explain document (classic or slot-based shape)."""
    if isinstance(plan, dict):
        own = [plan["stage"]] if isinstance(plan.get("stage"), str) else []
        return own + [s for value in plan.values() for s in _stages(value)]
    if isinstance(plan, list):
        return [s for value in plan for s in _stages(value)]
    return []


def test_prune_pick_is_an_index_range_in_prune_order(driver: MongoDriver, clock: ManualClock) -> None:
    """The per-state pick, as the driver sends it (filter, sort, hint), plans an index scan.

    MongoDB reads jc_finished backwards and needs no sort stage; the stand-in server adds
    one after its index scan, so only the scan is checked.
    """
    for state in ("done", "done", "dead"):
        finished_job(driver, state)
    query = intro.prune_query(JobState.DONE, clock.now())
    command = {
        "find": driver._jobs.name,
        "filter": query,
        "sort": dict(intro.PRUNE_ORDER),
        "hint": intro.FINISHED_INDEX,
        "limit": 2,
        "projection": {"_id": 1, "finished_at": 1},
    }
    explained = driver._jobs.database.command("explain", command, verbosity="queryPlanner")
    stages = _stages(explained.get("queryPlanner", explained))
    assert "IXSCAN" in stages
    assert "COLLSCAN" not in stages
    assert driver.introspect.prune(RetentionPolicy(done=0), limit=2).removed[JobState.DONE] == 2
