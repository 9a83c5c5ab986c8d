"""The front door (jobcore.door): checks run once before any backend call, capabilities decide
what a backend is asked, and what a backend lacks is emulated or refused with a coded error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest

from jobcore import validate as v
from jobcore._bridge import SyncBridge
from jobcore.clock import Clock, ManualClock
from jobcore.door import AsyncFrontDoor, AsyncJobsBackend, FrontDoor, JobsBackend
from jobcore.door._awaiting import Awaiting
from jobcore.errors import InvalidInput, NotSupported, OptionInvalid
from jobcore.records import Claimed, ClaimResult, ClaimToken, Job, JobState, Migration

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Recording:
    """A JobsBackend that stores nothing: it notes every call and answers a fixed job."""

    def __init__(self, capabilities: frozenset[str] = frozenset()) -> None:
        self.clock: Clock = ManualClock(NOW)
        self._capabilities = capabilities
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.connection_type = bytearray

    @property
    def capabilities(self) -> frozenset[str]:
        return self._capabilities

    def _job(self) -> Job:
        return Job(id="1", name="n", queue="q", payload=None, state=JobState.DONE, priority=0,
                   max_attempts=1, run_at=NOW, created_at=NOW)

    def insert(self, jobs: Sequence[v.StoreTimedJob], connection: Any) -> list[Job]:
        self.calls.append(("insert", (list(jobs), connection)))
        return [self._job() for _ in jobs]

    def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        self.calls.append(("claim", (queues, worker_id, limit, lease, drop, start)))
        job = self._job()
        return ClaimResult(claimed=(Claimed(job=job, token=ClaimToken(job_id="1", worker_id=worker_id, claim_no=1)),))

    def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        self.calls.append(("heartbeat", (token, lease)))
        return True

    def heartbeat_many(self, tokens: list[ClaimToken], lease: timedelta) -> list[bool]:
        self.calls.append(("heartbeat_many", (tokens, lease)))
        return [token.job_id == "1" for token in tokens]

    def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        self.calls.append(("progress", (token, value, message)))
        return True

    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        self.calls.append(("start", (tokens,)))
        return [True] * len(tokens)

    def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        self.calls.append(("ack_many", (items, landed_only)))
        # the second of every pair is "not current": None (or False)
        return [(index % 2 == 0) if landed_only else (self._job() if index % 2 == 0 else None)
                for index in range(len(items))]

    def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        self.calls.append(("nack", (token, type_name, message, retry_at, dead_letter, fail, counts_as_attempt, park)))
        return self._job()

    def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> Any:
        self.calls.append(("subscribe", (queues, callback)))
        return self

    def migrate(self, dry_run: bool) -> Migration:
        self.calls.append(("migrate", (dry_run,)))
        return Migration(before=None, after=None, latest=None, applied=not dry_run)

    def close(self) -> None:
        self.calls.append(("close", ()))


class Transactional(FrontDoor):
    """A driver offering ``connection=`` the way PostgresDriver does."""

    def enqueue(self, name: str, payload: Any = None, *, connection: Any = None, **options: Any) -> Job:
        return self._enqueue_in(connection, "connection", name, payload, **options)


TOKEN = ClaimToken(job_id="1", worker_id="w", claim_no=1)
OTHER = ClaimToken(job_id="2", worker_id="w", claim_no=1)


def test_a_recording_backend_satisfies_the_protocol() -> None:
    """The fake is a JobsBackend as the runtime check sees it (so the tests below test the door)."""
    assert isinstance(Recording(), JobsBackend)


JUNK: list[tuple[str, Callable[[FrontDoor], object]]] = [
    ("enqueue name", lambda d: d.enqueue("", {})),
    ("enqueue payload", lambda d: d.enqueue("n", {1, 2})),
    ("enqueue run_at and delay", lambda d: d.enqueue("n", run_at=NOW, delay=1)),
    ("enqueue naive run_at", lambda d: d.enqueue("n", run_at=datetime(2026, 1, 1))),  # noqa: DTZ001
    ("enqueue_many one bad spec", lambda d: d.enqueue_many([{"name": "a"}, {"name": "b", "priority": True}])),
    ("claim no queues", lambda d: d.claim([], worker_id="w", lease=5)),
    ("claim limit", lambda d: d.claim(["q"], worker_id="w", limit=0, lease=5)),
    ("claim lease", lambda d: d.claim(["q"], worker_id="w", lease=-1)),
    ("claim start", lambda d: d.claim(["q"], worker_id="w", lease=5, start=1)),  # type: ignore[arg-type]
    ("heartbeat token", lambda d: d.heartbeat("token", 5)),  # type: ignore[arg-type]
    ("heartbeat lease", lambda d: d.heartbeat(TOKEN, float("nan"))),
    ("start tokens", lambda d: d.start([TOKEN, "x"])),  # type: ignore[list-item]
    ("heartbeat_many tokens", lambda d: d.heartbeat_many([TOKEN, "x"], 5)),  # type: ignore[list-item]
    ("heartbeat_many lease", lambda d: d.heartbeat_many([TOKEN], 0)),
    ("progress token", lambda d: d.progress("token", 0.5)),  # type: ignore[arg-type]
    ("progress above 1", lambda d: d.progress(TOKEN, 1.01)),
    ("progress below 0", lambda d: d.progress(TOKEN, -0.1)),
    ("progress nan", lambda d: d.progress(TOKEN, float("nan"))),
    ("progress bool", lambda d: d.progress(TOKEN, True)),
    ("progress text value", lambda d: d.progress(TOKEN, "50%")),  # type: ignore[arg-type]
    ("progress message type", lambda d: d.progress(TOKEN, 0.5, 42)),  # type: ignore[arg-type]
    ("progress message too long", lambda d: d.progress(TOKEN, None, "x" * (v.MAX_PROGRESS_MESSAGE + 1))),
    ("progress message NUL", lambda d: d.progress(TOKEN, None, "a\x00b")),
    ("ack result", lambda d: d.ack(TOKEN, float("inf"))),
    ("ack_many one bad result", lambda d: d.ack_many([(TOKEN, 1), (OTHER, object())])),
    ("ack_many landed_only", lambda d: d.ack_many([(TOKEN, 1)], landed_only=1)),  # type: ignore[call-overload]
    ("nack error", lambda d: d.nack(TOKEN, 42)),  # type: ignore[arg-type]
    ("nack fail and park", lambda d: d.nack(TOKEN, "e", fail=True, park=True)),
    ("nack retry_at", lambda d: d.nack(TOKEN, "e", retry_at="soon")),  # type: ignore[arg-type]
    ("subscribe callback", lambda d: d.subscribe(["q"], "not callable")),  # type: ignore[arg-type]
    ("migrate dry_run", lambda d: d.migrate(dry_run="yes")),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("what", "call"), JUNK, ids=[w for w, _ in JUNK])
def test_junk_never_reaches_the_backend(what: str, call: Callable[[FrontDoor], object]) -> None:
    """Every refusal is the door's, coded, and the backend is not called at all."""
    backend = Recording(frozenset({"deferred_start", "ack_landed_only", "transactional_enqueue"}))
    door = FrontDoor(backend)
    with pytest.raises(InvalidInput):
        call(door)
    assert backend.calls == []



