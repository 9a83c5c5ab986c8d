"""Typed payloads: a job may declare a payload model, checked at enqueue and handed to its handler.

``@job(payload=Order)`` where ``Order`` is a dataclass, an attrs class or a pydantic
(v2) model. ``handle.enqueue(...)`` takes an ``Order`` or a mapping that builds one; either
way the payload is checked before anything is written (a coded ``JC_PAYLOAD_INVALID``
otherwise) and stored as the model's JSON form. The worker builds the model from the
stored payload and calls the handler with it; a stored payload that no longer builds one
(enqueued by name without the check, or by an older version of the model) fails the
attempt at once, with no retry: it can never succeed.

Dataclasses and attrs classes are built with ``Model(**payload)``: their fields take the
stored JSON values as they are (nested models need pydantic, or attrs converters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import attrs

from jobcore import validate as v
from jobcore.errors import OptionInvalid, PayloadInvalid

__all__ = ["check_model", "dump_payload", "load_payload"]


def _kind(model: object) -> str | None:
    if isinstance(model, type):
        if hasattr(model, "model_validate") and hasattr(model, "model_dump"):
            return "pydantic"
        if dataclasses.is_dataclass(model):
            return "dataclass"
        if attrs.has(model):
            return "attrs"
    return None


def check_model(model: object) -> type:
    """``model`` if it is a class jobcore can check payloads with, else ``JC_OPTION_INVALID``."""
    if _kind(model) is None:
        raise OptionInvalid(
            f"payload= must be a dataclass, an attrs class or a pydantic model class, got {model!r}",
            "pass the class itself (payload=Order), not an instance or a type hint",
        )
    assert isinstance(model, type)
    return model


def load_payload(model: type, data: Any) -> Any:
    """Build ``model`` from a stored (JSON) payload, or raise ``JC_PAYLOAD_INVALID``."""
    kind = _kind(model)
    problem: Exception | str
    if kind != "pydantic" and not isinstance(data, Mapping):
        problem = f"expected an object of fields, got {type(data).__name__}"
    else:
        try:
            return model.model_validate(data) if kind == "pydantic" else model(**data)  # type: ignore[attr-defined]
        except Exception as exc:
            problem = exc
    raise PayloadInvalid(
        f"the payload does not make a {model.__name__}: {_first_line(problem)}",
        f"give the fields {model.__name__} takes, with their types",
    ) from (problem if isinstance(problem, Exception) else None)


def dump_payload(model: type, payload: Any) -> Any:
    """The JSON form stored for ``payload``: an instance of ``model``, or what builds one
    (checked by building it); ``JC_PAYLOAD_INVALID`` otherwise, before anything is written."""
    value: Any = payload if isinstance(payload, model) else load_payload(model, payload)
    kind = _kind(model)
    if kind == "pydantic":
        return value.model_dump(mode="json")
    data = dataclasses.asdict(value) if kind == "dataclass" else attrs.asdict(value)
    v.encode_json(data, "payload")  # a field JSON cannot hold is refused here, coded
    return data


def _first_line(exc: BaseException | str) -> str:
    """The error's text on one line (pydantic's spans several), at most 300 characters."""
    text = "; ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    return text[:300] if text else type(exc).__name__
