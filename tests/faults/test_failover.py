"""d2. Primary failover (F05, F06): a primary lost mid-drain and its synchronous standby
promoted run no job twice and lose none; every worker claims again within 2 s, and again
within 2 s once the old primary is back as a standby and the workers' sessions are killed.

The workers' URL lists both servers and leaves ``target_session_attrs`` to the driver,
which asks libpq for the host that takes writes: before the promotion there is none, and
an enqueue is refused as ``JC_DB_UNAVAILABLE`` with nothing stored.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver

from jobcore.clock import SystemClock
from jobcore.errors import BackendUnavailable
from tests.faults import harness as h
from tests.faults.harness import Store
from tests.faults.judge import RECOVERY_BOUND, recovered
from tests.faults.scenarios import FailoverPlan, StandbyLostPlan, run_failover, run_standby_lost

pytestmark = pytest.mark.requires("shared_store")



def test_a_crashed_primary_and_a_promoted_standby_run_no_job_twice_and_every_worker_claims_again_within_2s(
    own_pair: Store, tmp_path: Path
) -> None:
    plan = FailoverPlan()
    report = run_failover(own_pair, plan, tmp_path)
    measures = recovered(report, "failover")
    # The old primary back as a standby, first in the URL, and every worker's session dropped:
    # each connects again, to the host that takes writes.
    assert measures["worker sessions killed then"] >= plan.workers, report.explain()
    killed = measures["slowest worker to claim again after their sessions were killed, s"]
    assert killed <= RECOVERY_BOUND, report.explain()
    refused = measures["enqueue while no host takes writes"]
    assert refused.startswith("JC_DB_UNAVAILABLE: no host of PostgreSQL at host 127.0.0.1"), refused
    assert "takes writes now" in refused, refused
    primary, standby = own_pair.server.primary, own_pair.server.standby
    assert f"port {primary.port}: Connection refused" in refused, refused  # one reason per host
    assert f"port {standby.port}: session is read-only" in refused, refused
    assert len(h.all_jobs(own_pair)) == plan.jobs, "the refused enqueue stored a job"


def test_a_url_listing_the_standby_first_writes_to_the_primary(own_pair: Store) -> None:
    """libpq's own default takes the first host that answers; the driver asks for the one that takes writes."""
    pair = own_pair.server
    with PostgresDriver.from_url(f"{pair.url(standby_first=True)}?schema={own_pair.driver.schema}",
                                 clock=SystemClock()) as driver:
        [job] = driver.enqueue_many([h.work(10)])
        assert own_pair.driver.introspect.get(job.id) is not None
        claimed = driver.claim([h.QUEUE], worker_id="w1", lease=30).claimed
        assert [c.job.id for c in claimed] == [job.id]


def test_a_url_asking_for_any_host_meets_the_standby_and_is_told_why(own_pair: Store) -> None:
    """An explicit target_session_attrs is the caller's: with ``any`` the standby answers first, and refuses."""
    pair = own_pair.server
    url = f"{pair.url(standby_first=True)}?schema={own_pair.driver.schema}&target_session_attrs=any"
    with PostgresDriver.from_url(url, clock=SystemClock()) as driver, pytest.raises(BackendUnavailable) as caught:
        driver.enqueue_many([h.work(10)])
    assert "read-only" in caught.value.cause
    assert "target_session_attrs=read-write" in caught.value.fix
    assert h.all_jobs(own_pair) == []


def test_the_async_driver_also_writes_to_the_primary_when_the_standby_is_listed_first(own_pair: Store) -> None:
    pair = own_pair.server

    async def scenario() -> str:
        url = f"{pair.url(standby_first=True)}?schema={own_pair.driver.schema}"
        async with AsyncPostgresDriver.from_url(url) as driver:
            [job] = await driver.enqueue_many([h.work(10)])
            return job.id

    job_id = asyncio.run(scenario())
    assert own_pair.driver.introspect.get(job_id) is not None


def test_a_lost_synchronous_standby_holds_every_write_and_runs_no_job_twice(own_pair: Store, tmp_path: Path) -> None:
    """The synchronous standby stops for 11 s mid-drain: the primary commits each write and holds
    it, row locks and all, until a standby confirms it. Calls meet their 10 s bound, settles
    retry behind the held ones, and once the standby is back every held write lands: nothing
    runs twice or is lost, and every worker claims again within 2 s. The enqueue that timed out
    meanwhile was stored all the same, and its answer says it may have been."""
    plan = StandbyLostPlan(jobs=2000)
    measures = recovered(run_standby_lost(own_pair, plan, tmp_path), "standby loss")
    assert measures["commits held for the standby when it came back"] > 0
    answer = measures["enqueue while the standby was gone"]
    assert answer.startswith("JC_DB_TIMEOUT: no answer from the database within call_timeout=10s"), answer
    assert "a retried enqueue without a key can store its job twice" in answer
    assert "a synchronous standby that is gone holds every commit" in answer
    assert len(h.all_jobs(own_pair)) == plan.jobs + 1, "the timed-out enqueue was not stored after all"
