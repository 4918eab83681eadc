"""What the clauses of flow control share: filling a queue with keyed tasks, writing a control
over whatever version it has, claiming everything due, reading one control, and opening two
store instances on the same data (the fleet's view: every worker and node has its own)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from rdq.errors import ControlConflict
from rdq.spi import Claimed, Control, Storage
from rdq_compliance._fixtures import StorageOpener
from rdq_compliance._support import LONG_LEASE, clock_passes, new_task

__all__ = [
    "claim_ids",
    "claim_stamps",
    "control_of",
    "fill",
    "lapse",
    "put",
    "two_stores",
    "update",
]


async def fill(storage: Storage, queue: str, count: int, **fields: Any) -> list[str]:
    """Enqueue ``count`` tasks of ``queue`` with ``fields`` (one after another, so each is due
    after the one before); return their ids in that order."""
    ids = []
    for _ in range(count):
        task = new_task(queue, **fields)
        await storage.enqueue(task)
        ids.append(task.id)
    return ids


async def control_of(storage: Storage, queue: str, key: str) -> Control | None:
    """The control of (``queue``, ``key``) as ``list_controls`` gives it, or ``None``."""
    return {c.key: c for c in await storage.list_controls(queue)}.get(key)


async def put(storage: Storage, control: Control) -> Control:
    """Write ``control`` over whatever version its (queue, key) has now."""
    found = await control_of(storage, control.queue, control.key)
    return await storage.put_control(
        control, expected_version=found.version if found is not None else 0
    )


async def update(storage: Storage, queue: str, key: str, **changes: Any) -> Control:
    """Read the control of (``queue``, ``key``), change ``changes`` in it and write it back
    over the version read — as the engine does, with every other field as read (``version``,
    ``updated_at`` and ``in_use`` included: the store owns them and must ignore them)."""
    found = await control_of(storage, queue, key)
    if found is None:
        raise AssertionError(f"no control of ({queue!r}, {key!r}) to change")
    changed = Control(**{**_fields(found), **changes})
    try:
        return await storage.put_control(changed, expected_version=found.version)
    except ControlConflict as conflict:  # pragma: no cover - a clause's own race
        raise AssertionError(f"nobody else writes ({queue!r}, {key!r}): {conflict}") from None


def _fields(control: Control) -> dict[str, Any]:
    return {name: getattr(control, name) for name in control.__struct_fields__}


async def claim_ids(
    storage: Storage,
    queue: str,
    lease: timedelta = LONG_LEASE,
    *,
    limit: int = 1000,
    worker_id: str | None = None,
) -> list[str]:
    """The ids of what one ``claim_due`` of ``queue`` takes (up to ``limit``)."""
    holder = {} if worker_id is None else {"worker_id": worker_id}
    return [c.task.id for c in await storage.claim_due(queue, limit, lease, **holder)]


def claim_stamps(claimed: list[Claimed], lease: timedelta) -> list[datetime]:
    """When the store made each claim, by its own clock."""
    stamps = []
    for c in claimed:
        expires = c.task.lease_expires_at
        assert expires is not None, "a claimed task carries lease_expires_at"
        stamps.append(expires - lease)
    return stamps


async def lapse(storage: Storage, claimed: list[Claimed]) -> None:
    """Wait until the storage clock has passed the lease of every claim in ``claimed``."""
    ends = [c.task.lease_expires_at for c in claimed if c.task.lease_expires_at is not None]
    if ends:
        await clock_passes(storage, max(ends) + timedelta(microseconds=1))


@contextlib.asynccontextmanager
async def two_stores(opener: StorageOpener) -> AsyncIterator[tuple[Storage, Storage]]:
    """Two connected store instances on the same data (the ``peer_storage_url``'s), as two
    workers or nodes of a fleet each have their own."""
    first, second = opener(), opener()
    async with first, second:
        yield first, second
