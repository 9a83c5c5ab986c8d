"""Every error jobcore raises, each with a stable ``code``, a one-line ``cause`` and a ``fix``.

A caller can catch the root, a branch, or one leaf; code that reports errors reads
``err.code`` (stable across releases), ``err.cause`` (what happened, naming the job or
argument) and ``err.fix`` (what to do). When a backend error is translated, the
original stays on ``__cause__``.

::

    JobcoreError
    ├── InvalidInput (ValueError)          the call's arguments were refused; nothing was written
    │   ├── PayloadInvalid                 JC_PAYLOAD_INVALID
    │   ├── OptionInvalid                  JC_OPTION_INVALID
    │   ├── ClaimQueuesEmpty               JC_CLAIM_QUEUES_EMPTY
    │   ├── PageInvalid                    JC_PAGE_INVALID
    │   ├── ScheduleInvalid                JC_SCHEDULE_INVALID
    │   ├── DependencyInvalid              JC_DEPENDENCY_INVALID
    │   ├── DependencyNotFound             JC_DEPENDENCY_NOT_FOUND
    │   └── UrlInvalid                     JC_URL_INVALID
    ├── JobNotFound (LookupError)          JC_JOB_NOT_FOUND
    ├── ScheduleNotFound (LookupError)     JC_SCHEDULE_NOT_FOUND
    ├── WaitTimeout (TimeoutError)         JC_WAIT_TIMEOUT (wait's timeout passed; the job is left alone)
    ├── JobStateConflict                   the job exists but its state forbids the verb
    │   ├── JobNotCancellable              JC_JOB_NOT_CANCELLABLE
    │   ├── JobNotRequeueable              JC_JOB_NOT_REQUEUEABLE
    │   ├── JobNotRemovable                JC_JOB_NOT_REMOVABLE
    │   ├── JobNotPromotable               JC_JOB_NOT_PROMOTABLE
    │   ├── JobNotResumable                JC_JOB_NOT_RESUMABLE
    │   └── JobDuplicate                   JC_JOB_DUPLICATE
    ├── ConfigurationError                 the process is not set up to do what was asked
    │   ├── NoDriver                       JC_NO_DRIVER
    │   ├── DriverUnavailable              JC_DRIVER_UNAVAILABLE (an extra is not installed)
    │   ├── JobNotRegistered               JC_JOB_NOT_REGISTERED
    │   └── NotSupported                   JC_NOT_SUPPORTED
    ├── BackendError                       the database failed; the original is on __cause__
    │   ├── BackendUnavailable             JC_DB_UNAVAILABLE (connection lost, server down or read-only)
    │   ├── BackendAuthFailed              JC_DB_AUTH (the server refused the credentials)
    │   ├── BackendTimeout                 JC_DB_TIMEOUT (statement or server selection timeout)
    │   │   └── BackendLocked              JC_DB_LOCKED (another session holds a lock the call needs)
    │   ├── SchemaOutdated                 JC_SCHEMA_OUTDATED
    │   └── BackendFailure                 JC_DB_ERROR (anything else)
    └── HandlerError                       raised inside a running handler by the runtime
        ├── LeaseLost                      JC_LEASE_LOST
        └── JobTimeout                     JC_JOB_TIMEOUT
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

__all__ = [
    "MAY_HAVE_LANDED",
    "BackendAuthFailed",
    "BackendError",
    "BackendFailure",
    "BackendLocked",
    "BackendTimeout",
    "BackendUnavailable",
    "ClaimQueuesEmpty",
    "ConfigurationError",
    "DependencyInvalid",
    "DependencyNotFound",
    "DriverUnavailable",
    "HandlerError",
    "InvalidInput",
    "JobDuplicate",
    "JobNotCancellable",
    "JobNotFound",
    "JobNotPromotable",
    "JobNotRegistered",
    "JobNotRemovable",
    "JobNotRequeueable",
    "JobNotResumable",
    "JobStateConflict",
    "JobTimeout",
    "JobcoreError",
    "LeaseLost",
    "NoDriver",
    "NotSupported",
    "OptionInvalid",
    "PageInvalid",
    "PayloadInvalid",
    "ScheduleInvalid",
    "ScheduleNotFound",
    "SchemaOutdated",
    "UrlInvalid",
    "WaitTimeout",
    "WebUnprotected",
    "all_error_classes",
    "redact",
    "redact_url",
    "secrets_of",
]


class JobcoreError(Exception):
    """The root of every error jobcore raises.

    Attributes:
        code: Stable identifier (``JC_...``); never changes once released.
        cause: One line: what happened, naming the job or argument involved.
        fix: One line: what the caller can do about it.
    """

    code: ClassVar[str] = "JC_ERROR"
    default_fix: ClassVar[str] = "see the jobcore documentation for this error code"

    def __init__(self, cause: str, fix: str | None = None) -> None:
        self.cause = cause
        self.fix = fix if fix is not None else self.default_fix
        super().__init__(f"[{self.code}] {cause} (fix: {self.fix})")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.cause, self.fix))


class InvalidInput(JobcoreError, ValueError):
    """The arguments were refused before anything was written."""

    code = "JC_INVALID_INPUT"


class PayloadInvalid(InvalidInput):
    """A payload, result or error text that not every driver can store and return identically."""

    code = "JC_PAYLOAD_INVALID"
    default_fix = (
        "pass JSON data: dicts with str keys, lists, str without NUL, finite numbers, "
        "bool, None; keep it under the size limit"
    )


class OptionInvalid(InvalidInput):
    """A numeric, duration, time or name option out of range or of the wrong type, or one the call does not take."""

    code = "JC_OPTION_INVALID"


class ClaimQueuesEmpty(InvalidInput):
    """``claim`` was given no queues; it never means "all queues"."""

    code = "JC_CLAIM_QUEUES_EMPTY"
    default_fix = "name the queues to claim from, e.g. claim(['default'], ...)"


class PageInvalid(InvalidInput):
    """A list page request with a foreign cursor, both cursors, or a limit out of range."""

    code = "JC_PAGE_INVALID"


class ScheduleInvalid(InvalidInput):
    """A periodic schedule that cannot fire: bad cron, unknown zone, non-positive interval."""

    code = "JC_SCHEDULE_INVALID"


class DependencyInvalid(InvalidInput):
    """``depends_on`` that can never be met: a cycle (a spec naming itself or a later spec of
    its batch), too many parents, or a parent that already ended other than ``done``."""

    code = "JC_DEPENDENCY_INVALID"
    default_fix = (
        "name only stored job ids, Jobs, or the positions of earlier specs of the same batch; "
        "see docs/howto/dependencies.md"
    )


class DependencyNotFound(InvalidInput):
    """``depends_on`` names a job id the store does not hold (never enqueued, or removed)."""

    code = "JC_DEPENDENCY_NOT_FOUND"
    default_fix = "enqueue the parent first (or in the same enqueue_many batch) and pass its id"


class UrlInvalid(InvalidInput):
    """A driver URL jobcore cannot parse or has no driver for."""

    code = "JC_URL_INVALID"
    default_fix = "use memory://, postgresql://user@host/db or mongodb://host/db"


class JobNotFound(JobcoreError, LookupError):
    """No job has that id."""

    code = "JC_JOB_NOT_FOUND"
    default_fix = "check the id with `jobcore ls --id-prefix ...`; the job may have been removed"


class ScheduleNotFound(JobcoreError, LookupError):
    """No periodic schedule has that name."""

    code = "JC_SCHEDULE_NOT_FOUND"
    default_fix = "list the schedules with `jobcore schedules`; a scheduler declares them when it starts"


class WaitTimeout(JobcoreError, TimeoutError):
    """``wait`` gave up: the job had not finished when its timeout passed. The job is left as it was.

    Attributes:
        job: The job as last read, still live (``None`` when it was never read).
    """

    code = "JC_WAIT_TIMEOUT"
    default_fix = "wait again, raise the timeout, or answer that the job is still running and poll later"
    job: object = None


class JobStateConflict(JobcoreError):
    """The job exists, but its state forbids the verb."""

    code = "JC_JOB_STATE_CONFLICT"


class JobNotCancellable(JobStateConflict):
    """Only live jobs can be cancelled."""

    code = "JC_JOB_NOT_CANCELLABLE"
    default_fix = "the job already finished or does not exist; nothing to cancel"


class JobNotRequeueable(JobStateConflict):
    """Only finished jobs can be requeued."""

    code = "JC_JOB_NOT_REQUEUEABLE"
    default_fix = "the job is still live; cancel it first or wait for it to finish"


class JobNotRemovable(JobStateConflict):
    """A running job cannot be removed under its worker."""

    code = "JC_JOB_NOT_REMOVABLE"
    default_fix = "cancel the job first, then remove it"


class JobNotPromotable(JobStateConflict):
    """Only scheduled jobs can be made due now."""

    code = "JC_JOB_NOT_PROMOTABLE"
    default_fix = "only a job in state 'scheduled' can be promoted"


class JobNotResumable(JobStateConflict):
    """Only suspended (parked) jobs can be resumed."""

    code = "JC_JOB_NOT_RESUMABLE"
    default_fix = "only a job in state 'suspended' can be resumed"


class JobDuplicate(JobStateConflict):
    """A live job of the same name already holds this job's idempotency key."""

    code = "JC_JOB_DUPLICATE"
    default_fix = "wait for the live holder of the key to finish, or cancel it first"


