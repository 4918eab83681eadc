"""Test hooks of the MongoDB store (not part of the storage contract): write a stored task
that does not decode, the way a hand edit or a buggy producer in another language would, as
the compliance kit's ``corrupt_task`` fixture asks; and see which commands a store sends
(:class:`Commands`), to pin what an operation costs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pymongo import monitoring

from rdq.spi import Envelope, bounds
from rdq_mongo._codec import envelope_to_document
from rdq_mongo._store import MongoStorage

__all__ = ["CORRUPT_FIELDS", "Commands", "put_corrupt_task"]

CORRUPT_FIELDS: dict[str, dict[str, Any]] = {
    "undecodable": {"body": '{"payload": {"n": 1'},  # a body that is not JSON
    "deep": {"body": '{"payload": ' + "[" * 5000 + "]" * 5000 + "}"},
    "far_time": {"created_at": 10**18},  # microseconds: the year 33658
}
"""For each ``kind`` of ``rdq_compliance.CorruptTaskWriter``: the stored fields that replace
those of an intact task."""


async def put_corrupt_task(
    store: MongoStorage,
    queue: str,
    task_id: str,
    fields: Mapping[str, Any] | None = None,
    *,
    kind: str = "undecodable",
) -> None:
    """Store a PENDING task of ``queue``, due a second ago by the server clock, whose stored
    ``fields`` replace those of an intact task (by default those of ``kind``, see
    :data:`CORRUPT_FIELDS`). Reads return it with ``corrupt`` set, naming what is wrong."""
    bounds.check_queue(queue)
    bounds.check_task_id(task_id)
    now = await store.now()
    intact = Envelope(
        id=task_id,
        queue=queue,
        handler_ref="app:handler",
        payload={"n": 1},
        created_at=now,
        next_attempt_at=now - timedelta(seconds=1),
    )
    document = envelope_to_document(intact)
    document.update(CORRUPT_FIELDS[kind] if fields is None else fields)
    with store._errors() as connection:
        await connection.tasks.insert_one(document)


class Commands(monitoring.CommandListener):
    """The commands a client sends, as (command, collection), the documents each ``find`` of
    tasks returned in its first batch, and every task document the server returned to
    ``find`` and ``getMore`` (``returned``). Pass it to the store as
    ``MongoStorage.from_url(url, event_listeners=[commands])``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.found: list[int] = []
        self.returned = 0
        self._finds: set[int] = set()
        self._more: set[int] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self.seen.append((event.command_name, target if isinstance(target, str) else ""))
        if event.command_name == "find" and str(target).endswith("tasks"):
            self._finds.add(event.request_id)
        elif event.command_name == "getMore" and str(event.command.get("collection")).endswith(
            "tasks"
        ):
            self._more.add(event.request_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id in self._finds:
            batch = len(event.reply["cursor"]["firstBatch"])
            self.found.append(batch)
            self.returned += batch
        elif event.request_id in self._more:
            self.returned += len(event.reply["cursor"]["nextBatch"])

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def clear(self) -> None:
        self.seen.clear()
        self.found.clear()
        self.returned = 0
