"""``jobcore worker`` and ``jobcore demo`` from the command line."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore.cli import _process, main
from jobcore.cli._process import BatchedStderrHandler
from jobcore.cli.worker import GC_YOUNG_THRESHOLD
from jobcore.errors import OptionInvalid
from jobcore.records import JobState
from jobcore.registry import Registry, default_registry
from jobcore.worker import Worker
from tests.worker_run import run_until_done

JOBS = textwrap.dedent(
    """
    from jobcore import job

    @job(name="cli.hello", queue="cli")
    def hello(payload):
        if payload == "stop":
            raise SystemExit(0)  # a shutdown signal from a handler stops the worker
        return f"hello {payload}"
    """
)


@pytest.fixture
def jobs_file(tmp_path: Path) -> Path:
    path = tmp_path / "cli_jobs.py"
    path.write_text(JOBS)
    yield path
    default_registry.remove("cli.hello")
    sys.modules.pop("cli_jobs", None)


def test_worker_command_runs_the_jobs_a_module_declares(jobs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command imports the module, claims its queue, logs with job id and name, and returns 0 when stopped."""
    driver = MemoryDriver()
    codes: list[int] = []
    runner = threading.Thread(
        target=lambda: codes.append(main(["worker", str(jobs_file), "--poll-interval", "0.05"], driver=driver)),
    )
    runner.start()
    first = driver.enqueue("cli.hello", "ada", queue="cli")
    deadline = time.monotonic() + 5
    while driver.introspect.get(first.id).state is not JobState.DONE:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    driver.enqueue("cli.hello", "stop", queue="cli")
    runner.join(5)
    assert codes == [0]
    assert driver.introspect.get(first.id).result == "hello ada"  # type: ignore[union-attr]
    err = capsys.readouterr().err
    assert f"[job {first.id} cli.hello] job {first.id} (cli.hello) completed" in err


def test_worker_command_drains_on_sigterm(jobs_file: Path) -> None:
    """A SIGTERM makes the worker process drain and exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore.cli", "worker", str(jobs_file), "--url", "memory://", "--poll-interval", "0.1"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        assert "started on cli" in line, line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert "SIGTERM received: draining" in rest
    assert "stopped (drained)" in rest


def test_worker_command_refuses_to_run_without_a_url(
    jobs_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --url and no JOBCORE_URL exits 5 with JC_NO_DRIVER, cause and fix, like every other command."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)
    assert main(["worker", str(jobs_file)]) == 5
    assert "JC_NO_DRIVER" in capsys.readouterr().err


def test_worker_command_refuses_a_missing_or_empty_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module that cannot be imported, or that declares no job, exits 5."""
    monkeypatch.setattr(default_registry, "_handles", {})  # other test modules registered jobs at import
    assert main(["worker", "no_such_module_here", "--url", "memory://"]) == 5
    assert "JC_CONFIGURATION" in capsys.readouterr().err
    empty = tmp_path / "empty_jobs.py"
    empty.write_text("")
    assert main(["worker", str(empty), "--url", "memory://"]) == 5
    assert "declares no jobs" in capsys.readouterr().err