class ConfigurationError(JobcoreError):
    """The process is not set up to do what was asked."""

    code = "JC_CONFIGURATION"


class NoDriver(ConfigurationError):
    """No process-wide driver has been chosen."""

    code = "JC_NO_DRIVER"
    default_fix = "call jobcore.set_job_driver(jobcore.connect(url)) at start-up"


class DriverUnavailable(ConfigurationError):
    """The driver's optional dependencies are not installed."""

    code = "JC_DRIVER_UNAVAILABLE"


class JobNotRegistered(ConfigurationError):
    """A worker claimed a job whose name no ``@job`` declared in this process."""

    code = "JC_JOB_NOT_REGISTERED"
    default_fix = "import the module that declares the job in the worker process"


class NotSupported(ConfigurationError):
    """The driver does not offer this capability."""

    code = "JC_NOT_SUPPORTED"


class WebUnprotected(ConfigurationError):
    """The web dashboard was asked to listen beyond loopback with no authentication."""

    code = "JC_WEB_UNPROTECTED"
    default_fix = "give the dashboard a token or basic auth, or bind it to 127.0.0.1"


class BackendError(JobcoreError):
    """The database failed; the original exception is on ``__cause__``."""

    code = "JC_DB"


class BackendUnavailable(BackendError):
    """The connection was lost, the server cannot be reached, takes no writes (a standby), has no
    connection slot free, or lacks a resource (disk, memory)."""

    code = "JC_DB_UNAVAILABLE"
    default_fix = "check that the database is up and reachable; the call may be retried"


