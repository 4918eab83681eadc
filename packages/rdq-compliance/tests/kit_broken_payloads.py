"""A broken store that looks into payloads: the clause that a sealed payload round-trips
opaque catches it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import msgspec

from rdq.spi import Envelope
from rdq_memory import MemoryStorage

LIMIT = 65_535
"""A ``TEXT`` column's size in some databases: what a careless store cuts long strings to."""


def _cut(task: Envelope) -> Envelope:
    payload = task.payload
    if isinstance(payload, str) and len(payload) > LIMIT:
        return msgspec.structs.replace(task, payload=payload[:LIMIT])
    return task


class CutsLongStringPayloads(MemoryStorage):
    """Keeps at most 65,535 characters of a payload that is one string (a ``TEXT`` column):
    harmless for the small JSON payloads most clauses use, fatal for a sealed one."""

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return await super().enqueue(_cut(task), delay=delay)

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return await super().enqueue_batch([_cut(t) for t in tasks], delay=delay)


BROKEN_STORES: dict[type[MemoryStorage], list[str]] = {
    CutsLongStringPayloads: ["test_round_trip_keeps_sealed_payloads_opaque"],
}
