"""``jobcore schedules`` / ``jobcore scheduler`` and the scheduler thread inside the worker.

In-process tests hand the parity suite's ``driver`` (every registered driver, on a
``ManualClock``) to ``jobcore.cli.main(argv, driver=...)``; the subprocess tests run the
installed CLI against ``memory://`` on wall time (signals, declared schedules firing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver
from jobcore.parity._faulty import FaultyDriver

from jobcore import cli
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import OptionInvalid
from jobcore.records import ScheduleOutcome
from jobcore.registry import Registry
from jobcore.scheduler import Scheduler
from jobcore.schedules import ScheduleDefinition, cron, every
from jobcore.worker import Worker

ROOT = Path(__file__).resolve().parents[1]


def _run(driver: JobDriver, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(argv), driver=driver)
    out, err = capsys.readouterr()
    return status, out, err


def _two_schedules(driver: JobDriver, clock: ManualClock) -> Scheduler:
    scheduler = Scheduler(driver, registry=Registry(), definitions=[
        ScheduleDefinition(name="nightly", trigger=cron("30 2 * * *", tz="Europe/Warsaw"), job="report"),
        ScheduleDefinition(name="often", trigger=every(timedelta(minutes=5), overlap=False), job="sync", queue="q"),
    ])
    scheduler.tick()
    clock.advance(minutes=5)
    scheduler.tick()
    return scheduler


def test_schedules_lists_next_and_last_occurrence_and_outcome(
    driver: JobDriver, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table and --json show spec, zone, next and last occurrence, last outcome and job, paused."""
    _two_schedules(driver, clock)
    status, out, _ = _run(driver, capsys, "schedules")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "SPEC", "TZ", "NEXT", "LAST", "OUTCOME", "LAST", "JOB", "PAUSED"]
    assert lines[1].split() == ["nightly", "30", "2", "*", "*", "*", "Europe/Warsaw", "2030-01-02", "01:30:00Z",
                                "-", "-", "-", "no"]
    often = lines[2].split()
    assert often[:5] == ["often", "every", "5m", "-", "2030-01-01"]
    assert often[-3:] == ["fired", often[-2], "no"]
    status, out, _ = _run(driver, capsys, "schedules", "--json")
    rows = {r["name"]: r for r in json.loads(out)["schedules"]}
    assert rows["often"]["next_occurrence"] == "2030-01-01T12:10:00.000Z"
    assert rows["often"]["last_occurrence"] == "2030-01-01T12:05:00.000Z"
    assert rows["often"]["last_outcome"] == "fired"
    assert rows["often"]["last_job_id"] is not None
    assert rows["often"]["overlap"] is False
    assert rows["nightly"]["last_occurrence"] is None
    assert rows["nightly"]["definition"]["expr"] == "30 2 * * *"