class BackendAuthFailed(BackendError):
    """The server refused the credentials: wrong password, unknown role, or no rule admitting them."""

    code = "JC_DB_AUTH"
    default_fix = (
        "check the user name and password in the URL (or PGPASSWORD / ~/.pgpass), that the role exists "
        "and may log in, and that the server's access rules (pg_hba.conf, MongoDB users) admit it; "
        "retrying will not help"
    )


MAY_HAVE_LANDED = (
    "the call may have been carried out all the same (its answer is what was lost): a retried enqueue "
    "without a key can store its job twice, so give it a key to retry safely; a retried settle is fenced "
    "on its token and cannot land twice"
)
"""What a driver's timeout fix adds when the call's outcome is unknown (the statement was sent)."""


class BackendTimeout(BackendError):
    """A statement or server selection timed out."""

    code = "JC_DB_TIMEOUT"
    default_fix = "retry, or raise the statement timeout; check the database for lock waits"


class BackendLocked(BackendTimeout):
    """Another session holds a lock the call needs (an open transaction holding a job's row,
    or the jobs table), and the call did not wait for it past a short bound.

    The PostgreSQL driver's worker verbs (``heartbeat``, ``heartbeat_many``, ``progress``,
    ``start``, ``ack``, ``ack_many``, ``nack``) wait at most ``SETTLE_LOCK_WAIT`` on a row
    another session holds, so one locked job never holds back a worker's other jobs; a
    server's ``lock_timeout`` raises it from any call. Nothing of a locked job changed.

    Attributes:
        answers: For a batch (``ack_many``, ``start``, ``heartbeat_many``): the answers, in
            input order, of the items that were not locked (they were carried out); a locked
            item answers as one that did not land. ``None`` when nothing of the call was
            carried out.
        locked: The input positions of the items whose rows were locked; every position
            when ``answers`` is ``None``.
    """

    code = "JC_DB_LOCKED"
    default_fix = (
        "find the session holding the lock (pg_locks joined to pg_stat_activity: often one idle in "
        "transaction) and end its transaction; the call may be retried, nothing of the locked jobs changed"
    )

    def __init__(
        self, cause: str, fix: str | None = None, *, answers: list[Any] | None = None, locked: tuple[int, ...] = (),
    ) -> None:
        super().__init__(cause, fix)
        self.answers = answers
        self.locked = locked


class SchemaOutdated(BackendError):
    """The store's schema is older (or newer) than this jobcore."""

    code = "JC_SCHEMA_OUTDATED"
    default_fix = "run `jobcore migrate --url ...` (or driver.migrate()) with this jobcore"


class BackendFailure(BackendError):
    """Any other database failure."""

    code = "JC_DB_ERROR"


class HandlerError(JobcoreError):
    """Raised inside a running handler by the worker runtime."""

    code = "JC_HANDLER"


class LeaseLost(HandlerError):
    """The job's lease was lost (reclaimed, cancelled or not renewed); its outcome will not count."""

    code = "JC_LEASE_LOST"
    default_fix = "heartbeat more often than the lease, or raise the lease"


