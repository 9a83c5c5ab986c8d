"""@job declarations, handles, Backoff and the error texts the worker records."""

from __future__ import annotations

import logging
import random
from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore import Backoff, Registry, job, use_job_driver
from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.errors import JobNotRegistered, JobTimeout, LeaseLost, OptionInvalid
from jobcore.records import Job, JobState
from jobcore.registry import JobContext, default_registry
from jobcore.worker import handler_error, retry_policy


def test_backoff_grows_exponentially_and_stops_at_the_cap() -> None:
    """Without jitter the delays are base * factor**(n-1), capped."""
    backoff = Backoff(base=1, factor=3, cap=50, jitter=0)
    assert [backoff.seconds(n) for n in range(1, 6)] == [1, 3, 9, 27, 50]
    assert backoff.seconds(10_000) == 50  # no overflow for huge attempt numbers
    assert backoff.delay(2) == timedelta(seconds=3)


def test_backoff_jitter_spreads_within_its_fraction_and_never_past_the_cap() -> None:
    """Jitter stays within +-jitter of the raw delay and the cap still holds."""
    backoff = Backoff(base=10, factor=2, cap=30, jitter=0.5)
    rng = random.Random(1)
    firsts = [backoff.seconds(1, rng) for _ in range(200)]
    assert all(5 <= d <= 15 for d in firsts)
    assert len(set(firsts)) > 100
    assert all(d <= 30 for d in (backoff.seconds(4, rng) for _ in range(200)))


@pytest.mark.parametrize(
    "options",
    [{"base": -1}, {"base": float("nan")}, {"cap": float("inf")}, {"factor": 0.5}, {"jitter": 2}, {"base": True}],
)
def test_backoff_refuses_nonsense(options: dict[str, Any]) -> None:
    """Negative, non-finite, shrinking or bool values are refused with JC_OPTION_INVALID."""
    with pytest.raises(OptionInvalid):
        Backoff(**options)


def test_job_registers_plain_and_async_handlers_with_their_options() -> None:
    """@registry.job records options, whether the handler wants ctx, and whether it is async."""
    registry = Registry()

    @registry.job
    def plain(payload: Any) -> None: ...

    @registry.job(name="mail", queue="emails", max_attempts=3, terminal=KeyError, timeout=timedelta(seconds=5),
                  concurrency=2, concurrency_key=lambda p: p["to"], dead_letter=False, priority=5)
    async def mail(payload: Any, ctx: JobContext) -> None: ...

    assert plain.name.endswith("test_job_registers_plain_and_async_handlers_with_their_options.<locals>.plain")
    assert not plain.is_async
    assert not plain.wants_ctx
    assert registry.get("mail") is mail
    assert (mail.queue, mail.max_attempts, mail.terminal, mail.timeout) == ("emails", 3, (KeyError,), 5.0)
    assert mail.is_async
    assert mail.wants_ctx
    assert mail.concurrency_slot({"to": "ada"}) == "jobcore:job:mail:ada"
    assert plain.concurrency_slot(None) is None
    assert registry.drop_exhausted() == {"mail"}
    assert registry.queues() == {"default", "emails"}
    assert "mail" not in default_registry


def test_a_handle_is_still_callable_directly() -> None:
    """Calling the handle calls the function (unit tests of the handler itself)."""
    registry = Registry()

    @registry.job(name="double")
    def double(payload: int) -> int:
        return payload * 2

    assert double(21) == 42


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 0}, {"concurrency": 0}, {"timeout": -1}, {"terminal": (int,)}, {"name": ""},
     {"backoff": 5}, {"priority": 1.5}, {"dead_letter": "yes"}, {"concurrency_key": "user"}],
)
def test_job_refuses_bad_options(options: dict[str, Any]) -> None:
    """Every option is checked when the job is declared."""
    with pytest.raises(OptionInvalid):
        job(registry=Registry(), **options)(lambda payload: None)


def test_a_name_taken_by_another_function_is_refused() -> None:
    """Two different functions cannot share a job name; re-registering the same one is fine."""
    registry = Registry()

    def first(payload: Any) -> None: ...

    def second(payload: Any) -> None: ...

    registry.job(name="same")(first)
    registry.job(name="same")(first)
    with pytest.raises(OptionInvalid, match="already registered"):
        registry.job(name="same")(second)
    with pytest.raises(JobNotRegistered):
        registry.get("unknown")


