"""What an action on selected tasks came to: how many the selection **matched** when the action
began, how many it **did** (redrove, purged, cancelled), and how many were **already gone** by
the time it reached them — redriven, purged, cancelled or removed by retention in between
(:class:`ActionReport`). Also the purge that archives what it deletes (:func:`purge_archived`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from rdq.blobs import Blobs
from rdq.errors import NotFound
from rdq.retention import Archive, archive_then_purge
from rdq.spi import Envelope, Status, Storage

__all__ = ["ActionReport", "purge_archived", "tasks_in"]


class ActionReport(msgspec.Struct, kw_only=True, frozen=True):
    """An action's outcome in three numbers: ``matched`` when it began, ``done``, and
    ``gone`` (matched, then gone before the action reached them: ``matched - done``)."""

    matched: int
    done: int
    archived: int = 0
    """How many a purge wrote to the archive before deleting them."""
    where: str | None = None
    """Where a purge's archive went."""

    @property
    def gone(self) -> int:
        return max(0, self.matched - self.done)

    def to_builtins(self) -> dict[str, object]:
        out: dict[str, object] = {"matched": self.matched, "done": self.done, "gone": self.gone}
        if self.archived or self.where:
            out["archived"] = self.archived
            out["archive"] = self.where
        return out


async def tasks_in(
    storage: Storage, queue: str, ids: Sequence[str], statuses: tuple[Status, ...]
) -> list[Envelope]:
    """The tasks of ``queue`` among ``ids`` in one of ``statuses``, with every attempt."""
    found: list[Envelope] = []
    for task_id in dict.fromkeys(ids):
        try:
            task = await storage.get(task_id)
        except NotFound:
            continue
        if task.queue == queue and task.status in statuses:
            found.append(task)
    return found


async def purge_archived(
    storage: Storage,
    archive: Archive,
    queue: str,
    pages: AsyncIterator[list[Envelope]],
    progress: Callable[[int, int], None] | None = None,
    blobs: Blobs | None = None,
) -> ActionReport:
    """Purge the tasks ``pages`` hold (read with their attempts), each page written to
    ``archive`` before it is deleted (see :func:`rdq.retention.archive_then_purge`; with
    ``blobs``, payloads kept by reference are archived whole)."""
    matched = done = archived = 0
    where: str | None = None
    async for page in pages:
        matched += len(page)
        expired, said = await archive_then_purge(storage, archive, queue, page, blobs)
        archived += len(page)
        done += expired
        where = said or where
        if progress is not None:
            progress(done, matched)
    return ActionReport(matched=matched, done=done, archived=archived, where=where)
