"""RateLimit declarations: bad ones are coded refusals at declaration, before anything is written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobcore import RateLimit, Registry
from jobcore.errors import JobcoreError


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0, 1), {}), ((-3, 1), {}), ((1.5, 1), {}), ((True, 1), {}), ((10**7, 1), {}),
        ((1, 0), {}), ((1, -1), {}), ((1, float("inf")), {}), ((1, float("nan")), {}),
        ((1, timedelta(days=8)), {}), ((1, "1s"), {}), ((1, 1), {"key": "partner"}),
    ],
)
def test_a_bad_rate_limit_is_a_coded_refusal(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(JobcoreError) as refusal:
        RateLimit(*args, **kwargs)
    assert refusal.value.code == "JC_OPTION_INVALID"
    assert refusal.value.fix


def test_rate_limit_must_be_a_rate_limit_and_nothing_is_registered() -> None:
    registry = Registry()
    with pytest.raises(JobcoreError) as refusal:
        registry.job(name="x", rate_limit=5)(lambda p: None)
    assert refusal.value.code == "JC_OPTION_INVALID"
    assert "x" not in registry


def test_slot_keys_name_the_job_and_the_key() -> None:
    assert RateLimit(3, 1).slot("send", {"p": "acme"}) == "jobcore:rate:send"
    keyed = RateLimit(3, 1, key=lambda p: p["p"])
    assert keyed.slot("send", {"p": "acme"}) == "jobcore:rate:send:acme"
    with pytest.raises(JobcoreError):
        RateLimit(3, 1, key=lambda p: 42).slot("send", {})
    with pytest.raises(JobcoreError):
        keyed.slot("send", {"p": "x" * 300})
