"""What a claim reads and writes of a queue's control records: the :class:`View` one read
finds (:func:`read_view`), and the conditional updates of the queue's document that take from
the limits (:func:`take_filter`, :func:`take_update`), give back what a claim did not use
(:func:`settle_update`) and drop reservations that outlived their claim
(:func:`expire_update`).

The stored form and the operations on the records themselves (list, put, delete) are in
:mod:`rdq_mongo._controls`; the claim that uses all this is in
:mod:`rdq_mongo._claims._rounds`. Kept apart because this is the claim's side only: every
function here reads a ``View`` or writes against one, fenced on the write id the view saw.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rdq.spi import QUEUE_KEY, Bucket, ClaimGate, ClaimOrder, Control
from rdq_mongo._codec import from_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._controls import Pipeline, control_of, elements_of, handler_of, update_each
from rdq_mongo._filters import NOW_US, Scope, is_number

__all__ = [
    "View",
    "expire_update",
    "read_view",
    "settle_update",
    "take_filter",
    "take_update",
]


# --- expressions on a stored element ---------------------------------------------------------


def _element(key: str) -> Document:
    """The expression of the stored element of ``key`` (missing when there is none)."""
    return {
        "$arrayElemAt": [
            {
                "$filter": {
                    "input": {"$ifNull": ["$c", []]},
                    "cond": {"$eq": ["$$this.key", {"$literal": key}]},
                }
            },
            0,
        ]
    }


def _pending_sum(element: str) -> Document:
    return {"$sum": {"$map": {"input": {"$ifNull": [f"{element}.pending", []]}, "in": "$$this.n"}}}


def _refilled(element: str, control: Control) -> Document:
    """The expression of the bucket of ``element`` refilled to the server's now (full when
    it has no tokens stored: a new or changed rate)."""
    cap = control.bucket
    per_us = float(control.rate or 0) / control.per / 1_000_000
    elapsed = {"$max": [0, {"$subtract": [NOW_US, f"{element}.at"]}]}
    return {
        "$cond": [
            {"$and": [is_number(f"{element}.tokens"), is_number(f"{element}.at")]},
            {"$min": [cap, {"$add": [f"{element}.tokens", {"$multiply": [elapsed, per_us]}]}]},
            cap,
        ]
    }


# --- what one read of a queue's records says -------------------------------------------------


@dataclass
class View:
    """The control records of one queue as one read found them, at the server's ``now_us``."""

    queue: str
    now_us: int
    elements: dict[str, Document]
    controls: dict[str, Control] = field(init=False)

    def __post_init__(self) -> None:
        self.controls = {key: control_of(self.queue, e) for key, e in self.elements.items()}

    @property
    def now(self) -> datetime:
        at = from_micros(self.now_us)
        assert at is not None
        return at

    @property
    def order(self) -> ClaimOrder:
        """The claim order the queue's own record asks for (strict unless it sets ``fair``
        or ``aging``)."""
        return ClaimOrder.of(self.controls.get(QUEUE_KEY))

    @property
    def restricting(self) -> bool:
        """True when some record restricts claims (a pause or a limit): else the claim is
        the plain one."""
        return any(_restricts(c) for c in self.controls.values())

    @property
    def blocks_queue(self) -> bool:
        """True when the queue's own record lets no task through (paused, a gate or a
        concurrency of 0)."""
        queue = self.controls.get(QUEUE_KEY)
        return queue is not None and (queue.paused or queue.gate == 0 or queue.concurrency == 0)

    @property
    def limited(self) -> dict[str, Control]:
        """The records that limit claims by counting (a gate, a concurrency, a rate) and do
        not pause them."""
        return {k: c for k, c in self.controls.items() if not c.paused and _limits(c)}

    @property
    def concurrency_keys(self) -> list[str]:
        return sorted(k for k, c in self.limited.items() if c.concurrency is not None)

    @property
    def has_expired_reservations(self) -> bool:
        """True when some reservation of concurrency slots outlived its claim (a claimant
        that died between reserving and settling)."""
        return any(
            isinstance(p, dict) and isinstance(p.get("u"), int) and p["u"] < self.now_us
            for e in self.elements.values()
            for p in e.get("pending") or []
        )

    def pending(self, key: str) -> int:
        """Concurrency slots of ``key`` reserved by claims that have not settled yet."""
        return sum(
            p["n"]
            for p in self.elements[key].get("pending") or []
            if isinstance(p, dict) and isinstance(p.get("n"), int)
        )

    def reservations(self, key: str) -> set[str]:
        """The takes (``o``) whose reservations :meth:`pending` counts for ``key``: their
        leases are in those slots already."""
        return {
            p["o"]
            for p in self.elements[key].get("pending") or []
            if isinstance(p, dict) and isinstance(p.get("n"), int) and isinstance(p.get("o"), str)
        }

    def seq(self, key: str) -> int:
        seq = self.elements[key].get("seq")
        return seq if isinstance(seq, int) else 0

    def gate(self, live: Mapping[str, int]) -> ClaimGate:
        """The rule as of this read: ``live`` leases per concurrency key, plus the slots
        other claims reserved."""
        buckets = {}
        for key, element in self.elements.items():
            tokens, at = element.get("tokens"), element.get("at")
            if isinstance(tokens, int | float) and isinstance(at, int):
                when = from_micros(at)
                assert when is not None
                buckets[key] = Bucket(float(tokens), when)
        in_use = {k: live.get(k, 0) + self.pending(k) for k in self.concurrency_keys}
        return ClaimGate(self.controls, buckets, in_use, self.now)

    def pause_scope(self, held: Collection[str] = ()) -> Scope:
        """The tasks that no pause (and no key of ``held``) holds back."""
        excluded = {k for k, c in self.controls.items() if c.paused} | set(held)
        return Scope(
            not_handlers={h for k in excluded if (h := handler_of(k)) is not None},
            not_keys={k for k in excluded if k != QUEUE_KEY and handler_of(k) is None},
        )

    def class_scope(self, keys: Collection[str]) -> Scope:
        """The due tasks whose limited keys are exactly ``keys``, and that no pause holds
        back: any of them takes from the limits exactly what one with ``keys`` takes."""
        paused = self.pause_scope()
        limited = set(self.limited)
        handlers = [h for k in keys if (h := handler_of(k)) is not None]
        task_keys = {k for k in keys if k != QUEUE_KEY and handler_of(k) is None}
        other = limited - set(keys)
        return Scope(
            handler=handlers[0] if handlers else None,
            not_handlers=set(paused.not_handlers)
            | {h for k in other if (h := handler_of(k)) is not None},
            not_keys=set(paused.not_keys)
            | {k for k in other if k != QUEUE_KEY and handler_of(k) is None},
            keys=task_keys,
        )


