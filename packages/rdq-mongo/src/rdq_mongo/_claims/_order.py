"""The claim order of a fair or aged queue (contract version 4): which due tasks a claim
reads, how it arranges them, and which of them its controls let through.

A queue whose own record (``*``) sets ``fair`` or ``aging`` cannot be claimed by
``findAndModify`` in index order: the order depends on a task's rank in its group, or on
its due time less its priority times ``aging``. So its claim reads the id, priority, due
time, handler and keys of every due task that no control holds back from the start of the
claim (:func:`read_candidates`, one ``find``), arranges them in Python with
:meth:`rdq.spi.ClaimOrder.arrange`, decides with ``rdq.spi.ClaimGate`` which of them the
controls let through in that order (:func:`decide`: a task held back by a limit the tasks
before it used up is skipped where it stands), and then leases them by id (``_rounds``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, QUEUE_KEY, ClaimGate, ClaimOrder, handler_key
from rdq.spi.bounds import MAX_AGING
from rdq_mongo import _filters as f
from rdq_mongo._claims._plan import Plan
from rdq_mongo._codec import EPOCH
from rdq_mongo._connection import Connection, Document

__all__ = ["Candidate", "arranged", "decide", "read_candidates"]

_PROJECTION = {"priority": 1, "due": 1, "handler_ref": 1, "keys": 1}
_SHIFT = timedelta(seconds=max(-MIN_PRIORITY, MAX_PRIORITY) * MAX_AGING + 1)
_EARLIEST = datetime.min.replace(tzinfo=UTC) + _SHIFT
_LATEST = datetime.max.replace(tzinfo=UTC) - _SHIFT


@dataclass(frozen=True)
class Candidate:
    """A due task as a claim of a fair or aged queue reads it."""

    id: str
    priority: int
    due: datetime
    stored_due: int | float
    """``due`` as stored: what its lease by id checks is unchanged (``claim_one_filter``)"""
    own_keys: tuple[str, ...]
    """``Envelope.keys``: what its group is decided by"""
    keys: tuple[str, ...]
    """every key of the task (``rdq.spi.task_keys``): what the controls apply by"""

    def kind(self, limited: Collection[str]) -> frozenset[str]:
        """Its keys among ``limited`` (the keys whose records limit claims by counting):
        what leasing it takes from the limits."""
        return frozenset(k for k in self.keys if k in limited)


def _due_time(stored: int | float) -> datetime:
    """The due time of ``stored`` microseconds, within the range an aged due time can be
    computed from (a time written by hand beyond it is placed at its edge)."""
    try:
        at = EPOCH + timedelta(microseconds=int(stored))
    except OverflowError:
        return _EARLIEST if stored < 0 else _LATEST
    return min(max(at, _EARLIEST), _LATEST)


def _candidate(doc: Document) -> Candidate | None:
    """The candidate ``doc`` is, or ``None`` for a document whose due time is not a number
    (written by hand: the strict claim takes it, an ordered one cannot place it). A priority
    that is missing (a document of an earlier release) or not a number reads as 0, one out
    of range as the nearest bound: what decodes of a document written by hand."""
    due = doc.get("due")
    if isinstance(due, bool) or not isinstance(due, int | float):
        return None
    priority = doc.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = 0
    priority = min(max(priority, MIN_PRIORITY), MAX_PRIORITY)
    stored = doc.get("keys")
    own = tuple(k for k in stored if isinstance(k, str)) if isinstance(stored, list) else ()
    handler = doc.get("handler_ref")
    keys = [QUEUE_KEY, *([handler_key(handler)] if isinstance(handler, str) else []), *own]
    return Candidate(
        id=str(doc["_id"]),
        priority=priority,
        due=_due_time(due),
        stored_due=due,
        own_keys=own,
        keys=tuple(dict.fromkeys(keys)),
    )


async def read_candidates(
    connection: Connection, queue: str, claimed: Sequence[str], scope: f.Scope
) -> list[Candidate]:
    """Every due task of ``queue`` in ``scope`` (the pauses and the keys closed from the start
    left out by the server) but the ``claimed`` ones, in strict claim order (priority, due
    time, id): the order :meth:`~rdq.spi.ClaimOrder.arrange` breaks ties by."""
    cursor = connection.tasks.find(f.claim_filter(queue, claimed, scope), projection=_PROJECTION)
    found = [c async for doc in cursor if (c := _candidate(doc)) is not None]
    found.sort(key=lambda c: (-c.priority, c.due, c.id))
    return found


def arranged(order: ClaimOrder, candidates: Sequence[Candidate]) -> list[Candidate]:
    """``candidates`` in ``order``'s claim order."""
    return order.arrange(
        candidates, priority=lambda c: c.priority, due=lambda c: c.due, keys=lambda c: c.own_keys
    )


def decide(
    gate: ClaimGate, limited: Collection[str], candidates: Sequence[Candidate], need: int
) -> Plan:
    """Which of ``candidates`` (in claim order) ``gate`` lets through, up to ``need`` of them,
    and what they take from the ``limited`` keys: a candidate whose control is used up by
    those before it is skipped where it stands."""
    plan = Plan()
    for candidate in candidates:
        if len(plan.admitted) >= need or not gate.admits((QUEUE_KEY,)):
            break
        if gate.closed_from_start(candidate.keys) or not gate.admits(candidate.keys):
            continue
        gate.take(candidate.keys)
        kind = candidate.kind(limited)
        plan.admitted.append(kind)
        plan.totals.update(kind)
    return plan
