"""Opaque, stable cursors by keyset ``(time, id)``.

Backends that order the DLQ by dead-lettering time then id (as the contract asks) can use
:class:`DLQCursor`: the cursor names the last task of a page, so a page never skips or repeats
a task while new ones arrive (new ones sort after every existing one). A cursor is bound to its
queue and filter; using it elsewhere, or tampering with it, raises
:class:`~rdq.errors.StaleCursor`. :class:`KeysetCursor` does the same for ``list_tasks``
(keyed by status time, see :func:`task_scope`) and ``list_audit`` (see :func:`audit_scope`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime

import msgspec

from rdq.errors import StaleCursor
from rdq.spi._models import AuditFilter, DLQFilter, TaskFilter

__all__ = ["DLQCursor", "KeysetCursor", "audit_scope", "task_scope"]

_VERSION = 1


class DLQCursor(msgspec.Struct, frozen=True, array_like=True):
    """The position after which the next DLQ page starts."""

    version: int
    scope: str
    dead_lettered_at: datetime
    id: str

    @classmethod
    def after(
        cls, queue: str, dlq_filter: DLQFilter | None, dead_lettered_at: datetime, task_id: str
    ) -> DLQCursor:
        return cls(_VERSION, _scope(queue, dlq_filter), dead_lettered_at, task_id)

    def encode(self) -> str:
        raw = msgspec.json.encode(self)
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, token: str, queue: str, dlq_filter: DLQFilter | None) -> DLQCursor:
        """Parse ``token``; ``StaleCursor`` if it is malformed or from another queue/filter."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            cursor = msgspec.json.decode(raw, type=cls)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            raise StaleCursor("malformed cursor") from None
        if cursor.version != _VERSION:
            raise StaleCursor(f"cursor version {cursor.version} is not supported")
        if cursor.scope != _scope(queue, dlq_filter):
            raise StaleCursor("cursor belongs to another queue or filter")
        if cursor.dead_lettered_at.tzinfo is None:
            raise StaleCursor("malformed cursor")
        return cursor


def _scope(queue: str, dlq_filter: DLQFilter | None) -> str:
    digest = hashlib.blake2b(digest_size=8)
    digest.update(queue.encode())
    digest.update(b"\x00")
    digest.update(msgspec.json.encode(dlq_filter or DLQFilter()))
    return digest.hexdigest()


class KeysetCursor(msgspec.Struct, frozen=True, array_like=True):
    """The position ``(at, id)`` after which the next page starts, bound to a ``scope``
    (from :func:`task_scope` or :func:`audit_scope`)."""

    version: int
    scope: str
    at: datetime
    id: str

    @classmethod
    def after(cls, scope: str, at: datetime, item_id: str) -> KeysetCursor:
        return cls(_VERSION, scope, at, item_id)

    def encode(self) -> str:
        raw = msgspec.json.encode(self)
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, token: str, scope: str) -> KeysetCursor:
        """Parse ``token``; ``StaleCursor`` if it is malformed or from another scope."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            cursor = msgspec.json.decode(raw, type=cls)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            raise StaleCursor("malformed cursor") from None
        if cursor.version != _VERSION:
            raise StaleCursor(f"cursor version {cursor.version} is not supported")
        if cursor.scope != scope:
            raise StaleCursor("cursor belongs to another queue or filter")
        if cursor.at.tzinfo is None:
            raise StaleCursor("malformed cursor")
        return cursor


def task_scope(queue: str, task_filter: TaskFilter) -> str:
    """The scope of a ``list_tasks`` cursor: its queue and filter."""
    return "tasks:" + _digest(queue.encode(), msgspec.json.encode(task_filter))


def audit_scope(audit_filter: AuditFilter | None) -> str:
    """The scope of a ``list_audit`` cursor: its filter."""
    return "audit:" + _digest(msgspec.json.encode(audit_filter or AuditFilter()))


def _digest(*parts: bytes) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part)
        digest.update(b"\x00")
    return digest.hexdigest()
