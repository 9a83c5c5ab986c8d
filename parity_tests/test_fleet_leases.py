"""Parity scenarios for rules K01-K04: fleet-wide counted slots with expiry (driver.leases)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._support import refused, together

from jobcore import validate as v
from jobcore.clock import ManualClock, to_millis
from jobcore.driver import JobDriver
from jobcore.records import LeaseSlot
from jobcore.vocabulary import MAX_PAGE

TTL = timedelta(seconds=10)

# --- K01 ------------------------------------------------------------------------------


def test_K01_acquire_up_to_limit(driver: JobDriver) -> None:
    """acquire succeeds while fewer than limit unexpired slots exist for the key."""
    leases = driver.leases
    assert leases.acquire("api", 2, "h1", TTL) is True
    assert leases.acquire("api", 2, "h2", TTL) is True
    assert leases.acquire("api", 2, "h3", TTL) is False
    assert leases.acquire("other", 1, "h3", TTL) is True


def test_K01_expired_slot_does_not_count(driver: JobDriver, clock: ManualClock) -> None:
    """Once a slot's ttl has passed (now >= expiry), another holder may take its place."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    clock.advance(TTL - timedelta(milliseconds=1))
    assert leases.acquire("api", 1, "h2", TTL) is False
    clock.advance(milliseconds=1)
    assert leases.acquire("api", 1, "h2", TTL) is True
    assert leases.acquire("api", 1, "h1", TTL) is False


def test_K01_holder_reacquiring_is_idempotent(driver: JobDriver, clock: ManualClock) -> None:
    """A holder acquiring its own unexpired slot again keeps one slot and moves its expiry."""
    leases = driver.leases
    assert leases.acquire("api", 2, "h1", TTL) is True
    clock.advance(seconds=8)
    assert leases.acquire("api", 2, "h1", TTL) is True
    assert leases.acquire("api", 2, "h2", TTL) is True
    clock.advance(seconds=8)  # 16 s after the first acquire: h1's slot lives on from its second acquire
    assert leases.acquire("api", 2, "h3", TTL) is False


def test_K01_limit_read_per_call(driver: JobDriver) -> None:
    """The limit is the caller's: a larger limit lets more holders in, a smaller one lets none."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    assert leases.acquire("api", 1, "h2", TTL) is False
    assert leases.acquire("api", 3, "h2", TTL) is True
    assert leases.acquire("api", 2, "h3", TTL) is False


def test_K01_concurrent_acquires_respect_the_limit(driver: JobDriver) -> None:
    """Holders racing for a key with limit 2: exactly two get a slot."""
    answers = together(5, lambda i: driver.leases.acquire("api", 2, f"h{i}", TTL))
    assert sorted(answers) == [False, False, False, True, True]


@pytest.mark.parametrize(
    ("limit", "ttl"),
    [(0, TTL), (-1, TTL), (True, TTL), (1.0, TTL), ("1", TTL), (1, 0), (1, -1), (1, math.nan), (1, math.inf),
     (1, True), (1, timedelta(0)), (1, "10")],
    ids=["limit0", "limit_neg", "limit_bool", "limit_float", "limit_str", "ttl0", "ttl_neg", "ttl_nan", "ttl_inf",
         "ttl_bool", "ttl_zero_delta", "ttl_str"],
)
def test_K01_bad_limit_or_ttl_refused(driver: JobDriver, limit: Any, ttl: Any) -> None:
    """limit must be an int >= 1 and ttl a positive finite duration; a refusal takes no slot."""
    with refused("JC_OPTION_INVALID"):
        driver.leases.acquire("api", limit, "h1", ttl)
    assert driver.leases.acquire("api", 1, "h2", TTL) is True


@pytest.mark.parametrize(("key", "holder"), [("", "h"), ("k", ""), (None, "h"), ("k", 5), ("k\x00", "h")])
def test_K01_bad_key_or_holder_refused(driver: JobDriver, key: Any, holder: Any) -> None:
    """Keys and holders are names (non-empty text without NUL) in acquire, renew and release."""
    with refused("JC_OPTION_INVALID"):
        driver.leases.acquire(key, 1, holder, TTL)
    with refused("JC_OPTION_INVALID"):
        driver.leases.renew(key, holder, TTL)
    with refused("JC_OPTION_INVALID"):
        driver.leases.release(key, holder)
    assert driver.leases.acquire("k", 1, "h", TTL) is True  # the refusals took no slot


# --- K02 ------------------------------------------------------------------------------


def test_K02_renew_extends_a_held_slot(driver: JobDriver, clock: ManualClock) -> None:
    """renew moves the holder's slot to now + ttl while it is unexpired."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    clock.advance(seconds=9)
    assert leases.renew("api", "h1", TTL) is True
    clock.advance(seconds=9)
    assert leases.acquire("api", 1, "h2", TTL) is False
    clock.advance(seconds=1)
    assert leases.acquire("api", 1, "h2", TTL) is True