def test_schedules_pause_resume_remove_and_unknown_names(
    driver: JobDriver, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """pause and resume steer a schedule (options before or after the name); an unknown name exits 3."""
    scheduler = _two_schedules(driver, clock)
    assert _run(driver, capsys, "schedules", "pause", "often")[:2] == (0, "schedule often paused\n")
    assert driver.schedules.get("often").paused  # type: ignore[union-attr]
    clock.advance(minutes=10)
    assert scheduler.tick() == []
    status, out, _ = _run(driver, capsys, "schedules", "--json", "resume", "often")
    assert status == 0
    assert json.loads(out)["paused"] is False
    assert json.loads(out)["watermark"] == "2030-01-01T12:15:00.000Z"
    assert scheduler.tick() == []  # the pause's occurrences never fire
    status, out, err = _run(driver, capsys, "schedules", "pause", "nope")
    assert (status, out) == (3, "")
    assert err.startswith("error JC_SCHEDULE_NOT_FOUND: no schedule named 'nope'\n  fix: ")
    assert _run(driver, capsys, "schedules", "remove", "nightly", "--json")[:2] == (
        0, '{\n  "name": "nightly",\n  "removed": true\n}\n')
    assert _run(driver, capsys, "schedules", "remove", "nightly")[0] == 3
    assert [s.name for s in driver.schedules.list()] == ["often"]


def test_schedules_on_an_empty_store(driver: JobDriver, capsys: pytest.CaptureFixture[str]) -> None:
    """No schedules: a hint in text, an empty list in JSON."""
    assert "no schedules" in _run(driver, capsys, "schedules")[1]
    assert json.loads(_run(driver, capsys, "schedules", "--json")[1]) == {"schedules": []}


def test_worker_runs_a_scheduler_thread_unless_told_not_to() -> None:
    """A worker declares its registry's schedules and fires them; scheduler=False runs none."""
    clock = ManualClock()
    driver = MemoryDriver(clock=clock)
    registry = Registry()
    registry.job(name="tick", queue="ticks", schedule=every(60))(lambda payload: None)
    counted = FaultyDriver(driver)  # no faults: it counts the worker's calls
    off = Worker("ticks", driver=counted, registry=registry, scheduler=False, poll_interval=0.05).start()  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while counted.calls["claim"] < 3:  # the worker is past its start-up and claiming
        assert time.monotonic() < deadline, "the worker never claimed"
        time.sleep(0.01)
    assert off.stop(5)
    assert off.scheduler is None
    assert driver.schedules.list() == []
    fired: list[Any] = []
    worker = Worker("ticks", driver=driver, registry=registry, poll_interval=0.05,
                    on_settled=lambda job, outcome: fired.append((job.key, outcome))).start()
    try:
        deadline = time.monotonic() + 10
        while driver.schedules.get("tick") is None:
            assert time.monotonic() < deadline, "the worker's scheduler never declared its schedule"
            time.sleep(0.02)
        clock.advance(minutes=1)
        while not fired:
            assert time.monotonic() < deadline, "the scheduled job never ran"
            time.sleep(0.02)
    finally:
        assert worker.stop(5)
    assert fired == [("schedule:tick@2030-01-01T00:01:00.000Z", "completed")]
    assert driver.schedules.get("tick").last_outcome is ScheduleOutcome.FIRED  # type: ignore[union-attr]
    driver.close()


def test_worker_command_takes_no_scheduler() -> None:
    """``jobcore worker --no-scheduler`` parses; the default runs the scheduler."""
    parser = cli.build_parser()
    assert parser.parse_args(["worker", "app", "--no-scheduler"]).no_scheduler is True
    assert parser.parse_args(["worker", "app"]).no_scheduler is False


APP = textwrap.dedent(
    """
    from datetime import timedelta
    from jobcore import every, job

    @job(name="cli.beat", queue="beats", schedule=every(timedelta(seconds=1)))
    def beat(payload):
        return None
    """
)


def test_scheduler_command_declares_fires_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``jobcore scheduler --app`` declares the module's schedules, fires them on wall time, exits 0 on SIGTERM."""
    app = tmp_path / "beat_app.py"
    app.write_text(APP)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore.cli", "scheduler", "--url", "memory://", "--app", str(app),
         "--interval", "0.2"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
        env={**{k: v for k, v in os.environ.items() if k != "JOBCORE_URL"}, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not any("enqueued job" in line for line in seen):
            assert time.monotonic() < deadline, seen
            line = proc.stderr.readline()
            assert line, seen  # the process ended early
            seen.append(line)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        seen.extend(proc.stderr.read().splitlines())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    text = "\n".join(seen)
    assert "declared 1 schedules: cli.beat" in text
    assert "stopped" in seen[-1]
    assert "schedule cli.beat occurrence " in text
    assert "SIGTERM received: stopping the scheduler" in text


def test_scheduler_command_refuses_bad_setups(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No URL is JC_NO_DRIVER (exit 5); an interval that is not positive and finite is
    JC_OPTION_INVALID (exit 2), refused before connecting (an infinite one used to end the
    scheduler's thread in OverflowError)."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)
    assert cli.main(["scheduler"]) == 5
    assert "JC_NO_DRIVER" in capsys.readouterr().err
    for interval, says in (("0", "must be positive, got 0s"), ("-2", "must be positive, got -2s"),
                           ("nan", "must be finite, got nan"), ("inf", "must be finite, got inf"),
                           ("700000", "=700000s is out of range")):
        assert cli.main(["scheduler", "--interval", interval, "--url", "postgresql://nowhere.invalid/db"]) == 2
        assert f"error JC_OPTION_INVALID: --interval{' ' if says.startswith('must') else ''}{says}" in (
            capsys.readouterr().err
        )


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), timedelta(days=8)])
def test_scheduler_refuses_an_interval_that_is_not_positive_and_finite(interval: Any) -> None:
    """Scheduler(interval=...) refuses what the CLI refuses, with JC_OPTION_INVALID."""
    with pytest.raises(OptionInvalid) as refusal:
        Scheduler(MemoryDriver(), registry=Registry(), interval=interval)
    assert refusal.value.code == "JC_OPTION_INVALID"
    assert refusal.value.fix
