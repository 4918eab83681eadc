"""The claim order of a fair or aged queue (contract version 4): which due tasks a claim
reads, how it arranges them, and which of them its controls let through.

A queue whose own record (``*``) sets ``fair`` or ``aging`` cannot be claimed by
``findAndModify`` in index order: the order depends on a task's rank in its group, or on
its due time less its priority times ``aging``. So its claim reads, **group by group**, the
first due tasks of each group that no control holds back from the start of the claim
(:func:`read_candidates`), arranges them in Python with :meth:`rdq.spi.ClaimOrder.arrange`,
decides with ``rdq.spi.ClaimGate`` which of them the controls let through in that order
(:func:`decide`: a task held back by a limit the tasks before it used up is skipped where it
stands), and then leases them by id (``_rounds``).

**Groups.** Every live task of a fair or aged queue carries ``grp_for``, the order it was
grouped under (``_codec.group_stamp``: the fair prefix, ``""`` for aging alone), and ``grp``,
its group in that order (``rdq.spi.fair_group`` of its keys; ``""`` for every task under
aging alone); index ``rdq_claim_by_group`` holds the live tasks by ``(queue, grp_for, grp,
priority desc, due, _id)``. Admission writes both from the order it reads (``_admission``);
before it reads, a claim groups under its own order every live task of the queue grouped
under another one or none (``_controls.group_tasks``, one ``update_many`` bounded on the
index: nothing to do unless the order changed, a task was admitted across a change, or one
became live again after one), and then reads only tasks grouped under its order.

Why that is exact under races: a task's group is a function of its keys, which never change,
and of the order; a task whose ``grp_for`` is the claim's order is therefore in the right
group whoever wrote it, and one whose ``grp_for`` is another is regrouped by the next claim,
whatever wrote it and whenever (an admission that read the order before a change, a claim
whose view predates it, a redrive of a task grouped long ago). There is no per-queue marker
that such a write could slip past: the stamp is on each task, and every claim looks for the
stamps that are not its own. A task whose write lands between a claim's grouping and its
reads is missed by that claim only, as one enqueued just after it would be; no task is ever
ranked in a group computed for another order, and none stays out of its group beyond the next
claim.

**What a claim reads.** With a claim of ``n`` tasks, each group's first ``n`` due tasks in
its claim order are enough to arrange the first ``n`` ranks (``ClaimOrder.arrange``): the
groups are walked in ``grp`` order by ``find`` commands sorted as the index is, taking from each
at most ``n`` (strict within groups) or at most ``n`` of each of its priorities (aging: a
group's order is by due time less priority × ``aging``, merged from its priorities, each in
due order), seeking past the rest: a page of ``n`` holds the whole of several small groups,
and a deep group costs one more ``find`` to skip. So a claim reads O(groups × (priorities +
n)) tasks, not its backlog. A group whose own key is closed from the start is passed over
whole; tasks held back by another key are left out by the server (``$nin``). Only when the
controls hold back so many of what was read that the decision falls short of ``n`` is the
read repeated deeper (``_rounds``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, QUEUE_KEY, ClaimGate, ClaimOrder, handler_key
from rdq.spi.bounds import MAX_AGING
from rdq_mongo import _filters as f
from rdq_mongo._claims._plan import Plan
from rdq_mongo._codec import EPOCH, group_stamp
from rdq_mongo._connection import Connection, Document

__all__ = ["Candidate", "Reading", "arranged", "decide", "read_candidates"]

_PROJECTION = {"grp": 1, "priority": 1, "due": 1, "handler_ref": 1, "keys": 1}
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


@dataclass(frozen=True)
class Reading:
    """What one read of a fair or aged queue's groups found."""

    candidates: list[Candidate]
    """the tasks read, in strict claim order (priority, due time, id): the order
    :meth:`~rdq.spi.ClaimOrder.arrange` breaks ties by"""
    complete: bool
    """True when no due task in scope was left unread (no group or priority was cut short)"""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Walk:
    """The walk of one read over ``rdq_claim_by_group`` (see the module docstring): pages of
    ``first`` in index order, each group (with aging, each of its priorities) cut after its
    first ``first``."""

    def __init__(
        self,
        connection: Connection,
        base: Document,
        order: ClaimOrder,
        first: int,
        closed: Collection[str],
    ) -> None:
        self.connection = connection
        self.base = base
        self.fair = order.fair is not None
        self.by_priority = order.aging is not None
        self.first = first
        self.closed = sorted(closed)
        self.found: dict[object, Document] = {}
        self.complete = True

    async def _find(self, condition: Document, limit: int) -> list[Document]:
        cursor = self.connection.tasks.find(
            {**self.base, **condition}, projection=_PROJECTION, sort=f.GROUP_SORT, limit=limit
        )
        page = [doc async for doc in cursor]
        self.found.update((doc["_id"], doc) for doc in page)
        return page

    def _unit(self, doc: Document) -> tuple[object, ...]:
        """What the walk cuts after ``first`` tasks: the group, or the group's priority."""
        if self.by_priority:
            return (doc.get("grp"), doc.get("priority"))
        return (doc.get("grp"),)

    def _groups_after(self, group: object) -> Document:
        """The groups after ``group`` (all for ``None``) but the closed ones."""
        bound: Document = {}
        if group is not None:
            bound["$gt"] = group
        if self.closed:
            bound["$nin"] = self.closed
        return {"grp": bound} if bound else {}

    async def run(self) -> list[Document]:
        after: object = None  # the walk is past every group up to this one
        within: tuple[object, object] | None = None  # in this group, below this priority
        while True:
            if within is None:
                condition = self._groups_after(after)
            else:
                condition = {"grp": within[0], "priority": {"$lt": within[1]}}
            page = await self._find(condition, self.first)
            if len(page) < self.first:  # read to its end
                if within is None or not self.fair:
                    return list(self.found.values())
                after, within = within[0], None
                continue
            last = page[-1]
            unit = self._unit(last)
            read = sum(1 for doc in page if self._unit(doc) == unit)
            if read < self.first:  # the page ended inside it: its first ``first`` in full
                condition = {"grp": last.get("grp")}
                if self.by_priority:
                    condition["priority"] = last.get("priority")
                read = len(await self._find(condition, self.first))
            if read >= self.first:
                self.complete = False  # it may hold more than its first ``first``
            group, priority = last.get("grp"), last.get("priority")
            if self.by_priority and _is_number(priority):
                within = (group, priority)
                continue
            if self.by_priority:  # a priority that is no number (written by hand): the rest
                await self._find({"grp": group}, 0)
            if not self.fair:
                return list(self.found.values())
            after, within = group, None