def test_K02_expired_slot_cannot_be_renewed(driver: JobDriver, clock: ManualClock) -> None:
    """renew answers False once the slot expired, even if nobody took it."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    clock.advance(TTL)
    assert leases.renew("api", "h1", TTL) is False
    assert leases.acquire("api", 1, "h2", TTL) is True


def test_K02_lost_slot_never_renewed(driver: JobDriver, clock: ManualClock) -> None:
    """A holder whose slot expired and was taken gets False and does not steal it back."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    clock.advance(seconds=11)
    assert leases.acquire("api", 1, "h2", TTL) is True
    assert leases.renew("api", "h1", TTL) is False
    assert leases.acquire("api", 1, "h3", TTL) is False
    assert leases.renew("api", "h2", TTL) is True


def test_K02_never_held_is_false(driver: JobDriver) -> None:
    """renew of a slot never held, or of another key, answers False and takes nothing."""
    leases = driver.leases
    assert leases.renew("api", "h1", TTL) is False
    assert leases.acquire("api", 1, "h2", TTL) is True
    assert leases.renew("other", "h2", TTL) is False
    assert leases.acquire("other", 1, "h3", TTL) is True


@pytest.mark.parametrize("ttl", [0, -1, timedelta(0), v.MAX_LEASE + timedelta(milliseconds=1)],
                         ids=["zero", "negative", "zero_delta", "over_max"])
def test_K02_bad_ttl_refused(driver: JobDriver, clock: ManualClock, ttl: Any) -> None:
    """renew with a ttl out of range is refused and the slot keeps its expiry, to the millisecond."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    clock.advance(seconds=4)
    with refused("JC_OPTION_INVALID"):
        leases.renew("api", "h1", ttl)
    clock.advance(TTL - timedelta(seconds=4, milliseconds=1))  # 1 ms before the original expiry
    assert leases.acquire("api", 1, "h2", TTL) is False  # not freed early
    clock.advance(milliseconds=1)
    assert leases.acquire("api", 1, "h2", TTL) is True  # nor kept longer


# --- K03 ------------------------------------------------------------------------------


def test_K03_release_frees_the_own_slot(driver: JobDriver) -> None:
    """release frees the holder's slot for someone else and answers True; a second release False."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    assert leases.release("api", "h1") is True
    assert leases.release("api", "h1") is False
    assert leases.renew("api", "h1", TTL) is False
    assert leases.acquire("api", 1, "h2", TTL) is True


def test_K03_release_never_frees_another_holders_slot(driver: JobDriver) -> None:
    """release by a holder without a slot answers False and frees nothing."""
    leases = driver.leases
    assert leases.acquire("api", 1, "h1", TTL) is True
    assert leases.release("api", "h2") is False
    assert leases.release("other", "h1") is False
    assert leases.acquire("api", 1, "h2", TTL) is False
    assert leases.renew("api", "h1", TTL) is True


