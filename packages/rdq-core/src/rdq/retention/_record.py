"""The retention record of a queue: what retention archived and removed, in total and in its
last round, and who runs it now.

It is a control record of the queue (key ``op:retention``, capability ``control``), changed by
compare-and-set like a paced redrive's: a worker takes it for a round (``runner`` and
``until``, its lease) so that the workers of a fleet do not archive the same tasks at once,
and adds its round's counts when it gives it back. A worker that dies mid-round holds it until
its lease lapses; then another takes over (its round may archive again what the dead one had
archived but not yet deleted: at least once, never lost). Without ``control`` every worker runs
retention on its own, and the counts are only its metrics.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from rdq.flow import RETENTION_KEY, update_control
from rdq.spi import Control, Storage, require

__all__ = ["RetentionRecord", "give_back", "read_record", "read_records", "take"]


class RetentionRecord(msgspec.Struct, kw_only=True, frozen=True):
    """What the queue's retention did (counts by status) and where it stands."""

    archived: dict[str, int] = {}
    """Tasks written to the archive, by status, since the record began."""
    expired: dict[str, int] = {}
    """Tasks retention removed from the store, by status (each was archived first)."""
    last_run: datetime | None = None
    last_archived: int = 0
    last_expired: int = 0
    where: str | None = None
    """Where the last round's archive went."""
    error: str | None = None
    """Why the last round stopped early (nothing it had not archived was deleted)."""
    runner: str | None = None
    until: datetime | None = None


def _of(control: Control) -> RetentionRecord:
    raw = control.state.get("retention")
    if raw is None:
        return RetentionRecord()
    try:
        return msgspec.convert(raw, RetentionRecord)
    except msgspec.ValidationError:
        return RetentionRecord()


def _with(control: Control, record: RetentionRecord) -> Control:
    state = dict(control.state)
    state["retention"] = msgspec.to_builtins(record)
    return msgspec.structs.replace(control, state=state)


async def read_record(storage: Storage, queue: str) -> RetentionRecord | None:
    """The queue's retention record (``None`` without ``control`` or before any round)."""
    if not storage.capabilities().control:
        return None
    for control in await storage.list_controls(queue):
        if control.key == RETENTION_KEY:
            return _of(control)
    return None


async def read_records(storage: Storage) -> dict[str, RetentionRecord]:
    """Every queue's retention record, by queue (``{}`` without ``control``)."""
    if not storage.capabilities().control:
        return {}
    return {c.queue: _of(c) for c in await storage.list_controls(None) if c.key == RETENTION_KEY}


async def take(storage: Storage, queue: str, runner: str, now: datetime, lease: timedelta) -> bool:
    """Take the queue's retention for a round; False when another runner holds it."""
    require(storage, "control", "one retention runner per queue")

    def change(control: Control) -> Control | None:
        record = _of(control)
        if record.runner not in (None, runner) and record.until is not None and record.until > now:
            return None
        return _with(control, msgspec.structs.replace(record, runner=runner, until=now + lease))

    _, after = await update_control(storage, queue, RETENTION_KEY, change)
    return after is not None


async def give_back(
    storage: Storage,
    queue: str,
    runner: str,
    now: datetime,
    archived: dict[str, int],
    expired: dict[str, int],
    where: str | None,
    error: str | None,
) -> RetentionRecord | None:
    """Add a round's counts to the record and release it (also when the round failed)."""

    def added(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
        out = dict(total)
        for status, count in more.items():
            out[status] = out.get(status, 0) + count
        return out

    def change(control: Control) -> Control | None:
        record = _of(control)
        released = record.runner == runner
        return _with(
            control,
            msgspec.structs.replace(
                record,
                archived=added(record.archived, archived),
                expired=added(record.expired, expired),
                last_run=now,
                last_archived=sum(archived.values()),
                last_expired=sum(expired.values()),
                where=where or record.where,
                error=error,
                runner=None if released else record.runner,
                until=None if released else record.until,
            ),
        )

    _, after = await update_control(storage, queue, RETENTION_KEY, change)
    return _of(after) if after is not None else None