@pytest.mark.parametrize(("what", "call"), JUNK, ids=[w for w, _ in JUNK])
def test_junk_never_reaches_the_async_backend_either(what: str, call: Callable[[FrontDoor], object]) -> None:
    """The async door (the source the sync one is generated from) refuses the same junk with
    the same codes, before any backend coroutine runs (the call is awaited through the bridge)."""
    backend = Recording(frozenset({"deferred_start", "ack_landed_only", "transactional_enqueue"}))
    with pytest.raises(InvalidInput) as sync_refusal:
        call(FrontDoor(backend))
    door = SyncBridge(AsyncFrontDoor(cast(AsyncJobsBackend, Awaiting(backend))))
    try:
        with pytest.raises(InvalidInput) as async_refusal:
            call(cast(FrontDoor, door))
        assert backend.calls == []
    finally:
        door.close()
    assert async_refusal.value.code == sync_refusal.value.code


def test_the_backend_receives_checked_values() -> None:
    """Defaults applied, durations as timedelta, payloads and results as canonical JSON text,
    errors as (type, message), queues de-duplicated."""
    backend = Recording(frozenset({"deferred_start", "ack_landed_only"}))
    door = FrontDoor(backend, default_max_attempts=7)
    door.enqueue("n", {"b": 1, "a": [1.5]}, delay=1.5)
    door.claim(["q", "q", "r"], worker_id="w", limit=3, lease=30, drop_exhausted=["x"], start=False)
    door.heartbeat(TOKEN, 2)
    door.progress(TOKEN, 1, "x" * v.MAX_PROGRESS_MESSAGE)
    door.ack(TOKEN, {"ok": True})
    door.nack(TOKEN, ValueError("bad"), retry_at=NOW)
    (insert, (jobs, connection)), claim, heartbeat, progress, ack, nack = backend.calls
    assert insert == "insert"
    assert connection is None
    assert jobs == [v.StoreTimedJob(
        name="n", queue="default", payload='{"b":1,"a":[1.5]}', priority=0, run_at=None,
        delay=timedelta(milliseconds=1500), max_attempts=7, key=None,
    )]
    assert claim == ("claim", (("q", "r"), "w", 3, timedelta(seconds=30), frozenset({"x"}), False))
    assert heartbeat == ("heartbeat", (TOKEN, timedelta(seconds=2)))
    assert progress == ("progress", (TOKEN, 1.0, "x" * v.MAX_PROGRESS_MESSAGE))
    assert type(progress[1][1]) is float
    assert ack == ("ack_many", ([(TOKEN, '{"ok":true}')], False))
    assert nack == ("nack", (TOKEN, "ValueError", "bad", NOW, True, False, True, False))


class _Name(str):
    """A str subclass: a name equal to a checked one, of another type."""


