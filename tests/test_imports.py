"""What ``import jobcore.drivers.memory`` (and ``import jobcore``) loads, and that every public name still imports.

A script, a test or a web process that only enqueues must not pay for the worker, the
scheduler, the cron library and what they pull in (asyncio, sockets, importlib.metadata).
Each check runs in a fresh interpreter, since this test process has loaded everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import jobcore

HEAVY = ("jobcore.worker", "jobcore.scheduler", "jobcore.schedules", "jobcore.registry", "cronsim", "asyncio",
         "importlib.metadata")


def _fresh(code: str) -> dict[str, object]:
    """Run ``code`` (which sets ``out``) in a new interpreter; answers ``out`` and the heavy modules it loaded."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules or any(k.startswith(m + '.') for k in sys.modules)]\n"
        "print(json.dumps({'out': out, 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_importing_the_memory_driver_and_enqueueing_loads_no_worker_scheduler_or_cron() -> None:
    answer = _fresh(
        "import jobcore.drivers.memory\n"
        "from jobcore import connect\n"
        "driver = connect('memory://')\n"
        "job = driver.enqueue('mail.send', {'to': 'a@example.test'}, queue='mail')\n"
        "out = [type(driver).__name__, job.state.value, driver.introspect.get(job.id).queue]"
    )
    assert answer["out"] == ["MemoryDriver", "ready", "mail"]
    assert answer["heavy"] == []


def test_import_jobcore_alone_is_as_light() -> None:
    assert _fresh("import jobcore\nout = jobcore.__version__")["heavy"] == []


def test_using_a_lazy_name_loads_its_module_then() -> None:
    answer = _fresh("from jobcore import Worker\nout = Worker.__module__")
    assert str(answer["out"]).startswith("jobcore.worker")
    assert "jobcore.worker" in answer["heavy"]


def test_every_public_name_still_imports_from_jobcore() -> None:
    from jobcore.registry import JobContext, JobHandle, Registry, job  # noqa: PLC0415
    from jobcore.scheduler import Scheduler  # noqa: PLC0415
    from jobcore.schedules import cron, every  # noqa: PLC0415
    from jobcore.worker import Worker  # noqa: PLC0415

    for name in jobcore.__all__:
        assert getattr(jobcore, name) is not None, name
        assert name in dir(jobcore), name
    assert (jobcore.Worker, jobcore.Scheduler, jobcore.job, jobcore.cron, jobcore.every) == (
        Worker, Scheduler, job, cron, every
    )
    assert (jobcore.JobContext, jobcore.JobHandle, jobcore.Registry) == (JobContext, JobHandle, Registry)
    with pytest.raises(AttributeError, match="no attribute 'Wroker'"):
        _ = jobcore.Wroker  # type: ignore[attr-defined]


def test_a_web_process_that_declares_jobs_and_enqueues_loads_no_worker_scheduler_or_cron() -> None:
    """``@job`` plus ``handle.enqueue`` is what an application's web process does: no cron library, no worker."""
    answer = _fresh(
        "import jobcore\n"
        "jobcore.set_job_driver(jobcore.connect('memory://'))\n"
        "@jobcore.job(name='mail.send', queue='mail')\n"
        "def send(payload):\n"
        "    return payload\n"
        "out = send.enqueue({'to': 'a@example.test'}).state.value"
    )
    assert answer["out"] == "ready"
    heavy = set(answer["heavy"])  # type: ignore[arg-type]
    assert heavy <= {"jobcore.registry", "jobcore.schedules", "asyncio"}, heavy
    assert not heavy & {"cronsim", "jobcore.worker", "jobcore.scheduler"}


def test_a_cron_schedule_loads_the_cron_library_when_declared() -> None:
    answer = _fresh("from jobcore import cron\nout = cron('*/5 * * * *').expr")
    assert answer["out"] == "*/5 * * * *"
    assert "cronsim" in answer["heavy"]