def _limits(control: Control) -> bool:
    return control.gate is not None or control.concurrency is not None or control.rate is not None


def _restricts(control: Control) -> bool:
    return control.paused or _limits(control)


async def read_view(connection: Connection, queue: str) -> View | None:
    """The control records of ``queue`` and the server's now, in one read (``None`` when the
    queue has none: the common case, one indexed lookup that finds nothing)."""
    cursor = await connection.controls.aggregate(
        [{"$match": {"_id": queue}}, {"$addFields": {"now": NOW_US}}]
    )
    for doc in await cursor.to_list():
        elements = {str(e.get("key")): e for e in elements_of(doc)}
        if elements:
            return View(queue=queue, now_us=int(doc["now"]), elements=elements)
    return None


# --- what a claim writes -----------------------------------------------------------------------


def _fence(key: str, view: View) -> Document:
    return {"$eq": ["$$e.w", {"$literal": view.elements[key].get("w")}]}


def take_filter(
    view: View, totals: Mapping[str, int], live: Mapping[str, int], *, slots_only: bool = False
) -> Document:
    """The queue's document if it still lets ``totals[key]`` more tasks through each key:
    the record unchanged since ``view`` (its write id), gate and tokens enough, and for a
    concurrency limit no reservation removed since the leases were counted (``seq``) and
    ``live`` leases plus every reservation plus these within the limit. ``slots_only``: the
    concurrency slots alone (an extension of a lapsed lease, which is no claim)."""
    conditions: list[Document] = []
    for key, n in totals.items():
        control = view.controls[key]
        checks: list[Document] = [_fence(key, view)]
        if control.gate is not None and not slots_only:
            checks.append({"$gte": ["$$e.gate", n]})
        if control.rate is not None and not slots_only:
            checks.append({"$gte": [_refilled("$$e", control), n]})
        if control.concurrency is not None:
            checks.append({"$eq": [{"$ifNull": ["$$e.seq", 0]}, view.seq(key)]})
            room = control.concurrency - live.get(key, 0)
            checks.append({"$lte": [{"$add": [_pending_sum("$$e"), n]}, room]})
        conditions.append({"$let": {"vars": {"e": _element(key)}, "in": {"$and": checks}}})
    return {"_id": view.queue, "$expr": {"$and": conditions}}


