"""Rows to records, and the parameter shapes the statements in ``_sql`` take.

A row is :data:`~jobcore.drivers.postgres._sql.JOB_COLUMNS` in order. Times come back in
the session's time zone and are normalised to UTC; error entries store ``at`` as epoch
milliseconds so no text date format is involved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from jobcore.clock import to_millis
from jobcore.records import Job, JobError, JobFilter, JobState, Progress

__all__ = ["EPOCH", "decode_stored", "epoch_ms", "filter_params", "job_from_row", "parse_id"]

_UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH = EPOCH
_MAX_ID = 2**63 - 1
_STATES = {state.value: state for state in JobState}
_ALL_STATES = sorted(_STATES)
_raw_decode = json.JSONDecoder().raw_decode


def decode_stored(text: str) -> Any:
    """Decode stored JSON: it was written canonical (no surrounding space), so ``raw_decode`` will do."""
    return _raw_decode(text)[0]


_loads = decode_stored



def epoch_ms(value: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime."""
    return (to_millis(value) - _EPOCH) // timedelta(milliseconds=1)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(_UTC)


def _error(entry: dict[str, Any]) -> JobError:
    return JobError(
        type=entry["type"], message=entry["message"],
        at=_EPOCH + timedelta(milliseconds=entry["at"]), attempt=entry["attempt"],
    )


def _progress(entry: dict[str, Any] | None) -> Progress | None:
    if entry is None:
        return None
    value = entry["value"]
    return Progress(
        value=None if value is None else float(value), message=entry["message"],
        updated_at=_EPOCH + timedelta(milliseconds=entry["at"]),
    )


def job_from_row(row: Sequence[Any], *, duplicate: bool = False) -> Job:
    """The :class:`Job` of one row of ``JOB_COLUMNS``."""
    (
        id_, name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,
        attempted_at, finished_at, worker_id, claim_no, lease_expires_at, key, result, errors, progress,
        trace,
    ) = row
    history = tuple(_error(e) for e in errors) if errors else ()
    return Job.positional(  # the row is the fields in declaration order, last_error and duplicate aside
        str(id_), name, queue, _loads(payload), _STATES[state], priority, attempt, max_attempts,
        run_at.astimezone(_UTC), created_at.astimezone(_UTC),
        None if attempted_at is None else attempted_at.astimezone(_UTC),
        None if finished_at is None else finished_at.astimezone(_UTC),
        worker_id, claim_no, None if lease_expires_at is None else lease_expires_at.astimezone(_UTC), key,
        None if result is None else _loads(result), history[-1] if history else None, history,
        None if progress is None else _progress(progress), trace, duplicate,
    )


def parse_id(text: str) -> int | None:
    """The bigint behind a job id, or None for anything no row can have (O09)."""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value <= _MAX_ID else None


def filter_params(flt: JobFilter) -> dict[str, Any]:
    """The ``f_*`` parameters of a filter the front door checked; its ``state`` (``None``: every
    state) is already narrowed to the verb's guard."""
    return {
        "f_queue": flt.queue,
        "f_name": flt.name,
        "f_states": _ALL_STATES if flt.state is None else sorted(s.value for s in flt.state),
        "f_prefix": flt.id_prefix,
        "f_from": flt.created_from,
        "f_to": flt.created_to,
    }