def test_enqueue_uses_the_process_driver_and_the_job_defaults() -> None:
    """.enqueue and .enqueue_many apply the declared queue, priority and max_attempts."""
    registry = Registry()

    @registry.job(name="report", queue="reports", max_attempts=4, priority=3)
    def report(payload: Any) -> None: ...

    driver = MemoryDriver(clock=ManualClock())
    with use_job_driver(driver):
        one = report.enqueue({"month": 1}, key="m1")
        later = report.enqueue({"month": 2}, delay=60, priority=9)
        batch = report.enqueue_many([{"month": m} for m in (3, 4)], delay=timedelta(seconds=5))
    assert (one.queue, one.priority, one.max_attempts, one.key) == ("reports", 3, 4, "m1")
    assert later.state is JobState.SCHEDULED
    assert later.priority == 9
    assert [j.payload for j in batch] == [{"month": 3}, {"month": 4}]
    assert all(j.state is JobState.SCHEDULED for j in batch)


def test_context_check_raises_the_reason_it_was_called_off(driver_job: Job) -> None:
    """ctx.check() is silent until cancelled, then raises LeaseLost or JobTimeout."""
    ctx = JobContext(driver_job)
    ctx.check()
    ctx.cancel("reclaimed")
    with pytest.raises(LeaseLost, match="reclaimed"):
        ctx.check()
    timed = JobContext(driver_job)
    timed.cancel("too slow", timed_out=True)
    with pytest.raises(JobTimeout):
        timed.check()


def test_progress_is_kept_and_logged_with_the_job(driver_job: Job, caplog: pytest.LogCaptureFixture) -> None:
    """ctx.progress records a fraction and a message, logged with job id and name."""
    caplog.set_level(logging.DEBUG, logger="jobcore")
    ctx = JobContext(driver_job)
    ctx.progress(0.5, "half way")
    assert (ctx.progress_value, ctx.progress_message) == (0.5, "half way")
    record = caplog.records[-1]
    assert (record.job_id, record.job_name) == (driver_job.id, driver_job.name)  # type: ignore[attr-defined]
    with pytest.raises(OptionInvalid):
        ctx.progress(float("nan"))


def test_handler_error_keeps_the_type_name_and_a_storable_text() -> None:
    """Long, NUL-laden, empty or unprintable texts become readable, storable messages."""
    long = handler_error(ValueError("\x00é" * v.MAX_ERROR_TEXT_BYTES))
    assert type(long).__name__ == "ValueError"
    assert "\x00" not in str(long)
    assert len(str(long).encode()) <= v.MAX_ERROR_TEXT_BYTES
    assert v.error_entry(long)[0] == "ValueError"
    assert str(handler_error(KeyError())) == "KeyError()"
    assert "surrogate" not in v.error_entry(handler_error(ValueError("\ud800 lone")))[1]
    assert type(handler_error(42)).__name__ == "NonExceptionRaised"


def test_retry_policy_fails_terminal_types_and_backs_off_the_rest(driver_job: Job) -> None:
    """Terminal types get fail=True; others a retry_at from the backoff."""
    registry = Registry()

    @registry.job(name="p", terminal=(KeyError,), backoff=Backoff(base=10, jitter=0), dead_letter=False)
    def p(payload: Any) -> None: ...

    now = driver_job.created_at
    assert retry_policy(p, driver_job, KeyError("x"), now) == {"fail": True, "dead_letter": False}
    assert retry_policy(p, driver_job, ValueError("x"), now) == {
        "retry_at": now + timedelta(seconds=10), "dead_letter": False,
    }


@pytest.fixture
def driver_job() -> Job:
    driver = MemoryDriver(clock=ManualClock())
    driver.enqueue("p", {"n": 1})
    return driver.claim(["default"], worker_id="w", lease=30).claimed[0].job


@pytest.mark.parametrize(
    "payloads", ["abc", b"ab", {"a": 1, "b": 2}, 5, None], ids=["str", "bytes", "dict", "int", "none"],
)
def test_enqueue_many_refuses_what_is_not_a_list_of_payloads(payloads: Any) -> None:
    """A string used to become one job per character and a dict one per key; a number was a
    TypeError. Each is JC_OPTION_INVALID now, and nothing is stored."""
    registry = Registry()

    @registry.job(name="batch.item")
    def item(payload: Any) -> Any:
        return payload

    driver = MemoryDriver()
    with pytest.raises(OptionInvalid) as refusal:
        item.enqueue_many(payloads, driver=driver)
    assert refusal.value.cause.startswith("enqueue_many takes an iterable of payloads")
    assert "enqueue(payload)" in refusal.value.fix
    assert driver.introspect.list(None, 10).jobs == ()
    assert [job.payload for job in item.enqueue_many(iter(["a", "b"]), driver=driver)] == ["a", "b"]
