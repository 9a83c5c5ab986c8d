"""The job state machine as data: every transition a job can make, and what makes it.

One table, three readers: the reference model of the parity suite
(``jobcore.parity._model``) moves a job only along an edge listed here and counts each
move, the stateful parity test fails when a run never took one of them, and
``tests/test_docs.py`` checks that the diagram in ``docs/concepts.md`` draws exactly
these edges (:func:`diagram_edges`). A transition the drivers make that this table
lacks fails the stateful test; an edge listed here that no run reaches fails it too.
"""

from __future__ import annotations

import dataclasses

__all__ = ["DEPENDENCY_TRIGGERS", "NEW", "TRANSITIONS", "Transition", "diagram_edges", "transition"]

NEW = "[*]"
"""The source of a transition that creates a job (mermaid's start marker)."""

_LIVE = ("ready", "scheduled", "running", "suspended")
_FINISHED = ("done", "failed", "dead", "cancelled")


@dataclasses.dataclass(frozen=True)
class Transition:
    """One edge: a job in ``source`` moves to ``target`` because of ``trigger``.

    ``trigger`` names the verb and the case (``"nack: attempts used up"``); ``label`` is
    what the diagram writes on the edge (edges sharing source and target share a line).
    """

    source: str
    target: str
    trigger: str
    label: str

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.trigger})"


def _t(source: str, target: str, trigger: str, label: str | None = None) -> Transition:
    return Transition(source, target, trigger, label if label is not None else trigger)


TRANSITIONS: tuple[Transition, ...] = (
    _t(NEW, "ready", "enqueue: due now", "enqueue (due now)"),
    _t(NEW, "scheduled", "enqueue: run_at in the future", "enqueue (run_at in the future)"),
    _t("scheduled", "running", "claim: once due", "claim (once due)"),
    _t("ready", "running", "claim"),
    _t("running", "running", "claim: lease lapsed, reclaimed", "lease lapsed, reclaimed by another claim"),
    _t("scheduled", "ready", "promote"),
    _t("running", "done", "ack"),
    _t("running", "scheduled", "nack: attempts left", "nack (attempts left)"),
    _t("running", "scheduled", "nack: attempt given back", "nack(counts_as_attempt=False)"),
    _t("running", "dead", "nack: attempts used up", "nack (attempts used up)"),
    _t("running", "dead", "claim: burial", "burial (lease lapsed on the final attempt)"),
    _t("running", "dead", "rescue: burial", "burial (lease lapsed on the final attempt)"),
    _t("running", "failed", "nack: fail", "nack(fail=True)"),
    _t("running", "failed", "nack: attempts used up, dropped", "nack(dead_letter=False) on the last attempt"),
    _t("running", "failed", "claim: burial, dropped", "burial named in drop_exhausted"),
    _t("running", "suspended", "nack: park", "nack(park=True)"),
    _t("running", "ready", "rescue: lease lapsed", "rescue (lease lapsed, attempts left)"),
    _t("suspended", "ready", "resume"),
    *(_t(state, "cancelled", "cancel") for state in _LIVE),
    _t(NEW, "suspended", "enqueue: parents not done", "enqueue (depends_on a job not done yet)"),
    _t("suspended", "ready", "parents: all done", "last parent done"),
    _t("suspended", "scheduled", "parents: all done, run_at in the future", "last parent done (run_at in the future)"),
    _t("suspended", "cancelled", "parents: one ended otherwise", "a parent failed, died, was cancelled or removed"),
    *(_t(state, "ready", "requeue") for state in _FINISHED),
    *(_t(state, "scheduled", "requeue_many: spread", "requeue_many (spread, due later)") for state in _FINISHED),
)
"""Every edge of the job state machine. Removal (``remove``, ``remove_many``, ``prune``)
deletes a job rather than moving it, so it is no edge here."""

DEPENDENCY_TRIGGERS = frozenset(
    t.trigger for t in TRANSITIONS if t.trigger.startswith(("parents:", "enqueue: parents"))
)
"""The triggers of rules D's edges (a job waiting on its parents, ``depends_on``): the stateful
parity test draws no dependencies, so ``parity_tests/test_dependencies.py`` takes these."""

_BY_KEY = {(t.source, t.target, t.trigger): t for t in TRANSITIONS}


def transition(source: str, target: str, trigger: str) -> Transition:
    """The listed edge; ``KeyError`` when the state machine has no such transition."""
    return _BY_KEY[(source, target, trigger)]


def diagram_edges() -> list[str]:
    """The mermaid ``stateDiagram-v2`` lines for :data:`TRANSITIONS`, in table order.

    Edges sharing source and target are drawn once, their distinct labels joined with
    ``, or``.
    """
    labels: dict[tuple[str, str], list[str]] = {}
    for t in TRANSITIONS:
        seen = labels.setdefault((t.source, t.target), [])
        if t.label not in seen:
            seen.append(t.label)
    return [f"{source} --> {target}: {', or '.join(text)}" for (source, target), text in labels.items()]
