"""Rules D on MongoDB: what a crash between a parent's settle and its children's step leaves,
and how it is repaired (docs/rules.md, Dependencies).

A standalone server has no multi-document transaction, so the parent's write and its
children's writes are separate. The crash is injected by making the children's step raise
after the parent's write landed; every outcome is read from the documents themselves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver

from jobcore.records import JobState

LEASE = timedelta(seconds=30)


class Crash(Exception):
    """The process dying between two writes."""


def _doc(driver: MongoDriver, job_id: str) -> dict[str, Any]:
    found = driver._jobs.find_one({"_id": int(job_id)})
    assert found is not None
    return found


def _crash(*_: object, **__: object) -> None:
    raise Crash


def _claim(driver: MongoDriver) -> Any:
    return driver.claim(["p"], worker_id="w", lease=LEASE).claimed[0].token


def test_a_crash_after_the_last_ack_leaves_the_child_waiting_until_rescue(
    driver: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = driver.enqueue("part", queue="p")
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    token = _claim(driver)
    with monkeypatch.context() as patch:
        patch.setattr(driver._family, "settle", _crash)
        with pytest.raises(Crash):
            driver.ack(token, 1)
    assert _doc(driver, parent.id)["state"] == "done"  # the parent's write landed
    stored = _doc(driver, child.id)
    assert (stored["state"], stored.get("waiting")) == ("suspended", True)  # the child's did not
    assert driver.claim(["c"], worker_id="w", lease=LEASE).claimed == ()
    driver.introspect.rescue()
    stored = _doc(driver, child.id)
    assert (stored["state"], "waiting" in stored) == ("ready", False)
    assert [c.job.id for c in driver.claim(["c"], worker_id="w", lease=LEASE).claimed] == [child.id]


def test_a_crash_after_a_parent_failed_is_repaired_by_rescue_with_the_same_cancellation(
    driver: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = driver.enqueue("part", queue="p")
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    grandchild = driver.enqueue("audit", queue="c", depends_on=[child])
    token = _claim(driver)
    with monkeypatch.context() as patch:
        patch.setattr(driver._family, "settle", _crash)
        with pytest.raises(Crash):
            driver.nack(token, "boom", fail=True)
    assert _doc(driver, parent.id)["state"] == "failed"
    assert _doc(driver, child.id)["state"] == "suspended"
    driver.introspect.rescue()
    for job, named, how in ((child, parent, "failed"), (grandchild, child, "cancelled")):
        stored = _doc(driver, job.id)
        assert stored["state"] == "cancelled"
        assert stored["errors"][-1]["message"] == f"parent job {named.id} ended {how}"


def test_a_parent_acked_while_its_child_is_stored_is_caught_by_the_enqueue_recheck(
    driver: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack lands after the enqueue read the parent running and before it marked it a
    parent: the ack sees no children, and the enqueue's re-check releases the child."""
    parent = driver.enqueue("part", queue="p")
    token = _claim(driver)
    mark = driver._family.mark

    def ack_first(ids: Any, session: Any) -> None:
        monkeypatch.setattr(driver._family, "mark", mark)
        assert driver.ack(token, 1) is not None
        mark(ids, session)

    monkeypatch.setattr(driver._family, "mark", ack_first)
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    assert child.state is JobState.READY
    assert _doc(driver, child.id)["state"] == "ready"


def test_a_crash_before_the_enqueue_recheck_is_repaired_by_rescue(
    driver: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = driver.enqueue("part", queue="p")
    token = _claim(driver)
    mark = driver._family.mark

    def ack_first(ids: Any, session: Any) -> None:
        monkeypatch.setattr(driver._family, "mark", mark)
        driver.ack(token, 1)
        mark(ids, session)

    monkeypatch.setattr(driver._family, "mark", ack_first)
    monkeypatch.setattr(driver._family, "recheck", _crash)
    with pytest.raises(Crash):
        driver.enqueue("report", queue="c", depends_on=[parent])
    monkeypatch.undo()
    [stored] = driver._jobs.find({"name": "report"})
    assert stored["state"] == "suspended"  # stored, and missed by the ack
    driver.introspect.rescue()
    assert _doc(driver, str(stored["_id"]))["state"] == "ready"


def test_a_batch_parent_whose_key_is_taken_meanwhile_links_its_children_to_the_holder(
    driver: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent enqueue takes the key of a group's parent between the group's key check and
    its insert: the parent is answered by that holder, and the child waits on the holder."""
    backend = driver._backend
    real = backend._insert
    taken: list[Any] = []

    def insert(docs: Any, session: Any) -> Any:
        if not taken:  # the concurrent enqueue lands first (its own insert goes straight through)
            taken.append(True)
            taken.append(driver.enqueue("part", queue="p", key="k"))
        return real(docs, session)

    monkeypatch.setattr(backend, "_insert", insert)
    first, report = driver.enqueue_many([
        {"name": "part", "queue": "p", "key": "k"}, {"name": "report", "queue": "c", "depends_on": [0]},
    ])
    holder = taken[1]
    assert first.duplicate
    assert first.id == holder.id
    assert [j.id for j in driver.introspect.parents(report.id)] == [holder.id]
    assert _doc(driver, holder.id).get("has_children") is True
    token = _claim(driver)
    driver.ack(token, 1)
    assert _doc(driver, report.id)["state"] == "ready"
