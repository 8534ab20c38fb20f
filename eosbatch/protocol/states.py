"""Batch states and the only transitions between them.

Before the commit a batch can only be aborted; after it, it can only be rolled forward. The table
below is that rule, and every ledger write goes through `check_transition`.
"""

from __future__ import annotations

from typing import Literal, get_args

from eosbatch.protocol.exceptions import IllegalTransition

BatchState = Literal["planned", "staged", "committed", "published", "aborted"]
BatchKind = Literal["regular", "backfill", "replay", "reprocess", "redrive"]
Lane = Literal["regular", "backfill"]
STATES: tuple[BatchState, ...] = get_args(BatchState)
KINDS: tuple[BatchKind, ...] = get_args(BatchKind)

TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    "planned": frozenset({"staged", "aborted"}),
    "staged": frozenset({"committed", "aborted"}),
    "committed": frozenset({"published"}),
    "published": frozenset(),
    "aborted": frozenset(),
}
OPEN_STATES: frozenset[BatchState] = frozenset({"planned", "staged", "committed"})
ABORTABLE: frozenset[BatchState] = frozenset({"planned", "staged"})


def lane(kind: BatchKind) -> Lane:
    """Regular batches move the pipeline forward; every other kind works on history in the backfill lane.
    Each lane has its own epoch and transactional id, so the two never fence each other."""
    return "regular" if kind == "regular" else "backfill"


def claims_coverage(kind: BatchKind) -> bool:
    """A reprocess batch re-runs ranges already committed, on purpose, and a redrive batch re-runs dead letters
    of committed ranges: neither records coverage (nor moves a next offset)."""
    return kind not in ("reprocess", "redrive")


def can_transition(state: BatchState, target: BatchState) -> bool:
    return target in TRANSITIONS[state]


def check_transition(batch_id: int, state: BatchState, target: BatchState) -> None:
    if not can_transition(state, target):
        raise IllegalTransition(batch_id, state, target)
