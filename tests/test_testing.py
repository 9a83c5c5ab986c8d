"""The tutorial's testing example, run as a test: jobcore.testing in an application's suite.

docs/tutorial.md shows this same code; keep them in step.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobcore import Backoff, Registry, job
from jobcore.testing import job_tester, job_tester_fixture  # noqa: F401 - the fixture, for pytest

# --- the application under test --------------------------------------------------------

SENT: list[str] = []
AUDIT: list[dict[str, Any]] = []


@job(name="send_welcome", queue="emails", max_attempts=3, backoff=Backoff(base=60, jitter=0))
def send_welcome(payload: dict[str, Any]) -> dict[str, bool]:
    if payload["to"].endswith("@bounce.test"):
        raise ConnectionError("the mail server said no")
    SENT.append(payload["to"])
    audit.enqueue({"event": "welcome_sent", "to": payload["to"]})
    return {"sent": True}


@job(name="audit")
async def audit(payload: dict[str, Any]) -> None:
    AUDIT.append(payload)


def sign_up(email: str) -> None:
    """The application code: enqueue the welcome mail once per address."""
    send_welcome.enqueue({"to": email}, key=f"welcome-{email}")


# --- its tests -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean() -> None:
    SENT.clear()
    AUDIT.clear()


def test_sign_up_sends_one_welcome_mail() -> None:
    """Enqueued once despite two sign-ups; running it sends the mail and enqueues (and runs) the audit."""
    with job_tester() as jobs:
        sign_up("ada@example.com")
        sign_up("ada@example.com")  # the idempotency key keeps it to one job
        jobs.assert_enqueued("send_welcome", {"to": "ada@example.com"}, count=1)

        jobs.run_due()  # runs send_welcome, then the audit job it enqueued

        assert SENT == ["ada@example.com"]
        assert AUDIT == [{"event": "welcome_sent", "to": "ada@example.com"}]
        assert jobs.assert_enqueued("send_welcome").result == {"sent": True}


def test_a_bouncing_address_retries_with_backoff_then_dead_letters(job_tester: Any) -> None:
    """The pytest fixture: failures retry after the backoff delay and end in the dead-letter queue."""
    sign_up("bob@bounce.test")

    job_tester.run_due(raise_errors=False)
    retry = job_tester.assert_enqueued("send_welcome", state="scheduled")
    assert retry.attempt == 1
    assert retry.last_error.type == "ConnectionError"

    assert job_tester.run_due(raise_errors=False) == []  # not due yet: the backoff is 60 s
    job_tester.advance(seconds=60)
    job_tester.run_due(raise_errors=False)
    job_tester.advance(seconds=120)
    job_tester.run_due(raise_errors=False)

    dead = job_tester.assert_enqueued("send_welcome", state="dead")
    assert dead.attempt == 3
    job_tester.assert_not_enqueued("audit")
    assert SENT == []


def test_run_due_raises_handler_errors_by_default() -> None:
    """By default a handler's exception reaches the test, after its failure was recorded."""
    with job_tester() as jobs:
        sign_up("eve@bounce.test")
        with pytest.raises(ConnectionError):
            jobs.run_due()
        assert jobs.assert_enqueued("send_welcome").state == "scheduled"
        assert [type(e) for _, e in jobs.errors] == [ConnectionError]


def test_assert_enqueued_explains_what_it_found() -> None:
    """A failed assertion names what was enqueued instead."""
    with job_tester() as jobs:
        sign_up("ada@example.com")
        with pytest.raises(AssertionError, match="enqueued: \\['send_welcome'\\]"):
            jobs.assert_enqueued("send_invoice")
        with pytest.raises(AssertionError, match="expected 2"):
            jobs.assert_enqueued("send_welcome", count=2)


def test_run_due_stops_a_job_that_keeps_enqueueing_itself() -> None:
    """A job re-enqueueing itself with no delay is stopped at max_jobs instead of looping forever."""
    registry = Registry()

    @registry.job(name="forever")
    def forever(payload: int) -> None:
        forever.enqueue(payload + 1)

    with job_tester(registry=registry) as jobs:
        forever.enqueue(0)
        with pytest.raises(RuntimeError, match="enqueueing itself"):
            jobs.run_due(max_jobs=50)
