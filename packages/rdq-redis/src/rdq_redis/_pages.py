"""Every listing: keyset pages over the sorted sets for ``dlq_list``, ``list_tasks`` and
``list_audit``.

Each page script scans a bounded number of entries per call (so one call never blocks Redis
for long) and returns where it stopped; the functions here call again from there until they
hold one entry more than the page (:func:`rdq.spi.page_of` cuts it). Positions are
``(score, id)``: the score is the status time (or the audit time) in microseconds, so a
cursor's time is the index's own value, whatever the task's hash holds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

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
    page_of,
    task_scope,
)
from rdq_redis._codec import audit_entry, envelope_from_hash, from_us, hash_pairs, score_us, to_us
from rdq_redis._connection import Scripts
from rdq_redis._keys import STATUS_SETS, AuditKeys, QueueKeys

__all__ = ["audit_page", "dlq_page", "task_page"]

SCAN_BUDGET = 2000
"""Entries one page script call may examine (bounds how long it blocks Redis)."""

_Entry = tuple[str, int, dict[bytes, bytes]]
"""A listed entry: its id, its score (µs) and its hash."""


def _bound(at: datetime | None) -> str:
    return "" if at is None else str(to_us(at))


def _match(value: str | None) -> str:
    return "" if value is None else "=" + value


_START = ("", "")
"""The position before the first entry, as the scripts take positions: (score, id)."""


def _position(at: datetime, entry_id: str) -> tuple[str, str]:
    """A cursor's position, as the scripts take it."""
    return str(to_us(at)), entry_id


async def _scan(
    scripts: Scripts,
    script: str,
    key: str,
    after: tuple[str, str],
    want: int,
    args: Callable[[str, str, int], list[Any]],
) -> list[_Entry]:
    """Up to ``want`` entries from the position ``after`` on: ``script`` is called again from
    where it stopped until it has returned that many or reached the end. ``args(score, id,
    wanted)`` builds one call's arguments."""
    found: list[_Entry] = []
    score, last_id = after
    while len(found) < want:
        reply = await scripts.run(script, [key], args(score, last_id, want - len(found)))
        found += [(e[0].decode(), score_us(e[1]), hash_pairs(e[2])) for e in reply[-1]]
        if reply[0] == b"END":
            break
        score, last_id = reply[1].decode(), reply[2].decode()
    return found


async def _scan_tasks(
    scripts: Scripts,
    qk: QueueKeys,
    status: Status,
    after: tuple[str, str],
    bounds: tuple[datetime | None, datetime | None],
    handler: str | None,
    error: str | None,
    page: Page,
) -> list[_Entry]:
    """One entry more than ``page`` holds of the tasks in ``status`` after ``after``, within
    the status-time ``bounds`` (inclusive, exclusive), matching handler and error type."""
    low, high = _bound(bounds[0]), _bound(bounds[1])
    attempts = "1" if page.include_attempts else "0"
    return await _scan(
        scripts,
        "task_page",
        qk.levels,
        after,
        page.limit + 1,
        lambda score, last_id, wanted: [
            qk.base,
            STATUS_SETS[status],
            score,
            last_id,
            low,
            high,
            _match(handler),
            _match(error),
            wanted,
            SCAN_BUDGET,
            attempts,
        ],
    )


def _task(qk: QueueKeys, status: Status, page: Page) -> Callable[[_Entry], Envelope]:
    def read(entry: _Entry) -> Envelope:
        task_id, _, fields = entry
        return envelope_from_hash(
            fields,
            task_id=task_id,
            queue=qk.queue,
            status=status,
            with_attempts=page.include_attempts,
        )

    return read


async def dlq_page(
    scripts: Scripts, qk: QueueKeys, dlq_filter: DLQFilter | None, page: Page
) -> tuple[list[Envelope], str | None]:
    """One page of the DLQ in ``(dead_lettered_at, id)`` order, and the next page's cursor."""
    after = _START
    if page.cursor is not None:
        cursor = DLQCursor.decode(page.cursor, qk.queue, dlq_filter)
        after = _position(cursor.dead_lettered_at, cursor.id)
    f = dlq_filter or DLQFilter()
    bounds = (f.dead_lettered_after, f.dead_lettered_before)
    entries = await _scan_tasks(
        scripts, qk, Status.DEAD, after, bounds, f.handler_ref, f.error_type, page
    )
    return page_of(
        entries,
        page.limit,
        _task(qk, Status.DEAD, page),
        lambda e: DLQCursor.after(qk.queue, dlq_filter, from_us(e[1]), e[0]).encode(),
    )


async def task_page(
    scripts: Scripts, qk: QueueKeys, task_filter: TaskFilter, page: Page
) -> tuple[list[Envelope], str | None]:
    """One page of the tasks in one status, in ``(status time, id)`` order, and the next
    page's cursor."""
    scope = task_scope(qk.queue, task_filter)
    after = _START
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = _position(cursor.at, cursor.id)
    f = task_filter
    entries = await _scan_tasks(
        scripts, qk, f.status, after, (f.after, f.before), f.handler_ref, f.error_type, page
    )
    return page_of(
        entries,
        page.limit,
        _task(qk, f.status, page),
        lambda e: KeysetCursor.after(scope, from_us(e[1]), e[0]).encode(),
    )


async def audit_page(
    scripts: Scripts, keys: AuditKeys, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """One page of the audit trail, newest first, and the next page's cursor."""
    scope = audit_scope(audit_filter)
    after = _START
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = _position(cursor.at, cursor.id)
    f = audit_filter or AuditFilter()
    low, high = _bound(f.after), _bound(f.before)
    found = await _scan(
        scripts,
        "audit_page",
        keys.log,
        after,
        page.limit + 1,
        lambda score, last_id, wanted: [
            keys.base,
            score,
            last_id,
            low,
            high,
            _match(f.queue),
            _match(f.action),
            _match(f.actor),
            wanted,
            SCAN_BUDGET,
        ],
    )
    return page_of(
        found,
        page.limit,
        lambda e: audit_entry(e[0], e[2]),
        lambda e: KeysetCursor.after(scope, from_us(e[1]), e[0]).encode(),
    )
