"""Keyset pages over the sorted sets: ``dlq_list``, ``list_tasks`` and ``list_audit``.

Each page script scans a bounded number of entries per call (so one call never blocks Redis
for long) and returns where it stopped; the functions here call again from there until the
page is full. Positions are ``(score, id)``: the score is the status time (or the audit
time) in microseconds, so a cursor's time is the index's own value, whatever the task's hash
holds.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from rdq.spi import (
    AuditEntry,
    AuditFilter,
    DLQCursor,
    DLQFilter,
    Envelope,
    KeysetCursor,
    Page,
    Status,
    TaskFilter,
    audit_scope,
    task_scope,
)
from rdq_redis._codec import envelope_from_hash, from_us, hash_pairs, score_us, to_us
from rdq_redis._keys import AuditKeys, QueueKeys
from rdq_redis._queries import Scripts

__all__ = ["STATUS_SETS", "audit_page", "dlq_page", "task_page"]

SCAN_BUDGET = 2000
"""Entries one page script call may examine (bounds how long it blocks Redis)."""

STATUS_SETS = {
    Status.PENDING: "pending",
    Status.IN_FLIGHT: "inflight",
    Status.DEAD: "dead",
    Status.SUCCEEDED: "succeeded",
    Status.CANCELLED: "cancelled",
}
"""The index of each status: a sorted set (or one per priority) scored by its status time."""

_Entry = tuple[str, int, dict[bytes, bytes]]


def _bound(at: datetime | None) -> str:
    return "" if at is None else str(to_us(at))


def _match(value: str | None) -> str:
    return "" if value is None else "=" + value


async def _scan_tasks(
    scripts: Scripts,
    qk: QueueKeys,
    status: Status,
    after: tuple[str, str],
    low: str,
    high: str,
    handler: str | None,
    error: str | None,
    want: int,
    include_attempts: bool,
) -> list[_Entry]:
    found: list[_Entry] = []
    score, last_id = after
    while len(found) < want:
        reply = await scripts.run(
            "task_page",
            [qk.levels],
            [
                qk.base,
                STATUS_SETS[status],
                score,
                last_id,
                low,
                high,
                _match(handler),
                _match(error),
                want - len(found),
                SCAN_BUDGET,
                "1" if include_attempts else "0",
            ],
        )
        found += [(e[0].decode(), score_us(e[1]), hash_pairs(e[2])) for e in reply[-1]]
        if reply[0] == b"END":
            break
        score, last_id = reply[1].decode(), reply[2].decode()
    return found


def _envelopes(
    entries: list[_Entry], queue: str, status: Status, include_attempts: bool
) -> list[Envelope]:
    return [
        envelope_from_hash(
            fields, task_id=task_id, queue=queue, status=status, with_attempts=include_attempts
        )
        for task_id, _, fields in entries
    ]


async def dlq_page(
    scripts: Scripts, qk: QueueKeys, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """One page of the DLQ in ``(dead_lettered_at, id)`` order, and the next page's cursor."""
    after = ("", "")
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, qk.queue, dlq_filter)
        after = (str(to_us(cursor.dead_lettered_at)), cursor.id)
    f = dlq_filter or DLQFilter()
    entries = await _scan_tasks(
        scripts,
        qk,
        Status.DEAD,
        after,
        _bound(f.dead_lettered_after),
        _bound(f.dead_lettered_before),
        f.handler_ref,
        f.error_type,
        page.limit + 1,
        page.include_attempts,
    )
    shown = entries[: page.limit]
    tasks = _envelopes(shown, qk.queue, Status.DEAD, page.include_attempts)
    if len(entries) <= page.limit or not shown:
        return tasks, None
    last_id, last_score, _ = shown[-1]
    return tasks, DLQCursor.after(qk.queue, dlq_filter, from_us(last_score), last_id).encode()


async def task_page(
    scripts: Scripts, qk: QueueKeys, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """One page of the tasks in one status, in ``(status time, id)`` order, and the next
    page's cursor."""
    scope = task_scope(qk.queue, task_filter)
    after = ("", "")
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (str(to_us(cursor.at)), cursor.id)
    entries = await _scan_tasks(
        scripts,
        qk,
        task_filter.status,
        after,
        _bound(task_filter.after),
        _bound(task_filter.before),
        task_filter.handler_ref,
        task_filter.error_type,
        page.limit + 1,
        page.include_attempts,
    )
    shown = entries[: page.limit]
    tasks = _envelopes(shown, qk.queue, task_filter.status, page.include_attempts)
    if len(entries) <= page.limit or not shown:
        return tasks, None
    last_id, last_score, _ = shown[-1]
    return tasks, KeysetCursor.after(scope, from_us(last_score), last_id).encode()


def audit_entry(entry_id: str, fields: dict[bytes, bytes]) -> AuditEntry:
    """An audit entry from its hash (``body`` is the entry's JSON without id and time)."""
    entry = msgspec.json.decode(fields[b"body"], type=AuditEntry)
    at = from_us(int(fields[b"time"]))
    return msgspec.structs.replace(entry, id=entry_id, time=at)


async def audit_page(
    scripts: Scripts, keys: AuditKeys, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """One page of the audit trail, newest first, and the next page's cursor."""
    scope = audit_scope(audit_filter)
    score, last_id = "", ""
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        score, last_id = str(to_us(cursor.at)), cursor.id
    f = audit_filter or AuditFilter()
    want = page.limit + 1
    found: list[_Entry] = []
    while len(found) < want:
        reply = await scripts.run(
            "audit_page",
            [keys.log],
            [
                keys.base,
                score,
                last_id,
                _bound(f.after),
                _bound(f.before),
                _match(f.queue),
                _match(f.action),
                _match(f.actor),
                want - len(found),
                SCAN_BUDGET,
            ],
        )
        found += [(e[0].decode(), score_us(e[1]), hash_pairs(e[2])) for e in reply[-1]]
        if reply[0] == b"END":
            break
        score, last_id = reply[1].decode(), reply[2].decode()
    shown = found[: page.limit]
    entries = [audit_entry(entry_id, fields) for entry_id, _, fields in shown]
    if len(found) <= page.limit or not shown:
        return entries, None
    last_id, last_score, _ = shown[-1]
    return entries, KeysetCursor.after(scope, from_us(last_score), last_id).encode()
