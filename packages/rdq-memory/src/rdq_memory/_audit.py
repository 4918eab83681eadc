"""The memory store's audit trail: entries kept in order of appending, listed newest first
with a keyset cursor (arguments already checked by the store)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

import msgspec

from rdq.spi import AuditEntry, AuditFilter, KeysetCursor, Page, audit_scope
from rdq_memory._paging import keyset_page
from rdq_memory._state import MemoryState

__all__ = ["append_audit", "list_audit"]


def append_audit(state: MemoryState, entry: AuditEntry, now: Callable[[], datetime]) -> AuditEntry:
    """Store ``entry`` with an id and the storage clock's time; return what was stored."""
    with state.lock:
        stored = msgspec.structs.replace(
            entry, id=uuid.uuid4().hex, time=now(), selector=dict(entry.selector)
        )
        state.audit.append(stored)
    return stored


def list_audit(
    state: MemoryState, audit_filter: AuditFilter | None, page: Page
) -> tuple[list[AuditEntry], str | None]:
    """One page of entries matching ``audit_filter``, newest first, and the next cursor."""
    scope = audit_scope(audit_filter)
    after = None
    if page.cursor is not None:
        cursor = KeysetCursor.decode(page.cursor, scope)
        after = (cursor.at, cursor.id)
    with state.lock:
        keyed = [
            ((e.time, e.id), e)
            for e in state.audit
            if e.time is not None
            and e.id is not None
            and (audit_filter is None or audit_filter.matches(e))
        ]
    chunk, last = keyset_page(keyed, after, page.limit, descending=True)
    if last is None:
        return chunk, None
    return chunk, KeysetCursor.after(scope, last[0], last[1]).encode()
