"""Connection slots taken (F05, F06): a server that refuses the workers' connections for want of
a slot runs no job twice, loses none, and is not asked again and again.

Other connections of the workers' role hold every slot its ``CONNECTION LIMIT`` allows, and
the workers' sessions are killed: each connection a worker tries is refused with "too many
connections for role", as when another fleet or an application holds them (max_connections
refuses the same way). Before, each refusal was answered as ``JC_DB_AUTH`` "refused the
credentials ... retrying will not help", and every worker tried about 20 connections a
second, each one a backend process the full server had to start and turn away.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Store
from tests.faults.judge import recovered
from tests.faults.scenarios import SlotsPlan, run_slots_taken

pytestmark = pytest.mark.requires("shared_store")

REFUSALS_BOUND = 6.0
"""Connections a worker may try a second while every slot is taken: its pool asks again at
most every half second (the listener about once a second); before, 14 to 25."""


def test_slots_taken_run_no_job_twice_and_every_worker_claims_again_within_2s(
    own_postgres_as_app: Store, tmp_path: Path
) -> None:
    """Every slot of the workers' role held by others for 5 s mid-drain, their sessions killed."""
    report = run_slots_taken(own_postgres_as_app, SlotsPlan(jobs=2000), tmp_path)
    rate = recovered(report, "slot shortage")["connections refused for want of a slot, per worker per second"]
    assert 0 < rate <= REFUSALS_BOUND, report.explain()
    logs = "\n".join(path.read_text(errors="replace") for path in sorted((tmp_path / "logs").glob("*.log")))
    assert "no connection slot free for role 'jc_app'" in logs, report.explain()
    assert "JC_DB_AUTH" not in logs, report.explain()
    assert "refused the credentials" not in logs, report.explain()