@pytest.mark.parametrize("options", [
    {"priority": True}, {"priority": 1.0}, {"max_attempts": 3.0}, {"max_attempts": True},
    {"queue": b"q"}, {"priority": [1]},
], ids=["bool_priority", "float_priority", "float_attempts", "bool_attempts", "bytes_queue", "list_priority"])
def test_a_checked_enqueue_does_not_let_an_equal_value_of_another_type_through(options: dict[str, Any]) -> None:
    """The options of a plain enqueue are checked once per distinct set (values and types), not
    per call: after priority=1 and max_attempts=3 went through, values equal to them but of
    another type (True == 1, 1.0 == 1) are still refused, and nothing reaches the backend."""
    backend = Recording()
    door = FrontDoor(backend)
    base = {"queue": "q", "priority": 1, "max_attempts": 3}
    door.enqueue("n", 1, **base)
    door.enqueue(_Name("n"), 2, **base)  # equal to a checked name: stored as a plain str
    assert [type(jobs[0].name) for _, (jobs, _) in backend.calls] == [str, str]
    backend.calls.clear()
    with pytest.raises(OptionInvalid):
        door.enqueue("n", 3, **{**base, **options})
    assert backend.calls == []


def test_landed_only_is_answered_from_full_acks_without_the_capability() -> None:
    """A backend without ack_landed_only is asked full acks; the door answers True/False per item."""
    backend = Recording(frozenset())
    door = FrontDoor(backend)
    assert door.ack_many([(TOKEN, None), (OTHER, 5)], landed_only=True) == [True, False]
    assert backend.calls == [("ack_many", ([(TOKEN, None), (OTHER, "5")], False))]


def test_landed_only_goes_to_a_backend_declaring_it() -> None:
    backend = Recording(frozenset({"ack_landed_only"}))
    assert FrontDoor(backend).ack_many([(TOKEN, None)], landed_only=True) == [True]
    assert backend.calls == [("ack_many", ([(TOKEN, None)], True))]


def test_heartbeat_many_is_one_heartbeat_per_token_without_the_capability() -> None:
    """A backend without heartbeat_many is never asked for it (it may have one of another
    contract); the door sends its heartbeats one by one, in order."""
    backend = Recording(frozenset())
    answers = FrontDoor(backend).heartbeat_many([TOKEN, OTHER], 5)
    assert answers == [True, True]
    assert backend.calls == [("heartbeat", (TOKEN, timedelta(seconds=5))), ("heartbeat", (OTHER, timedelta(seconds=5)))]


def test_heartbeat_many_goes_to_a_backend_declaring_it_in_one_call() -> None:
    backend = Recording(frozenset({"heartbeat_many"}))
    door = FrontDoor(backend)
    assert door.heartbeat_many([TOKEN, OTHER, TOKEN], 5) == [True, False, True]
    assert door.heartbeat_many([], 5) == []
    assert backend.calls == [("heartbeat_many", ([TOKEN, OTHER, TOKEN], timedelta(seconds=5)))]


def test_progress_on_a_backend_without_the_verb_is_not_supported() -> None:
    """A third-party backend written before the verb: JC_NOT_SUPPORTED, the rest of the door works."""

    class Older(Recording):
        progress = None  # type: ignore[assignment]

    backend = Older()
    door = FrontDoor(backend)
    with pytest.raises(NotSupported) as refused:
        door.progress(TOKEN, 0.5)
    assert refused.value.code == "JC_NOT_SUPPORTED"
    assert door.heartbeat(TOKEN, 5) is True


def test_held_claims_are_refused_without_deferred_start() -> None:
    """claim(start=False) and start() need deferred_start: JC_NOT_SUPPORTED, nothing asked of the store."""
    backend = Recording(frozenset())
    door = FrontDoor(backend)
    with pytest.raises(NotSupported) as refused:
        door.claim(["q"], worker_id="w", lease=5, start=False)
    assert refused.value.code == "JC_NOT_SUPPORTED"
    with pytest.raises(NotSupported):
        door.start([TOKEN])
    assert backend.calls == []
    assert len(door.claim(["q"], worker_id="w", lease=5).claimed) == 1  # start=True is the core


def test_a_transaction_handle_needs_transactional_enqueue() -> None:
    """connection= on a store without the capability is refused (JC_NOT_SUPPORTED); with it, a
    handle of the wrong type is refused (JC_OPTION_INVALID); a right one reaches the insert."""
    plain = Recording(frozenset())
    with pytest.raises(NotSupported):
        Transactional(plain).enqueue("n", connection=bytearray())
    assert plain.calls == []
    able = Recording(frozenset({"transactional_enqueue"}))
    door = Transactional(able)
    with pytest.raises(OptionInvalid):
        door.enqueue("n", connection="not a connection")
    assert able.calls == []
    handle = bytearray()
    door.enqueue("n", connection=handle)
    assert able.calls[0][1][1] is handle


def test_capabilities_can_be_narrowed_on_the_driver() -> None:
    """Setting capabilities on the door (a wrapper, a test) decides what the door asks."""
    backend = Recording(frozenset({"ack_landed_only"}))
    door = FrontDoor(backend)
    door.capabilities = frozenset()
    assert door.ack_many([(TOKEN, None)], landed_only=True) == [True]
    assert backend.calls == [("ack_many", ([(TOKEN, None)], False))]