def test_worker_command_refuses_a_progress_interval_that_is_not_a_positive_duration(
    jobs_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--progress-interval 0 exits 2 with JC_OPTION_INVALID naming the option; nothing is claimed."""
    driver = MemoryDriver()
    job = driver.enqueue("cli.hello", "ada", queue="cli")
    assert main(["worker", str(jobs_file), "--progress-interval", "0"], driver=driver) == 2
    err = capsys.readouterr().err
    assert "error JC_OPTION_INVALID: progress_interval" in err
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


@pytest.mark.parametrize("queues", ["", " ", ",", " , ,"], ids=["empty", "space", "comma", "commas"])
def test_worker_command_refuses_queues_naming_no_queue(
    jobs_file: Path, capsys: pytest.CaptureFixture[str], queues: str
) -> None:
    """--queues naming no queue exits 2 with JC_CLAIM_QUEUES_EMPTY; nothing is imported or claimed."""
    driver = MemoryDriver()
    job = driver.enqueue("cli.hello", "ada", queue="cli")
    assert main(["worker", str(jobs_file), "--queues", queues], driver=driver) == 2
    err = capsys.readouterr().err
    assert "error JC_CLAIM_QUEUES_EMPTY: --queues" in err
    assert "fix: name the queues to run" in err
    assert "started on" not in err
    assert "cli_jobs" not in sys.modules  # refused before the module was imported
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


def test_worker_command_queues_ignore_blank_names(jobs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--queues ' cli, ,' runs queue cli alone."""
    driver = MemoryDriver()
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(main(
        ["worker", str(jobs_file), "--queues", " cli, ,", "--poll-interval", "0.05"], driver=driver,
    )))
    runner.start()
    driver.enqueue("cli.hello", "stop", queue="cli")
    runner.join(5)
    assert codes == [0]
    assert "started on cli (" in capsys.readouterr().err


@pytest.mark.parametrize("seconds", ["-1", "nan", "inf", "700000"])
def test_worker_command_refuses_a_drain_timeout_out_of_range(
    jobs_file: Path, capsys: pytest.CaptureFixture[str], seconds: str
) -> None:
    """--drain-timeout negative, not finite or over 7 days exits 2 with JC_OPTION_INVALID; it
    used to be taken as 0 (negative, NaN) without a word. Nothing is claimed."""
    driver = MemoryDriver()
    job = driver.enqueue("cli.hello", "ada", queue="cli")
    assert main(["worker", str(jobs_file), "--drain-timeout", seconds], driver=driver) == 2
    err = capsys.readouterr().err
    assert "error JC_OPTION_INVALID: drain_timeout" in err
    assert "started on" not in err
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


def test_worker_drain_timeout_is_checked_on_stop_too() -> None:
    """Worker(drain_timeout=...) and request_stop(drain_timeout=...) refuse what the CLI refuses;
    a refused request_stop leaves the worker running. Zero is a drain that abandons at once."""
    with pytest.raises(OptionInvalid, match="drain_timeout=-1s is out of range") as refusal:
        Worker(["cli"], driver=MemoryDriver(), drain_timeout=-1)
    assert refusal.value.code == "JC_OPTION_INVALID"
    registry = Registry()

    @registry.job(name="cli.twice", queue="cli")
    def twice(payload: int) -> int:
        return payload * 2

    driver = MemoryDriver()
    worker = Worker(
        ["cli"], driver=driver, registry=registry, drain_timeout=0, poll_interval=0.01, rescue_interval=None,
        retention=None, scheduler=False,
    )
    assert worker.drain_timeout == 0.0
    with pytest.raises(OptionInvalid):
        worker.request_stop(drain_timeout=float("nan"))
    twice.enqueue(21, driver=driver)
    run_until_done(worker, driver, 1, "the job enqueued after the refused stop")


def _run_until_done(jobs_file: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[str, str]:
    """Run ``jobcore worker`` with ``options`` on a memory driver until one job is done and a
    summary line counted it, then stop it; answers the job's id and everything it logged."""
    driver = MemoryDriver()
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(main(
        ["worker", str(jobs_file), "--poll-interval", "0.05", "--summary-interval", "0.05", *options], driver=driver,
    )))
    runner.start()
    first = driver.enqueue("cli.hello", "ada", queue="cli")
    err = ""
    deadline = time.monotonic() + 10
    while "1 completed" not in err and time.monotonic() < deadline:
        time.sleep(0.02)
        err += capsys.readouterr().err
    driver.enqueue("cli.hello", "stop", queue="cli")
    runner.join(5)
    assert codes == [0]
    assert driver.introspect.get(first.id).state is JobState.DONE  # type: ignore[union-attr]
    return first.id, err + capsys.readouterr().err