async def read_candidates(
    connection: Connection,
    queue: str,
    order: ClaimOrder,
    now_us: int,
    claimed: Sequence[str],
    scope: f.Scope,
    first: int,
) -> Reading:
    """The due tasks of ``queue`` (grouped under ``order``; due at the server's ``now_us``)
    in ``scope`` (the pauses and the keys closed from the start left out by the server) but
    the ``claimed`` ones: each group's first ``first`` in its claim order, or with aging its
    first ``first`` of each priority (see the module docstring)."""
    stamp = group_stamp(order)
    if stamp is None:
        raise ValueError("the strict order is claimed by findAndModify, not read by group")
    base = f.group_read_filter(queue, stamp, now_us, claimed, scope)
    closed = [k for k in scope.not_keys if k.startswith(stamp)] if order.fair else []
    walk = _Walk(connection, base, order, max(1, first), closed)
    found = [c for doc in await walk.run() if (c := _candidate(doc)) is not None]
    found.sort(key=lambda c: (-c.priority, c.due, c.id))
    kept = _firsts(order, found, max(1, first))
    return Reading(kept, walk.complete and len(kept) == len(found))


def _firsts(order: ClaimOrder, found: list[Candidate], first: int) -> list[Candidate]:
    """Of ``found`` (in strict order), each group's first ``first`` in its claim order:
    exactly the tasks of the first ``first`` ranks of the whole queue. With aging a group's
    priorities were each read to their first ``first``, and past the group's first
    ``first`` their merge may miss a task not read (the next of a priority cut short), so
    what follows is left to a deeper read; a racing claimant's loss is then made up for by
    the next task in the true order, never one after a task not read."""
    groups: dict[str, list[tuple[tuple[object, ...], Candidate]]] = {}
    for n, candidate in enumerate(found):
        place = (*order.key(candidate.priority, candidate.due), n)
        groups.setdefault(order.group(candidate.own_keys), []).append((place, candidate))
    kept: set[str] = set()
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        kept.update(candidate.id for _, candidate in members[:first])
    return [c for c in found if c.id in kept]


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