def take_update(
    view: View, totals: Mapping[str, int], owner: str, hold_us: int, *, slots_only: bool = False
) -> Pipeline:
    """Take ``totals[key]`` from each key's gate and bucket (unless ``slots_only``), and
    reserve as many of its concurrency slots for claim ``owner`` until now + ``hold_us``."""
    changes: dict[str, Document] = {}
    for key, n in totals.items():
        control = view.controls[key]
        change: Document = {}
        if control.gate is not None and not slots_only:
            change["gate"] = {"$subtract": ["$$e.gate", n]}
        if control.rate is not None and not slots_only:
            change["tokens"] = {"$subtract": [_refilled("$$e", control), n]}
            change["at"] = NOW_US
        if control.concurrency is not None:
            mine = {"o": {"$literal": owner}, "n": n, "u": {"$add": [NOW_US, hold_us]}}
            change["pending"] = {"$concatArrays": [{"$ifNull": ["$$e.pending", []]}, [mine]]}
        changes[key] = change
    return update_each(changes)


def settle_update(view: View, unused: Mapping[str, int], owner: str) -> Pipeline:
    """After the leases: give back to each key's gate and bucket what claim ``owner`` took
    and did not use (only if the record was not written since: a new gate is the
    engine's), and remove its reservations of concurrency slots (bumping ``seq``)."""
    changes: dict[str, Document] = {}
    for key, n in unused.items():
        control = view.controls[key]
        change: Document = {}
        same = _fence(key, view)
        if n and control.gate is not None:
            change["gate"] = {
                "$cond": [
                    {"$and": [same, is_number("$$e.gate")]},
                    {"$add": ["$$e.gate", n]},
                    "$$e.gate",
                ]
            }
        if n and control.rate is not None:
            change["tokens"] = {
                "$cond": [
                    {"$and": [same, is_number("$$e.tokens")]},
                    {"$min": [control.bucket, {"$add": ["$$e.tokens", n]}]},
                    "$$e.tokens",
                ]
            }
        if control.concurrency is not None:
            before = {"$ifNull": ["$$e.pending", []]}
            kept = {"$filter": {"input": before, "cond": {"$ne": ["$$this.o", owner]}}}
            change["pending"] = kept
            change["seq"] = {
                "$cond": [
                    {"$eq": [{"$size": kept}, {"$size": before}]},
                    {"$ifNull": ["$$e.seq", 0]},
                    {"$add": [{"$ifNull": ["$$e.seq", 0]}, 1]},
                ]
            }
        if change:
            changes[key] = change
    return update_each(changes) if changes else []


def expire_update() -> Pipeline:
    """Remove the reservations that outlived their claim, bumping ``seq`` where one was."""
    before = {"$ifNull": ["$$e.pending", []]}
    kept = {"$filter": {"input": before, "cond": {"$gte": ["$$this.u", NOW_US]}}}
    return [
        {
            "$set": {
                "c": {
                    "$map": {
                        "input": "$c",
                        "as": "e",
                        "in": {
                            "$cond": [
                                {"$eq": [{"$size": kept}, {"$size": before}]},
                                "$$e",
                                {
                                    "$mergeObjects": [
                                        "$$e",
                                        {
                                            "pending": kept,
                                            "seq": {"$add": [{"$ifNull": ["$$e.seq", 0]}, 1]},
                                        },
                                    ]
                                },
                            ]
                        },
                    }
                }
            }
        }
    ]
