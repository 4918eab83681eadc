"""The audit trail: entries stored unchanged, stamped by the storage clock, listed newest
first with stable cursors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from rdq.errors import StaleCursor, ValidationError
from rdq.spi import AuditEntry, AuditFilter, Page, Storage
from rdq_compliance._support import list_all_audit

__all__ = ["AuditClauses"]


def _entry(
    queue: str, action: str = "redrive", actor: str = "kit-operator", **fields: Any
) -> AuditEntry:
    fields.setdefault("selector", {"ids": ["a", "b"]})
    fields.setdefault("count", 2)
    return AuditEntry(actor=actor, action=action, queue=queue, **fields)


def _newest_first(entries: list[AuditEntry]) -> list[AuditEntry]:
    return sorted(entries, key=lambda e: (e.time, e.id), reverse=True)


class AuditClauses:
    """``append_audit`` stores an entry unchanged with a unique ``id`` and ``time`` = the
    store's now; ``list_audit`` lists entries newest first (time, then id, descending),
    filtered by queue, action, actor and time (``after`` inclusive, ``before`` exclusive),
    with a cursor that never skips or repeats while entries are appended."""

    capability = "audit"

    @pytest.mark.asyncio
    async def test_append_audit_keeps_the_entry_and_stamps_a_unique_id_and_the_storage_time(
        self, storage: Storage, queue: str
    ) -> None:
        entry = _entry(
            queue,
            action="purge",
            selector={"filter": {"error_type": "GatewayDown", "handler_ref": "ä:b"}},
            count=412,
            reason="upstream fixed; old tasks are useless — ✓",
            error="stopped after 400: storage unavailable",
        )
        before = await storage.now()
        stored = await storage.append_audit(entry)
        after = await storage.now()
        assert isinstance(stored.id, str) and stored.id
        assert stored.time is not None and before <= stored.time <= after
        assert (stored.actor, stored.action, stored.queue, stored.selector) == (
            entry.actor,
            entry.action,
            entry.queue,
            entry.selector,
        )
        assert (stored.count, stored.reason, stored.error) == (412, entry.reason, entry.error)
        assert await list_all_audit(storage, AuditFilter(queue=queue)) == [stored]
        more = [await storage.append_audit(_entry(queue)) for _ in range(5)]
        assert len({e.id for e in [stored, *more]}) == 6, "audit ids are unique"

    @pytest.mark.asyncio
    async def test_append_audit_stamps_its_own_time_and_a_fresh_id_whatever_the_entry_carries(
        self, storage: Storage, queue: str
    ) -> None:
        """``id`` and ``time`` are the store's to set: an entry that already carries them (a
        record copied from elsewhere) is stored with a fresh id and the store's now."""
        carried = msgspec.structs.replace(
            _entry(queue), id="caller-chosen-id", time=datetime(2001, 2, 3, tzinfo=UTC)
        )
        before = await storage.now()
        first = await storage.append_audit(carried)
        second = await storage.append_audit(carried)
        after = await storage.now()
        for stored in (first, second):
            assert stored.id and stored.id != "caller-chosen-id", "the store gives a fresh id"
            assert stored.time is not None and before <= stored.time <= after, (
                "the store stamps its own time, not the caller's"
            )
        assert first.id != second.id, "each append gets an id of its own"
        listed = await list_all_audit(storage, AuditFilter(queue=queue))
        assert sorted(e.id or "" for e in listed) == sorted([first.id or "", second.id or ""])

    @pytest.mark.asyncio
    async def test_list_audit_lists_newest_first(self, storage: Storage, queue: str) -> None:
        appended = [await storage.append_audit(_entry(queue, count=n)) for n in range(6)]
        listed = await list_all_audit(storage, AuditFilter(queue=queue), limit=4)
        assert listed == _newest_first(appended), "newest first: by time, then id, descending"
        assert listed[0].time is not None and appended[0].time is not None
        assert listed[0].time >= appended[0].time

    @pytest.mark.asyncio
    async def test_list_audit_filters_by_queue_action_actor_and_time(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        appended = []
        for n in range(8):
            appended.append(
                await storage.append_audit(
                    _entry(
                        (queue, other_queue)[n % 2],
                        action=("redrive", "purge", "cancel")[n % 3],
                        actor=("ann", "bob")[n // 4],
                    )
                )
            )
        times = sorted({e.time for e in appended if e.time is not None})
        filters = [
            AuditFilter(queue=queue),
            AuditFilter(queue=other_queue, action="purge"),
            AuditFilter(queue=queue, actor="bob"),
            AuditFilter(queue=queue, after=times[2]),
            AuditFilter(queue=other_queue, before=times[5]),
            AuditFilter(queue=queue, action="cancel", actor="ann", after=times[0]),
        ]
        for only in filters:
            listed = await list_all_audit(storage, only, limit=2)
            assert listed == _newest_first([e for e in appended if only.matches(e)]), repr(only)

    @pytest.mark.asyncio
    async def test_list_audit_pages_never_skip_or_repeat_while_entries_are_appended(
        self, storage: Storage, queue: str
    ) -> None:
        original = {str((await storage.append_audit(_entry(queue))).id) for _ in range(7)}
        only = AuditFilter(queue=queue)
        seen: list[str] = []
        cursor: str | None = None
        for _ in range(100):
            entries, cursor = await storage.list_audit(only, Page(limit=2, cursor=cursor))
            seen.extend(str(e.id) for e in entries)
            if cursor is None:
                break
            for _ in range(2):
                await storage.append_audit(_entry(queue, action="late"))
        else:
            raise AssertionError("list_audit never reached its last page")
        repeated = sorted({i for i in seen if seen.count(i) > 1})
        assert not repeated, f"entries listed twice: {repeated}"
        assert original <= set(seen), f"entries never listed: {sorted(original - set(seen))}"

    @pytest.mark.asyncio
    async def test_list_audit_with_a_malformed_or_foreign_cursor_raises_stale_cursor(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        for q in (queue, other_queue):
            for _ in range(3):
                await storage.append_audit(_entry(q))
        _, cursor = await storage.list_audit(AuditFilter(queue=queue), Page(limit=1))
        assert cursor is not None
        for bad in ("", "not a cursor", cursor + "x"):
            with pytest.raises(StaleCursor):
                await storage.list_audit(AuditFilter(queue=queue), Page(limit=1, cursor=bad))
        with pytest.raises(StaleCursor):
            await storage.list_audit(AuditFilter(queue=other_queue), Page(limit=1, cursor=cursor))

    @pytest.mark.asyncio
    async def test_append_audit_with_a_bad_entry_raises_validation_error_and_stores_nothing(
        self, storage: Storage, queue: str
    ) -> None:
        cases = {
            "entry.actor": _entry(queue, actor=""),
            "entry.action": _entry(queue, action="x" * 201),
            "entry.queue": _entry("-bad queue"),
            "entry.count": _entry(queue, count=-1),
        }
        for field, entry in cases.items():
            with pytest.raises(ValidationError) as caught:
                await storage.append_audit(entry)
            assert caught.value.field == field
        assert await list_all_audit(storage, AuditFilter(queue=queue)) == []
