"""Control records (capability ``control``): how they are stored, written by compare-and-set
on their version, and listed with the tasks in use; ``retry_now``.

Collection ``<prefix>controls`` holds one document per queue that has control records::

    {_id: <queue>, c: [<element>, ...]}

and each element is the record of one key::

    key, paused, gate, concurrency, rate, per, burst, fair, aging   as in rdq.spi.Control
                 (``fair`` and ``aging`` on the queue's own record ``*`` only; absent from
                 records written before contract version 4, which read as ``None``)
    cap          the bucket's size (``Control.bucket``) when there is a rate, else null
    state        the engine's state, JSON text (any keys, any nesting, stored as given)
    version      the record's version (compare-and-set)
    updated_at   the server's now of the last put, integer microseconds
    w            a random id of the last put: what a claim fences its writes on (a record
                 deleted and created again starts at version 1 again; ``w`` never repeats)
    tokens, at   the rate bucket: tokens left as of ``at`` (microseconds); null = full
    seq          bumped whenever a claim's reservation of concurrency slots is removed
    pending      [{o, n, u}]: concurrency slots reserved by take ``o`` (a random id per
                 take of a claim; its leases carry it as ``reservation``), ``n`` of them,
                 until ``u`` at the latest (microseconds)

All of a queue's records live in one document so that a claim takes what a batch of tasks
needs from every key of the queue — gates, tokens, concurrency slots — in **one conditional
update of one document**, atomic on every server without a transaction (see ``_claims``).
What a claim reads and writes of them (the ``View`` of one read, the take, settle and expire
updates) is in ``_claims._view``; this module holds the stored form, the live-lease count and
the operations on the records themselves (list, put, delete).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

import msgspec
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, ClaimOrder, Control, Status
from rdq.spi._flow import HANDLER_PREFIX
from rdq.spi.bounds import MAX_AGING
from rdq_mongo._codec import from_micros
from rdq_mongo._connection import Connection, Document
from rdq_mongo._filters import NOW_US, is_number, retry_now_filter, ungrouped_filter
from rdq_mongo._updates import group_update, retry_now_update

__all__ = [
    "Pipeline",
    "admission_orders",
    "control_of",
    "delete_control",
    "elements_of",
    "group_tasks",
    "handler_of",
    "list_controls",
    "live_leases",
    "order_in",
    "orders_of",
    "put_control",
    "retry_now",
    "update_each",
]

Pipeline = list[Document]
_json_decoder = msgspec.json.Decoder()


def handler_of(key: str) -> str | None:
    """The handler ref a handler's key names, else ``None`` (a task key or the queue's)."""
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
        "fair": control.fair,
        "aging": None if control.aging is None else float(control.aging),
        "state": msgspec.json.encode(control.state).decode("utf-8"),
    }


def _fair_of(element: Document) -> str | None:
    fair = element.get("fair")
    return fair if isinstance(fair, str) and fair else None


def _aging_of(element: Document) -> float | None:
    aging = element.get("aging")
    if isinstance(aging, bool) or not isinstance(aging, int | float):
        return None
    return float(aging) if 0 < aging <= MAX_AGING else None


def control_of(queue: str, element: Document) -> Control:
    """The record stored in ``element`` (``in_use`` left unset; a ``fair`` or ``aging`` that
    is not a valid setting, written by hand, reads as none)."""
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
        fair=_fair_of(element),
        aging=_aging_of(element),
        state=state if isinstance(state, dict) else {"unreadable": state},
        version=int(element.get("version") or 0),
        updated_at=from_micros(element.get("updated_at")),
    )


def elements_of(doc: Document | None) -> list[Document]:
    found = doc.get("c") if doc is not None else None
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def update_each(changes: Mapping[str, Document]) -> Pipeline:
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


def _counted(wanted: list[str], covered: Mapping[str, Collection[str]]) -> Document:
    """Of the unwound (key ``k``, reservation ``r``) rows: those of a wanted key whose lease
    no reservation of ``covered`` holds for that key."""
    plain = [k for k in wanted if not covered.get(k)]
    either: list[Document] = [{"k": {"$in": plain}}] if plain else []
    either.extend({"k": k, "r": {"$nin": sorted(covered[k])}} for k in wanted if covered.get(k))
    return either[0] if len(either) == 1 else {"$or": either}


async def live_leases(
    connection: Connection,
    queue: str,
    keys: Iterable[str],
    covered: Mapping[str, Collection[str]] | None = None,
) -> Counter[str]:
    """Per key of ``keys``: the tasks of ``queue`` with that key that hold a live lease
    (IN_FLIGHT, the lease after the server's now), counted by the server in one
    aggregation.

    ``covered[key]`` names reservations (a take's id, ``reservation`` on the task) whose
    leases not to count under ``key``: a claim that adds the reservations themselves counts
    each slot once, not once as a reservation and again as the lease made under it."""
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
        handlers = [h for k in wanted if (h := handler_of(k)) is not None]
        task_keys = [k for k in wanted if handler_of(k) is None]
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
        {
            "$project": {
                "_id": 0,
                "k": {"$concatArrays": [[QUEUE_KEY], handler, own]},
                "r": {"$ifNull": ["$reservation", None]},
            }
        },
        {"$unwind": "$k"},
        {"$match": _counted(wanted, covered or {})},
        {"$group": {"_id": "$k", "n": {"$sum": 1}}},
    ]
    async for row in await connection.tasks.aggregate(pipeline):
        counts[str(row["_id"])] = int(row["n"])
    return counts


# --- the groups of a fair or aged queue ---------------------------------------------------


def order_in(queue: str, doc: Document | None) -> ClaimOrder:
    """The claim order the ``*`` record in ``queue``'s control document ``doc`` asks for."""
    for element in elements_of(doc):
        if element.get("key") == QUEUE_KEY:
            return ClaimOrder.of(control_of(queue, element))
    return ClaimOrder()


async def orders_of(connection: Connection, queues: Collection[str]) -> dict[str, ClaimOrder]:
    """The claim order of each of ``queues`` as its ``*`` record asks for it now (one read of
    their control documents, only the ``*`` elements; strict for a queue that has none)."""
    wanted = sorted(set(queues))
    found = connection.controls.find(
        {"_id": wanted[0] if len(wanted) == 1 else {"$in": wanted}},
        projection={"c": {"$elemMatch": {"key": QUEUE_KEY}}},
    )
    docs = {str(doc["_id"]): doc async for doc in found}
    return {queue: order_in(queue, docs.get(queue)) for queue in wanted}


ORDER_REUSE = 1.0
"""Seconds an admission reuses the claim order it read of a queue, so that a stream of
enqueues costs one read of the queue's ``*`` record a second, not one each. An order that
changed meanwhile (by another process: this one's own ``put_control`` and ``delete_control``
forget theirs) stores a few tasks grouped under the order before; the next claim regroups
them before it reads (``_claims._order``): a write, never a place in the order."""

ORDER_CACHE_SIZE = 10_000
"""Queues whose order admission remembers at most (then it starts again)."""


async def admission_orders(
    connection: Connection, queues: Collection[str]
) -> dict[str, ClaimOrder]:
    """The claim order of each of ``queues`` for admission: as read within the last
    :data:`ORDER_REUSE` seconds, else read now (one read for every queue not known)."""
    now = time.monotonic()
    known = connection.orders
    stale = [q for q in set(queues) if q not in known or known[q][0] <= now]
    if stale:
        if len(known) + len(stale) > ORDER_CACHE_SIZE:
            known.clear()
        for queue, order in (await orders_of(connection, stale)).items():
            known[queue] = (now + ORDER_REUSE, order)
    return {queue: known[queue][1] for queue in queues}


async def group_tasks(connection: Connection, queue: str, stamp: str) -> int:
    """Group under the order of ``stamp`` every live task of ``queue`` grouped under another
    one (or none): one ``update_many``, each document atomic, so a run cut short leaves the
    rest for the next. How many were changed."""
    result = await connection.tasks.update_many(ungrouped_filter(queue, stamp), group_update(stamp))
    return result.modified_count


# --- the operations -----------------------------------------------------------------------------


async def list_controls(connection: Connection, queue: str | None) -> list[Control]:
    """The records of ``queue`` (of every queue for ``None``), by queue then key, each with
    ``in_use``: one read, then one count per queue."""
    found = connection.controls.find({} if queue is None else {"_id": queue})
    docs = sorted([doc async for doc in found], key=lambda d: str(d["_id"]))
    out: list[Control] = []
    for doc in docs:
        name = str(doc["_id"])
        controls = sorted((control_of(name, e) for e in elements_of(doc)), key=lambda c: c.key)
        live = await live_leases(connection, name, [c.key for c in controls])
        out.extend(msgspec.structs.replace(c, in_use=live[c.key]) for c in controls)
    return out


async def _current(connection: Connection, queue: str, key: str) -> Control | None:
    doc = await connection.controls.find_one({"_id": queue})
    for element in elements_of(doc):
        if element.get("key") == key:
            return control_of(queue, element)
    return None


async def put_control(connection: Connection, control: Control, expected_version: int) -> Control:
    """Compare-and-set on the version in the filter of one update: of racing writers of one
    version, exactly one matches (a first record: one upsert inserts the queue's document or
    appends to it; the others find the key there, or lose the insert on ``_id``)."""
    queue, key = control.queue, control.key
    connection.orders.pop(queue, None)
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
            update = update_each({key: {"$mergeObjects": [{"$literal": fields}, changes]}})
            doc = await connection.controls.find_one_and_update(
                {"_id": queue, "c": {"$elemMatch": {"key": key, "version": expected_version}}},
                update,
                return_document=ReturnDocument.AFTER,
            )
    except DuplicateKeyError:
        doc = None
    if doc is not None:
        for element in elements_of(doc):
            if element.get("key") == key:
                return control_of(queue, element)
    raise ControlConflict(queue, key, await _current(connection, queue, key))


async def delete_control(
    connection: Connection, queue: str, key: str, expected_version: int
) -> bool:
    """Remove the record if its version is the expected one (fenced in the update's filter);
    the queue's document goes once it holds none."""
    connection.orders.pop(queue, None)
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


async def retry_now(connection: Connection, queue: str, task_ids: list[str]) -> int:
    """Make the listed PENDING tasks of ``queue`` that are not yet due due now; how many."""
    result = await connection.tasks.update_many(
        retry_now_filter(queue, task_ids), retry_now_update()
    )
    return result.modified_count
