"""What the claim tests of rdq-mongo share (``test_flow``, ``test_order``): a long lease, two
handlers, writing a control record, reading its stored element, and the ids of a claim."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from rdq.spi import Claimed, Control
from rdq_mongo import MongoStorage

__all__ = ["LONG", "A", "B", "ids_of", "put_control", "stored_element"]

LONG = timedelta(minutes=10)
"""A lease no test outlives."""
A, B = "app.handlers:a", "app.handlers:b"


async def put_control(store: MongoStorage, control: Control) -> Control:
    """Write ``control`` over the record of its key as it is now (or as the first one)."""
    found = {c.key: c for c in await store.list_controls(control.queue)}.get(control.key)
    return await store.put_control(control, expected_version=found.version if found else 0)


async def stored_element(store: MongoStorage, key: str, queue: str = "q") -> dict[str, Any]:
    """The element of ``key`` in ``queue``'s control document, as stored (its gate, bucket,
    reservations and ``seq``)."""
    doc = await store._connection().controls.find_one({"_id": queue})
    assert doc is not None
    (element,) = [e for e in doc["c"] if e["key"] == key]
    return dict(element)


def ids_of(claimed: Iterable[Claimed]) -> set[str]:
    """The ids of the tasks of a claim."""
    return {c.task.id for c in claimed}
