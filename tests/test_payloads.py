"""Typed payloads (issue 20): ``@job(payload=Model)`` checks at enqueue and hands the handler the model."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timezone
from typing import Any

import attrs
import pydantic
import pytest
from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver

from jobcore import Registry
from jobcore.errors import JobcoreError
from jobcore.records import JobState
from jobcore.schedules import every
from jobcore.testing import JobTester


@dataclasses.dataclass
class OrderDC:
    order_id: int
    email: str
    gift: bool = False


@attrs.define
class OrderAttrs:
    order_id: int
    email: str
    gift: bool = False


class OrderPd(pydantic.BaseModel):
    order_id: int
    email: str
    gift: bool = False
    placed_at: datetime | None = None


MODELS = [OrderDC, OrderAttrs, OrderPd]


def _registry(model: type) -> tuple[Registry, Any, list[Any]]:
    registry = Registry()
    seen: list[Any] = []

    @registry.job(name="ship", payload=model, max_attempts=5)
    def ship(order: Any) -> int:
        seen.append(order)
        return int(order.order_id)

    return registry, ship, seen


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_an_instance_is_stored_as_json_and_the_handler_gets_the_model(model: type) -> None:
    registry, ship, seen = _registry(model)
    tester = JobTester(registry=registry)
    job = ship.enqueue(model(order_id=7, email="ada@example.com"), driver=tester.driver)
    assert job.payload["order_id"] == 7
    assert job.payload["email"] == "ada@example.com"
    assert job.payload["gift"] is False
    done = tester.run_due()
    assert [j.state for j in done] == [JobState.DONE]
    assert done[0].result == 7
    assert isinstance(seen[0], model)
    assert seen[0].email == "ada@example.com"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_mapping_that_builds_the_model_is_accepted(model: type) -> None:
    registry, ship, seen = _registry(model)
    tester = JobTester(registry=registry)
    ship.enqueue({"order_id": 8, "email": "b@example.com", "gift": True}, driver=tester.driver)
    tester.run_due()
    assert isinstance(seen[0], model)
    assert seen[0].gift is True


BAD = [{"email": "no id"}, {"order_id": "seven", "email": "x"}, [1, 2], None, "text"]
UNKNOWN_FIELD = {"order_id": 1, "email": "x", "colour": "red"}  # pydantic ignores it unless extra="forbid"


@pytest.mark.parametrize(
    ("model", "bad"),
    [(m, b) for m in MODELS for b in BAD if not (b == BAD[1] and m is not OrderPd)]
    + [(OrderDC, UNKNOWN_FIELD), (OrderAttrs, UNKNOWN_FIELD)],
)
def test_a_payload_that_does_not_make_the_model_is_refused_and_nothing_is_written(model: type, bad: Any) -> None:
    _, ship, _ = _registry(model)
    driver = MemoryDriver()
    with pytest.raises(JobcoreError) as refusal:
        ship.enqueue(bad, driver=driver)
    assert refusal.value.code == "JC_PAYLOAD_INVALID"
    assert model.__name__ in str(refusal.value)
    with pytest.raises(JobcoreError):
        ship.enqueue_many([{"order_id": 1, "email": "fine"}, bad], driver=driver)
    assert driver.introspect.stats().counts == {}


def test_a_field_json_cannot_hold_is_refused() -> None:
    _, ship, _ = _registry(OrderDC)
    with pytest.raises(JobcoreError) as refusal:
        ship.enqueue(OrderDC(order_id=1, email=datetime.now(timezone.utc)), driver=MemoryDriver())  # type: ignore[arg-type]
    assert refusal.value.code == "JC_PAYLOAD_INVALID"


def test_pydantic_fields_are_stored_in_their_json_form() -> None:
    registry, ship, seen = _registry(OrderPd)
    tester = JobTester(registry=registry)
    placed = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
    job = ship.enqueue(OrderPd(order_id=1, email="a@b", placed_at=placed), driver=tester.driver)
    assert job.payload["placed_at"] == "2026-12-01T09:30:00Z"
    tester.run_due()
    assert seen[0].placed_at == placed


def test_a_stored_payload_that_no_longer_makes_the_model_fails_at_once_without_retries() -> None:
    registry, _, seen = _registry(OrderDC)
    tester = JobTester(registry=registry)
    tester.driver.enqueue("ship", {"id": "enqueued by name, unchecked"}, max_attempts=5)
    done = tester.run_due(raise_errors=False)
    assert [j.state for j in done] == [JobState.FAILED]
    assert done[0].attempt == 1
    assert done[0].errors[-1].type == "PayloadInvalid"
    assert seen == []


def test_the_async_enqueue_checks_too() -> None:
    _, ship, _ = _registry(OrderDC)

    async def main() -> tuple[Any, str]:
        async with AsyncMemoryDriver() as driver:
            job = await ship.enqueue_async(OrderDC(order_id=3, email="c@d"), driver=driver)
            with pytest.raises(JobcoreError) as refusal:
                await ship.enqueue_many_async([{"email": "no id"}], driver=driver)
            return job, refusal.value.code

    job, code = asyncio.run(main())
    assert job.payload == {"order_id": 3, "email": "c@d", "gift": False}
    assert code == "JC_PAYLOAD_INVALID"


def test_payload_must_be_a_model_class() -> None:
    registry = Registry()
    for bad in (OrderDC(order_id=1, email="x"), dict, "OrderDC", int):
        with pytest.raises(JobcoreError) as refusal:
            registry.job(name="bad", payload=bad)(lambda p: None)
        assert refusal.value.code == "JC_OPTION_INVALID"
    assert "bad" not in registry


def test_a_schedule_payload_is_checked_when_declared() -> None:
    registry, ship, _ = _registry(OrderDC)
    with pytest.raises(JobcoreError) as refusal:
        registry.schedule(ship, every(60), payload={"email": "no id"}, name="nightly")
    assert refusal.value.code == "JC_PAYLOAD_INVALID"
    definition = registry.schedule(ship, every(60), payload=OrderDC(order_id=9, email="e@f"), name="nightly")
    assert definition.payload == {"order_id": 9, "email": "e@f", "gift": False}
    with pytest.raises(JobcoreError):
        registry.job(name="tick", payload=OrderDC, schedule=every(60))(lambda order: None)
    assert "tick" not in registry