class JobTimeout(HandlerError):
    """The attempt ran past the job's timeout."""

    code = "JC_JOB_TIMEOUT"
    default_fix = "raise the job's timeout or make the handler faster"


def all_error_classes() -> list[type[JobcoreError]]:
    """Every error class, root first: the source of the error-code table in the docs."""
    found: list[type[JobcoreError]] = []
    pending: list[type[JobcoreError]] = [JobcoreError]
    while pending:
        cls = pending.pop(0)
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


URL_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
"""A URL's scheme and its ``://`` (RFC 3986: a letter, then letters, digits, ``+-.``), as a pattern."""
_USERINFO = re.compile(rf"(?P<scheme>{URL_SCHEME})(?P<user>[^:/@?#\s]*):[^/?#\s]*@")
"""``scheme://user:password@``: the password runs to the last ``@`` of the authority."""
_SECRET_KEY = r"[A-Za-z_]*(?:password|passwd|pwd|secret)[A-Za-z_]*"  # noqa: S105 - names, not a password
_QUERY_SECRET = re.compile(rf"(?P<key>[?&](?i:{_SECRET_KEY}))=[^&#\s]*")
"""``?password=...`` or ``&sslpassword=...`` in a URL's query."""
_KV_SECRET = re.compile(
    rf"(?<![\w?&%])(?P<key>(?i:{_SECRET_KEY}))(?P<eq>\s*=\s*)(?:'(?:\\.|[^'\\])*(?:'|\\?$)|(?:\\.|[^\s\\])*\\?)"
)
"""``password=value`` in a libpq keyword/value string: unquoted (backslash escapes) or quoted."""
_MECHANISM_SECRET = re.compile(r"(?i)(?P<key>aws_session_token|aws_secret_access_key)(?P<sep>:|%3A)[^,&\s]*")
"""A secret inside MongoDB's ``authMechanismProperties``."""
_MASK = "***"
_MIN_LITERAL = 4
"""Known secrets shorter than this are masked where they stand as a value, never searched for
in free text (a password "ab" would otherwise mask every "ab" of a message)."""


def secrets_of(conninfo: object) -> tuple[str, ...]:
    """Every password-like value written in ``conninfo`` (a URL or a keyword/value string),
    as written and decoded, for :func:`redact` to search for in text that quotes pieces of it
    (a parser's message naming the token it could not read)."""
    from urllib.parse import unquote, unquote_plus  # noqa: PLC0415 - rarely needed

    text = str(conninfo)
    found: list[str] = []
    for match in _USERINFO.finditer(text):
        raw = match.group(0)[len(match.group("scheme")) + len(match.group("user")) + 1:-1]
        found += [raw, unquote(raw)]
    for match in _QUERY_SECRET.finditer(text):
        raw = match.group(0).split("=", 1)[1]
        found += [raw, unquote_plus(raw), unquote(raw)]
    for match in _KV_SECRET.finditer(text):
        raw = match.group(0)[len(match.group("key")) + len(match.group("eq")):]
        inner = raw[1:-1] if raw.startswith("'") and raw.endswith("'") and len(raw) > 1 else raw.lstrip("'")
        found += [raw, inner, re.sub(r"\\(.)", r"\1", inner)]
    for match in _MECHANISM_SECRET.finditer(text):
        raw = match.group(0)[len(match.group("key")) + len(match.group("sep")):]
        found += [raw, unquote(raw)]
    return tuple(dict.fromkeys(s for s in found if len(s) >= _MIN_LITERAL))


def redact(text: object, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every password in it masked as ``***``.

    Masks the password of every ``scheme://user:password@`` URL, every ``password=``-like
    value (``sslpassword``, MongoDB's ``tlsCertificateKeyFilePassword``...) of a URL query or
    a libpq keyword/value string, quoted or not, secrets in MongoDB's
    ``authMechanismProperties``, and each of ``secrets`` (see :func:`secrets_of`) wherever it
    appears. Every error, log line, ``repr`` and CLI line that could quote a connection
    string goes through here: refusals quote what they were given so the operator can see
    what was wrong, but a password must never reach a log or a terminal.
    """
    out = str(text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_LITERAL:
            out = out.replace(secret, _MASK)
    out = _USERINFO.sub(rf"\g<scheme>\g<user>:{_MASK}@", out)
    out = _QUERY_SECRET.sub(rf"\g<key>={_MASK}", out)
    out = _KV_SECRET.sub(rf"\g<key>\g<eq>{_MASK}", out)
    return _MECHANISM_SECRET.sub(rf"\g<key>\g<sep>{_MASK}", out)


def redact_url(text: object) -> str:
    """The same as :func:`redact` (its earlier name)."""
    return redact(text)
