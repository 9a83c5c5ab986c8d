"""A driver wrapper that injects store faults into chosen calls, on every driver (memory too).

The fault scenarios (rules F) and the worker scenarios (rules W) wrap the scenario's
driver in :class:`FaultyDriver` and switch faults on and off while a real worker runs:

* ``outage``: every call raises ``JC_DB_UNAVAILABLE`` before it reaches the store;
* ``freeze(op)``: calls of ``op`` block, as on a stalled socket, until ``thaw(op)``;
  then they fail as a cut connection would, having done nothing;
* ``hold_replies(op)``: calls of ``op`` run, then their reply is held back until
  ``release(op)`` (a reply stuck on a stalled network);
* ``lose_replies[op] = n``: the next ``n`` calls of ``op`` run, then raise
  ``JC_DB_UNAVAILABLE`` as if the reply was lost;
* ``heartbeat_down`` / ``settle_failures``: heartbeats raise; the next ``n`` settles
  raise before reaching the store.

Everything else passes through to the wrapped driver.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from jobcore.driver import JobDriver
from jobcore.errors import BackendUnavailable

__all__ = ["FaultyDriver"]

_SETTLES = frozenset({"ack", "ack_many", "nack"})


class FaultyDriver:
    """Wraps ``inner`` and injects the faults its attributes and methods switch on."""

    def __init__(self, inner: JobDriver) -> None:
        self._inner = inner
        self._cond = threading.Condition()
        self.outage = False
        self.heartbeat_down = False
        self.settle_failures = 0
        self.lose_replies: Counter[str] = Counter()
        self._frozen: set[str] = set()
        self._held: set[str] = set()
        self.in_flight: Counter[str] = Counter()
        """Calls of each op blocked by ``freeze`` or ``hold_replies`` right now."""
        self.calls: Counter[str] = Counter()
        self.failed_settles: list[tuple[str, dict[str, Any]]] = []
        """``(op, keyword options)`` of each settle ``settle_failures`` made fail, in order."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    # -- switches ---------------------------------------------------------------------

    def freeze(self, *ops: str) -> None:
        with self._cond:
            self._frozen.update(ops)

    def thaw(self, *ops: str) -> None:
        with self._cond:
            self._frozen.difference_update(ops or set(self._frozen))
            self._cond.notify_all()

    def hold_replies(self, *ops: str) -> None:
        with self._cond:
            self._held.update(ops)

    def release(self, *ops: str) -> None:
        with self._cond:
            self._held.difference_update(ops or set(self._held))
            self._cond.notify_all()

    def heal(self) -> None:
        """Every fault off; blocked calls go on (frozen ones fail, held replies arrive)."""
        with self._cond:
            self.outage = self.heartbeat_down = False
            self.settle_failures = 0
            self.lose_replies.clear()
            self._frozen.clear()
            self._held.clear()
            self._cond.notify_all()

    def wait_in_flight(self, op: str, timeout: float = 5.0) -> bool:
        """Wait until a call of ``op`` is blocked by a fault; answers whether one is."""
        with self._cond:
            return self._cond.wait_for(lambda: self.in_flight[op] > 0, timeout)

    # -- the calls ----------------------------------------------------------------------

    def _call(self, op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._cond:
            self.calls[op] += 1
            if self.outage:
                raise BackendUnavailable(f"the scenario cut the store off ({op})")
            if op == "heartbeat" and self.heartbeat_down:
                raise BackendUnavailable("the scenario cut the database off for heartbeats")
            if op in _SETTLES and self.settle_failures > 0:
                self.settle_failures -= 1
                self.failed_settles.append((op, dict(kwargs)))
                raise BackendUnavailable("the scenario cut the database off for this settle")
            if op in self._frozen:
                self.in_flight[op] += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: op not in self._frozen)
                self.in_flight[op] -= 1
                raise BackendUnavailable(f"the connection was cut while {op} hung on it")
        result = fn(*args, **kwargs)
        with self._cond:
            if op in self._held:
                self.in_flight[op] += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: op not in self._held)
                self.in_flight[op] -= 1
            if self.lose_replies[op] > 0:
                self.lose_replies[op] -= 1
                raise BackendUnavailable(f"the reply of {op} was lost after it ran")
        return result

    def claim(self, queues: Any, **options: Any) -> Any:
        return self._call("claim", self._inner.claim, queues, **options)

    def start(self, tokens: Any) -> Any:
        return self._call("start", self._inner.start, tokens)  # type: ignore[attr-defined]

    def heartbeat(self, token: Any, lease: Any) -> bool:
        return bool(self._call("heartbeat", self._inner.heartbeat, token, lease))

    def ack(self, token: Any, result: Any = None) -> Any:
        return self._call("ack", self._inner.ack, token, result)

    def ack_many(self, items: Any, **options: Any) -> Any:
        return self._call("ack_many", self._inner.ack_many, items, **options)

    def nack(self, token: Any, error: Any, **options: Any) -> Any:
        return self._call("nack", self._inner.nack, token, error, **options)
