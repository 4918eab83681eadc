"""``extend_lease`` under concurrency limits: a live lease is extended in one findAndModify,
as it always was; a lapsed one holds no slot (``live_leases`` counts live leases only), so
extending it takes its slots again, through the claims' own reservation of the queue's
control document (``_view.take_filter`` and ``take_update`` for the concurrency limits of the
task's keys alone, ``slots_only``): reserve a slot of each, extend the lease stamped with the
reservation, settle. An extension and a claim never both take the last slot, for the reason
the claims never do (see ``_rounds``); when a slot is not free — another task took it while
the lease was lapsed — the extension raises ``StaleClaim`` and changes nothing.
"""

from __future__ import annotations

import secrets
from collections import Counter

from pymongo import ReturnDocument

from rdq.errors import StaleClaim
from rdq_mongo import _filters as f
from rdq_mongo._claims import _view as ctl
from rdq_mongo._claims._rounds import _TAKE_ATTEMPTS, _after_lost_take, _keys_of
from rdq_mongo._connection import Connection, Document
from rdq_mongo._controls import live_leases
from rdq_mongo._updates import extend_update

__all__ = ["extend"]

_PROJECTION = {"lease_expires_at": 1}


async def extend(
    connection: Connection, task_id: str, token: str, lease_us: int, hold_us: int
) -> Document | None:
    """The task (its ``lease_expires_at``) after moving its lease to now + ``lease_us``, or
    ``None`` when ``token`` is not the current claim of an IN_FLIGHT task (the caller tells
    a stale claim from a missing task); ``StaleClaim`` for a lapsed lease whose slot of some
    concurrency limit another task took."""
    live = {**f.claimed_with(task_id, token), "$expr": {"$gt": ["$lease_expires_at", f.NOW_US]}}
    doc: Document | None = await connection.tasks.find_one_and_update(
        live, extend_update(lease_us), projection=_PROJECTION, return_document=ReturnDocument.AFTER
    )
    if doc is not None:
        return doc
    held = await connection.tasks.find_one(
        f.claimed_with(task_id, token), projection={"queue": 1, "handler_ref": 1, "keys": 1}
    )
    if held is None:
        return None
    queue = str(held.get("queue"))
    for attempt in range(_TAKE_ATTEMPTS):
        view = await ctl.read_view(connection, queue)
        if view is not None and view.has_expired_reservations:
            await connection.controls.update_one({"_id": queue}, ctl.expire_update())
            view = await ctl.read_view(connection, queue)
        limited = (
            []
            if view is None
            else [
                k
                for k in _keys_of(held)
                if k in view.controls and view.controls[k].concurrency is not None
            ]
        )
        if view is None or not limited:
            return await _extend(connection, task_id, token, lease_us, None)
        covered = {k: view.reservations(k) for k in limited}
        counted = await live_leases(connection, queue, limited, covered)
        for key in limited:
            if counted[key] + view.pending(key) >= (view.controls[key].concurrency or 0):
                raise StaleClaim(task_id)
        slots = Counter(limited)
        owner = secrets.token_hex(8)
        taken = await connection.controls.update_one(
            ctl.take_filter(view, slots, counted, slots_only=True),
            ctl.take_update(view, slots, owner, hold_us, slots_only=True),
        )
        if not taken.matched_count:
            await _after_lost_take(attempt)
            continue
        try:
            return await _extend(connection, task_id, token, lease_us, owner)
        finally:
            settle = ctl.settle_update(view, dict.fromkeys(limited, 0), owner)
            await connection.controls.update_one({"_id": queue}, settle)
    raise StaleClaim(task_id)  # contended past reason: refusing is always safe


async def _extend(
    connection: Connection, task_id: str, token: str, lease_us: int, reservation: str | None
) -> Document | None:
    """The fenced extension itself, stamped with ``reservation`` (the take whose slots it is
    in until that take is settled) when there is one."""
    update = extend_update(lease_us)
    if reservation is not None:
        update = [*update, {"$set": {"reservation": {"$literal": reservation}}}]
    found: Document | None = await connection.tasks.find_one_and_update(
        f.claimed_with(task_id, token),
        update,
        projection=_PROJECTION,
        return_document=ReturnDocument.AFTER,
    )
    return found