def test_K03_release_one_of_several(driver: JobDriver) -> None:
    """With several holders, release frees exactly one slot."""
    leases = driver.leases
    for holder in ("h1", "h2", "h3"):
        assert leases.acquire("api", 3, holder, TTL) is True
    assert leases.release("api", "h2") is True
    assert leases.acquire("api", 3, "h4", TTL) is True
    assert leases.acquire("api", 3, "h5", TTL) is False
    assert leases.renew("api", "h1", TTL) is True
    assert leases.renew("api", "h3", TTL) is True


# --- K04 ------------------------------------------------------------------------------


def test_K04_holders_lists_unexpired_slots_sorted(driver: JobDriver, clock: ManualClock) -> None:
    """holders() answers every unexpired slot as (key, holder, expires_at), by key then holder."""
    leases = driver.leases
    start = clock.now()
    assert leases.holders() == []
    assert leases.acquire("b", 2, "h2", TTL) is True
    assert leases.acquire("b", 2, "h1", TTL) is True
    clock.advance(seconds=1)
    assert leases.acquire("a", 1, "z", timedelta(seconds=30)) is True
    assert leases.holders() == [
        LeaseSlot(key="a", holder="z", expires_at=to_millis(start + timedelta(seconds=31))),
        LeaseSlot(key="b", holder="h1", expires_at=to_millis(start + TTL)),
        LeaseSlot(key="b", holder="h2", expires_at=to_millis(start + TTL)),
    ]
    assert [(s.key, s.holder) for s in leases.holders("b")] == [("b", "h1"), ("b", "h2")]
    assert {s.expires_at.utcoffset() for s in leases.holders()} == {timedelta(0)}  # UTC, as every record
    assert leases.holders("nobody") == []


def test_K04_expired_released_and_renewed_slots(driver: JobDriver, clock: ManualClock) -> None:
    """A lapsed slot leaves the answer at its expiry (even unpurged); release removes one; renew moves it."""
    leases = driver.leases
    assert leases.acquire("api", 3, "h1", TTL) is True
    assert leases.acquire("api", 3, "h2", TTL) is True
    assert leases.acquire("api", 3, "h3", TTL) is True
    assert leases.release("api", "h3") is True
    clock.advance(TTL - timedelta(milliseconds=1))
    assert leases.renew("api", "h2", TTL) is True
    assert [s.holder for s in leases.holders("api")] == ["h1", "h2"]
    clock.advance(milliseconds=1)  # h1's expiry: now >= expires_at, so it is gone
    assert leases.holders() == [LeaseSlot(key="api", holder="h2", expires_at=to_millis(clock.now() - timedelta(
        milliseconds=1) + TTL))]
    clock.advance(TTL)
    assert leases.holders() == []
    assert leases.acquire("api", 1, "h9", TTL) is True  # the read purged nothing it should not have


def test_K04_holders_bounded_by_limit(driver: JobDriver) -> None:
    """At most limit slots, the first ones in (key, holder) order; limit up to MAX_PAGE."""
    leases = driver.leases
    for key, holder in [("k2", "a"), ("k1", "b"), ("k1", "a"), ("k3", "a")]:
        assert leases.acquire(key, 5, holder, TTL) is True
    assert [(s.key, s.holder) for s in leases.holders(limit=3)] == [("k1", "a"), ("k1", "b"), ("k2", "a")]
    assert [(s.key, s.holder) for s in leases.holders("k1", limit=1)] == [("k1", "a")]
    assert len(leases.holders(limit=MAX_PAGE)) == 4


@pytest.mark.parametrize(
    ("key", "limit"),
    [("", 10), ("k\x00", 10), (5, 10), ("k", 0), ("k", -1), ("k", MAX_PAGE + 1), ("k", True), ("k", 1.0),
     (None, "10")],
    ids=["key_empty", "key_nul", "key_int", "limit0", "limit_neg", "limit_over", "limit_bool", "limit_float",
         "limit_str"],
)
def test_K04_bad_key_or_limit_refused(driver: JobDriver, key: Any, limit: Any) -> None:
    """A bad key or a limit outside 1..MAX_PAGE is refused with a code, cause and fix."""
    with refused("JC_OPTION_INVALID"):
        driver.leases.holders(key, limit)