def test_worker_command_log_level_sets_a_logger_apart(jobs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--log-level INFO,jobcore.events=WARNING keeps the banner and the summary lines and drops the
    line per job; WARNING,jobcore.events=INFO the other way round. The levels are put back after."""
    events = logging.getLogger("jobcore.events")
    before = (logging.getLogger().level, events.level)
    job_id, err = _run_until_done(jobs_file, capsys, "--log-level", "INFO,jobcore.events=WARNING")
    assert " started on " in err  # the banner
    assert ": 1 completed, " in err  # the summary line
    assert f"job {job_id} (cli.hello) completed" not in err
    assert (logging.getLogger().level, events.level) == before

    job_id, err = _run_until_done(jobs_file, capsys, "--log-level", "warning,jobcore.events=info")
    assert " started on " not in err
    assert ": 1 completed, " not in err
    assert f"[job {job_id} cli.hello] job {job_id} (cli.hello) completed" in err
    assert (logging.getLogger().level, events.level) == before


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("loud", "'loud' is not a logging level"),
        ("INFO,jobcore.events=", "'' is not a logging level"),
        ("51", "'51' is not a logging level"),
        ("INFO,=WARNING", "'=WARNING' names no logger"),
        ("INFO,job core=DEBUG", "'job core=DEBUG' names no logger"),
        ("INFO,DEBUG", "gives the level twice"),
        ("jobcore=INFO,jobcore=DEBUG", "gives logger jobcore twice"),
        ("", "names no level"),
        (" , ", "names no level"),
    ],
)
def test_worker_command_refuses_a_bad_log_level(
    jobs_file: Path, capsys: pytest.CaptureFixture[str], spec: str, says: str
) -> None:
    """A --log-level that is not LEVEL[,LOGGER=LEVEL...] exits 2 with JC_OPTION_INVALID, cause
    and fix, before the module is imported or a job claimed; no logging is set up."""
    driver = MemoryDriver()
    job = driver.enqueue("cli.hello", "ada", queue="cli")
    handlers = list(logging.getLogger().handlers)
    assert main(["worker", str(jobs_file), "--log-level", spec], driver=driver) == 2
    err = capsys.readouterr().err
    assert f"error JC_OPTION_INVALID: --log-level {spec!r}" in err
    assert says in err
    assert "fix: pass a level (DEBUG, INFO, WARNING, ERROR, CRITICAL, or a number 0-50)" in err
    assert "cli_jobs" not in sys.modules
    assert logging.getLogger().handlers == handlers
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


def test_log_level_environment_takes_the_same_form(
    jobs_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """JOBCORE_LOG_LEVEL is read as --log-level is, for the worker and the scheduler alike."""
    assert _process.log_levels("debug, jobcore.events = 25 ,jobcore.worker=Warn") == {
        "": logging.DEBUG, "jobcore.events": 25, "jobcore.worker": logging.WARNING,
    }
    assert _process.log_levels("jobcore.events=ERROR") == {"jobcore.events": logging.ERROR, "": logging.INFO}
    monkeypatch.setenv("JOBCORE_LOG_LEVEL", "INFO,noisy")
    assert main(["worker", str(jobs_file)], driver=MemoryDriver()) == 2
    err = capsys.readouterr().err
    assert "error JC_OPTION_INVALID: --log-level 'INFO,noisy': 'noisy' is not a logging level" in err
    assert main(["scheduler", "--url", "memory://"]) == 2
    assert "error JC_OPTION_INVALID: --log-level 'INFO,noisy'" in capsys.readouterr().err


def test_demo_runs_to_completion_and_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """A small demo run on the memory driver finishes, prints the table, and passes its own checks."""
    assert main(["demo", "--jobs", "200", "--workers", "2", "--seconds", "30", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "dead-letter queue instead of looping" in out
    assert "killed with 4 uploads in flight" in out
    assert "never reclaimed" in out
    assert "checks: no job lost" in out
    assert "done" in out


@pytest.mark.parametrize("option", [["--seconds", "nan"], ["--seconds", "inf"], ["--seconds", "0"], ["--jobs", "0"]])
def test_demo_refuses_bad_sizes(capsys: pytest.CaptureFixture[str], option: list[str]) -> None:
    """A demo asked to run no job, or for no, infinite or NaN time (NaN used to be taken and run
    past every deadline), exits 2 with JC_OPTION_INVALID before anything runs."""
    assert main(["demo", *option]) == 2
    captured = capsys.readouterr()
    says = "error JC_OPTION_INVALID: --jobs and --workers must be >= 1 and --seconds a finite number > 0"
    assert says in captured.err
    assert captured.out == ""


class _Writes:
    """A stream that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("jobcore.test", level, __file__, 1, message, (), None)


def test_batched_stderr_writes_info_lines_together_within_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """INFO lines wait (at most FLUSH_DELAY) and go out in one write, in order."""
    monkeypatch.setattr(_process, "FLUSH_DELAY", 1.0)  # room for a slow machine between the lines
    stream = _Writes()
    handler = BatchedStderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    try:
        for n in range(5):
            handler.handle(_record(logging.INFO, f"line {n}"))
        assert stream.writes == []  # nothing yet: they wait for company
        deadline = time.monotonic() + 5
        while not stream.writes and time.monotonic() < deadline:
            time.sleep(0.005)
        assert stream.writes == ["line 0\nline 1\nline 2\nline 3\nline 4\n"]
    finally:
        handler.close()


def test_batched_stderr_writes_a_warning_at_once_after_what_waited() -> None:
    """A WARNING never waits, and the INFO lines before it come out first; close() writes the rest."""
    stream = _Writes()
    handler = BatchedStderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(_record(logging.INFO, "a"))
    handler.handle(_record(logging.WARNING, "b"))
    assert stream.writes == ["INFO a\nWARNING b\n"]
    handler.handle(_record(logging.INFO, "c"))
    handler.close()
    assert "".join(stream.writes) == "INFO a\nWARNING b\nINFO c\n"


@pytest.fixture
def gc_thresholds() -> None:
    """Python's thresholds for the test (tests/conftest.py puts the suite's back after it)."""
    gc.set_threshold(700, 10, 10)


def _run_once(module: Path) -> None:
    """``jobcore worker MODULE`` until one job of it has run, then stopped by a handler's SystemExit."""
    driver = MemoryDriver()
    codes: list[int] = []
    runner = threading.Thread(
        target=lambda: codes.append(main(["worker", str(module), "--poll-interval", "0.05"], driver=driver)),
    )
    runner.start()
    driver.enqueue("cli.hello", "ada", queue="cli")
    driver.enqueue("cli.hello", "stop", queue="cli")
    runner.join(10)
    assert codes == [0]


def test_worker_command_collects_young_objects_less_often(gc_thresholds: None, jobs_file: Path) -> None:
    """The worker process raises the youngest generation's threshold from Python's 700 (issue 22)."""
    _run_once(jobs_file)
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)


def test_worker_command_keeps_the_gc_thresholds_a_jobs_module_sets(gc_thresholds: None, jobs_file: Path) -> None:
    """Thresholds the jobs module set when imported are its own: the worker leaves them."""
    jobs_file.write_text("import gc\ngc.set_threshold(1234, 5, 5)\n" + JOBS)
    _run_once(jobs_file)
    assert gc.get_threshold() == (1234, 5, 5)


def test_worker_command_leaves_a_collector_turned_off_off(gc_thresholds: None, jobs_file: Path) -> None:
    """A jobs module (or a process) that turned the collector off keeps it off, thresholds unchanged."""
    gc.disable()
    try:
        _run_once(jobs_file)
        assert not gc.isenabled()
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.enable()
