"""Filtering done by the admin for stores without ``filter_pushdown``.

Such a store may hand back unfiltered pages (``list_tasks`` still applies the status). The
admin reads the store's pages in order, keeps what matches, and hands out its own cursor: the
store cursor of the page it stopped in plus the ``(time, id)`` of the last task it returned
from that page, so the next call re-reads that store page and skips what was already shown.
One call reads a bounded number of store pages; a page may therefore come back short (even
empty) with a cursor, and callers keep paging until the cursor is None.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from datetime import datetime

import msgspec

from rdq.errors import StaleCursor
from rdq.spi import Envelope, Page, bounds

__all__ = ["SCAN_PAGE", "StoreFetch", "list_filtered"]

SCAN_PAGE = bounds.MAX_LIMIT
"""Tasks per store page when the admin filters itself."""
SCAN_BUDGET = 20
"""Store pages one filtered listing may read before it returns a short page and a cursor."""
_VERSION = 1

StoreFetch = Callable[[str | None], Awaitable[tuple[list[Envelope], str | None]]]
"""``fetch(store_cursor)``: one unfiltered store page (with attempts) after ``store_cursor``."""


class _FallbackCursor(msgspec.Struct, frozen=True, array_like=True):
    version: int
    scope: str
    store_cursor: str | None
    after_at: datetime | None
    after_id: str | None

    def encode(self) -> str:
        raw = msgspec.json.encode(self)
        return "f" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, token: str | None, scope: str) -> _FallbackCursor | None:
        if token is None:
            return None
        if not token.startswith("f"):
            raise StaleCursor("malformed cursor")
        body = token[1:]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            cursor = msgspec.json.decode(raw, type=cls)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            raise StaleCursor("malformed cursor") from None
        if cursor.version != _VERSION or cursor.scope != scope:
            raise StaleCursor("cursor belongs to another queue or filter")
        if (cursor.after_id is None) != (cursor.after_at is None):
            raise StaleCursor("malformed cursor")
        if cursor.after_at is not None and cursor.after_at.tzinfo is None:
            raise StaleCursor("malformed cursor")
        return cursor


async def list_filtered(
    fetch: StoreFetch,
    scope: str,
    matches: Callable[[Envelope], bool],
    key: Callable[[Envelope], datetime | None],
    page: Page,
) -> tuple[list[Envelope], str | None]:
    """One page of the tasks ``matches`` keeps, in store order (``key`` then id)."""
    position = _FallbackCursor.decode(page.cursor, scope)
    store_cursor = position.store_cursor if position else None
    after: tuple[datetime, str] | None = None
    if position is not None and position.after_at is not None and position.after_id:
        after = (position.after_at, position.after_id)
    out: list[Envelope] = []

    def cursor_after(last: Envelope) -> str:
        return _FallbackCursor(_VERSION, scope, store_cursor, key(last), last.id).encode()

    for _ in range(SCAN_BUDGET):
        tasks, next_store_cursor = await fetch(store_cursor)
        for task in tasks:
            if after is not None and _at_or_before(key(task), task.id, after):
                continue
            if not matches(task):
                continue
            if len(out) == page.limit:
                return _strip(out, page), cursor_after(out[-1])
            out.append(task)
        if next_store_cursor is None:
            return _strip(out, page), None
        store_cursor, after = next_store_cursor, None
    if not out:
        # Nothing matched within the scan budget: continue from the next store page.
        return [], _FallbackCursor(_VERSION, scope, store_cursor, None, None).encode()
    return _strip(out, page), cursor_after(out[-1])


def _at_or_before(at: datetime | None, task_id: str, after: tuple[datetime, str]) -> bool:
    if at is None:  # not listable by time: a store bug, but never return it twice
        return True
    return (at, task_id) <= after


def _strip(tasks: list[Envelope], page: Page) -> list[Envelope]:
    if not page.include_attempts:
        for task in tasks:
            task.attempts = []
    return tasks
