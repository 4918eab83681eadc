"""Test hooks of the memory store (not part of the storage contract): write a stored task that
does not decode, as the compliance kit's ``corrupt_task`` fixture asks."""

from __future__ import annotations

from rdq.spi import bounds
from rdq_memory._codec import corrupt_raw, corrupt_record
from rdq_memory._store import MemoryStorage

__all__ = ["put_corrupt_task"]


async def put_corrupt_task(
    store: MemoryStorage,
    queue: str,
    task_id: str,
    raw: str | None = None,
    *,
    kind: str = "undecodable",
) -> None:
    """Store a PENDING task of ``queue``, due now, whose stored form is ``raw`` (which must not
    decode as an envelope), by default one of the ``kind`` the compliance kit asks for (see
    ``rdq_compliance.CorruptTaskWriter``). Reads return it with ``corrupt`` set."""
    bounds.check_queue(queue)
    bounds.check_task_id(task_id)
    raw = corrupt_raw(queue, task_id, kind) if raw is None else raw
    now = await store.now()
    state = store.state
    with state.lock:
        if task_id in state.tasks:
            raise ValueError(f"task {task_id!r} exists already")
        state.add(corrupt_record(queue, task_id, raw, now))
        state.wake(queue)
