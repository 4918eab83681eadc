"""Control records (capability ``control``): how they are stored, written by compare-and-set
on their version, listed with the tasks in use, and what a claim reads and writes of them.

Collection ``<prefix>controls`` holds one document per queue that has control records::

    {_id: <queue>, c: [<element>, ...]}

and each element is the record of one key::

    key, paused, gate, concurrency, rate, per, burst   as in rdq.spi.Control
    cap          the bucket's size (``Control.bucket``) when there is a rate, else null
    state        the engine's state, JSON text (any keys, any nesting, stored as given)
    version      the record's version (compare-and-set)
    updated_at   the server's now of the last put, integer microseconds
    w            a random id of the last put: what a claim fences its writes on (a record
                 deleted and created again starts at version 1 again; ``w`` never repeats)
    tokens, at   the rate bucket: tokens left as of ``at`` (microseconds); null = full
    seq          bumped whenever a claim's reservation of concurrency slots is removed
    pending      [{o, n, u}]: concurrency slots reserved by claim ``o`` (a random id per
                 call), ``n`` of them, until ``u`` at the latest (microseconds)

All of a queue's records live in one document so that a claim takes what a batch of tasks
needs from every key of the queue — gates, tokens, concurrency slots — in **one conditional
update of one document**, atomic on every server without a transaction (see ``_claims``).
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import msgspec
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, Bucket, ClaimGate, Control, Status
from rdq.spi._flow import HANDLER_PREFIX
from rdq_mongo._codec import from_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._filters import NOW_US, Scope, is_number

__all__ = [
    "View",
    "delete_control",
    "expire_update",
    "list_controls",
    "live_leases",
    "put_control",
    "read_view",
    "settle_update",
    "take_filter",
    "take_update",
]

Pipeline = list[Document]
_json_decoder = msgspec.json.Decoder()


def _handler_ref(key: str) -> str | None:
    return key[len(HANDLER_PREFIX) :] if key.startswith(HANDLER_PREFIX) else None


# --- the stored form ---------------------------------------------------------------------


def _fields(control: Control) -> Document:
    """What ``put_control`` writes of ``control`` as given (literal values)."""
    return {
        "key": control.key,
        "paused": control.paused,
        "gate": control.gate,
        "concurrency": control.concurrency,
        "rate": control.rate,
        "per": float(control.per),
        "burst": control.burst,
        "cap": control.bucket if control.rate is not None else None,
        "state": msgspec.json.encode(control.state).decode("utf-8"),
    }


def _control(queue: str, element: Document) -> Control:
    """The record stored in ``element`` (``in_use`` left unset)."""
    state_text = element.get("state")
    try:
        state = _json_decoder.decode(state_text) if isinstance(state_text, str) else {}
    except msgspec.DecodeError:
        state = {"unreadable": state_text}
    return Control(
        queue=queue,
        key=str(element.get("key")),
        paused=bool(element.get("paused")),
        gate=element.get("gate"),
        concurrency=element.get("concurrency"),
        rate=element.get("rate"),
        per=float(element.get("per") or 1.0),
        burst=element.get("burst"),
        state=state if isinstance(state, dict) else {"unreadable": state},
        version=int(element.get("version") or 0),
        updated_at=from_micros(element.get("updated_at")),
    )


def _elements(doc: Document | None) -> list[Document]:
    found = doc.get("c") if doc is not None else None
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


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
        self.controls = {key: _control(self.queue, e) for key, e in self.elements.items()}

    @property
    def now(self) -> datetime:
        at = from_micros(self.now_us)
        assert at is not None
        return at

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
            not_handlers={h for k in excluded if (h := _handler_ref(k)) is not None},
            not_keys={k for k in excluded if k != QUEUE_KEY and _handler_ref(k) is None},
        )

    def class_scope(self, keys: Collection[str]) -> Scope:
        """The due tasks whose limited keys are exactly ``keys``, and that no pause holds
        back: any of them takes from the limits exactly what one with ``keys`` takes."""
        paused = self.pause_scope()
        limited = set(self.limited)
        handlers = [h for k in keys if (h := _handler_ref(k)) is not None]
        task_keys = {k for k in keys if k != QUEUE_KEY and _handler_ref(k) is None}
        other = limited - set(keys)
        return Scope(
            handler=handlers[0] if handlers else None,
            not_handlers=set(paused.not_handlers)
            | {h for k in other if (h := _handler_ref(k)) is not None},
            not_keys=set(paused.not_keys)
            | {k for k in other if k != QUEUE_KEY and _handler_ref(k) is None},
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
        elements = {str(e.get("key")): e for e in _elements(doc)}
        if elements:
            return View(queue=queue, now_us=int(doc["now"]), elements=elements)
    return None


# --- what a claim writes -----------------------------------------------------------------------


def _fence(key: str, view: View) -> Document:
    return {"$eq": ["$$e.w", {"$literal": view.elements[key].get("w")}]}


def take_filter(view: View, totals: Mapping[str, int], live: Mapping[str, int]) -> Document:
    """The queue's document if it still lets ``totals[key]`` more tasks through each key:
    the record unchanged since ``view`` (its write id), gate and tokens enough, and for a
    concurrency limit no reservation removed since the leases were counted (``seq``) and
    ``live`` leases plus every reservation plus these within the limit."""
    conditions: list[Document] = []
    for key, n in totals.items():
        control = view.controls[key]
        checks: list[Document] = [_fence(key, view)]
        if control.gate is not None:
            checks.append({"$gte": ["$$e.gate", n]})
        if control.rate is not None:
            checks.append({"$gte": [_refilled("$$e", control), n]})
        if control.concurrency is not None:
            checks.append({"$eq": [{"$ifNull": ["$$e.seq", 0]}, view.seq(key)]})
            room = control.concurrency - live.get(key, 0)
            checks.append({"$lte": [{"$add": [_pending_sum("$$e"), n]}, room]})
        conditions.append({"$let": {"vars": {"e": _element(key)}, "in": {"$and": checks}}})
    return {"_id": view.queue, "$expr": {"$and": conditions}}


def _each(changes: Mapping[str, Document]) -> Pipeline:
    """Apply ``changes[key]`` (fields computed from ``$$e``, the element) to the elements of
    those keys."""
    branches = [
        {"case": {"$eq": ["$$e.key", {"$literal": key}]}, "then": {"$mergeObjects": ["$$e", c]}}
        for key, c in changes.items()
    ]
    return [
        {
            "$set": {
                "c": {
                    "$map": {
                        "input": "$c",
                        "as": "e",
                        "in": {"$switch": {"branches": branches, "default": "$$e"}},
                    }
                }
            }
        }
    ]


def take_update(view: View, totals: Mapping[str, int], owner: str, hold_us: int) -> Pipeline:
    """Take ``totals[key]`` from each key's gate and bucket, and reserve as many of its
    concurrency slots for claim ``owner`` until now + ``hold_us``."""
    changes: dict[str, Document] = {}
    for key, n in totals.items():
        control = view.controls[key]
        change: Document = {}
        if control.gate is not None:
            change["gate"] = {"$subtract": ["$$e.gate", n]}
        if control.rate is not None:
            change["tokens"] = {"$subtract": [_refilled("$$e", control), n]}
            change["at"] = NOW_US
        if control.concurrency is not None:
            mine = {"o": {"$literal": owner}, "n": n, "u": {"$add": [NOW_US, hold_us]}}
            change["pending"] = {"$concatArrays": [{"$ifNull": ["$$e.pending", []]}, [mine]]}
        changes[key] = change
    return _each(changes)


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
    return _each(changes) if changes else []


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


# --- live leases -------------------------------------------------------------------------------


async def live_leases(connection: Connection, queue: str, keys: Iterable[str]) -> Counter[str]:
    """Per key of ``keys``: the tasks of ``queue`` with that key that hold a live lease
    (IN_FLIGHT, the lease after the server's now), counted by the server in one
    aggregation."""
    wanted = sorted(set(keys))
    counts: Counter[str] = Counter()
    if not wanted:
        return counts
    match: Document = {
        "queue": queue,
        "status": Status.IN_FLIGHT.value,
        "$expr": {"$and": [is_number("$lease_expires_at"), {"$gt": ["$lease_expires_at", NOW_US]}]},
    }
    if QUEUE_KEY not in wanted:
        handlers = [h for k in wanted if (h := _handler_ref(k)) is not None]
        task_keys = [k for k in wanted if _handler_ref(k) is None]
        either: list[Document] = []
        if handlers:
            either.append({"handler_ref": {"$in": handlers}})
        if task_keys:
            either.append({"keys": {"$in": task_keys}})
        match["$or"] = either
    handler = {
        "$cond": [
            {"$eq": [{"$type": "$handler_ref"}, "string"]},
            [{"$concat": [HANDLER_PREFIX, "$handler_ref"]}],
            [],
        ]
    }
    own = {"$cond": [{"$isArray": "$keys"}, {"$setUnion": ["$keys", []]}, []]}
    pipeline: Pipeline = [
        {"$match": match},
        {"$project": {"_id": 0, "k": {"$concatArrays": [[QUEUE_KEY], handler, own]}}},
        {"$unwind": "$k"},
        {"$match": {"k": {"$in": wanted}}},
        {"$group": {"_id": "$k", "n": {"$sum": 1}}},
    ]
    async for row in await connection.tasks.aggregate(pipeline):
        counts[str(row["_id"])] = int(row["n"])
    return counts


# --- the operations -----------------------------------------------------------------------------


async def list_controls(connection: Connection, queue: str | None) -> list[Control]:
    """The records of ``queue`` (of every queue for ``None``), by queue then key, each with
    ``in_use``: one read, then one count per queue."""
    found = connection.controls.find({} if queue is None else {"_id": queue})
    docs = sorted([doc async for doc in found], key=lambda d: str(d["_id"]))
    out: list[Control] = []
    for doc in docs:
        name = str(doc["_id"])
        controls = sorted((_control(name, e) for e in _elements(doc)), key=lambda c: c.key)
        live = await live_leases(connection, name, [c.key for c in controls])
        out.extend(msgspec.structs.replace(c, in_use=live[c.key]) for c in controls)
    return out


async def _current(connection: Connection, queue: str, key: str) -> Control | None:
    doc = await connection.controls.find_one({"_id": queue})
    for element in _elements(doc):
        if element.get("key") == key:
            return _control(queue, element)
    return None


async def put_control(connection: Connection, control: Control, expected_version: int) -> Control:
    """Compare-and-set on the version in the filter of one update: of racing writers of one
    version, exactly one matches (a first record: one upsert inserts the queue's document or
    appends to it; the others find the key there, or lose the insert on ``_id``)."""
    queue, key = control.queue, control.key
    fields = _fields(control)
    same_rate: Document = (
        {
            "$and": [
                {"$eq": ["$$e.rate", control.rate]},
                {"$eq": ["$$e.per", float(control.per)]},
                {"$eq": ["$$e.cap", control.bucket]},
            ]
        }
        if control.rate is not None
        else {"$literal": False}
    )
    stamp: Document = {
        "version": expected_version + 1,
        "updated_at": NOW_US,
        "w": {"$literal": secrets.token_hex(8)},
    }
    try:
        if expected_version == 0:
            fresh = {
                "$mergeObjects": [
                    {"$literal": fields},
                    {**stamp, "tokens": None, "at": None, "seq": 0, "pending": []},
                ]
            }
            doc = await connection.controls.find_one_and_update(
                {"_id": queue, "c.key": {"$ne": key}},
                [{"$set": {"c": {"$concatArrays": [{"$ifNull": ["$c", []]}, [fresh]]}}}],
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        else:
            # Pending reservations, ``seq`` and (for the same rate) the bucket carry over.
            changes = {
                **stamp,
                "tokens": {"$cond": [same_rate, {"$ifNull": ["$$e.tokens", None]}, None]},
                "at": {"$cond": [same_rate, {"$ifNull": ["$$e.at", None]}, None]},
                "seq": {"$ifNull": ["$$e.seq", 0]},
                "pending": {"$ifNull": ["$$e.pending", []]},
            }
            update = _each({key: {"$mergeObjects": [{"$literal": fields}, changes]}})
            doc = await connection.controls.find_one_and_update(
                {"_id": queue, "c": {"$elemMatch": {"key": key, "version": expected_version}}},
                update,
                return_document=ReturnDocument.AFTER,
            )
    except DuplicateKeyError:
        doc = None
    if doc is not None:
        for element in _elements(doc):
            if element.get("key") == key:
                return _control(queue, element)
    raise ControlConflict(queue, key, await _current(connection, queue, key))


async def delete_control(
    connection: Connection, queue: str, key: str, expected_version: int
) -> bool:
    """Remove the record if its version is the expected one (fenced in the update's filter);
    the queue's document goes once it holds none."""
    result = await connection.controls.update_one(
        {"_id": queue, "c": {"$elemMatch": {"key": key, "version": expected_version}}},
        [
            {
                "$set": {
                    "c": {
                        "$filter": {
                            "input": "$c",
                            "cond": {"$ne": ["$$this.key", {"$literal": key}]},
                        }
                    }
                }
            }
        ],
    )
    if result.matched_count:
        await connection.controls.delete_one({"_id": queue, "c": {"$size": 0}})
        return True
    current = await _current(connection, queue, key)
    if current is None:
        return False
    raise ControlConflict(queue, key, current)
