"""What a storage plugin author uses: the ``Storage`` contract, its models and helpers.

See :class:`Storage` for the promise of every operation, :mod:`rdq.spi.limits` for the input
limits every backend enforces, and ``rdq_compliance.StorageSuite`` for the tests that check a
backend keeps the contract.
"""

from rdq.spi import limits
from rdq.spi._models import (
    DEFAULT_PRIORITY,
    FORMAT_VERSION,
    MAX_PRIORITY,
    MIN_PRIORITY,
    STATUS_TIME_FIELDS,
    Attempt,
    AuditEntry,
    AuditFilter,
    Capabilities,
    Claimed,
    Completion,
    DLQFilter,
    DLQGroup,
    Envelope,
    Outcome,
    Page,
    RetryOverride,
    Selector,
    Stats,
    Status,
    TaskFilter,
    status_time,
)
from rdq.spi._storage import Storage, StorageBase, group_order
from rdq.spi.codec import (
    decode_envelope,
    encode_envelope,
    envelope_from_builtins,
    envelope_to_builtins,
)
from rdq.spi.cursor import DLQCursor, KeysetCursor, audit_scope, task_scope

Cursor = str
"""DLQ cursors are opaque strings; :class:`DLQCursor` is a ready-made keyset encoding."""

__all__ = [
    "DEFAULT_PRIORITY",
    "FORMAT_VERSION",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "STATUS_TIME_FIELDS",
    "Attempt",
    "AuditEntry",
    "AuditFilter",
    "Capabilities",
    "Claimed",
    "Completion",
    "Cursor",
    "DLQCursor",
    "DLQFilter",
    "DLQGroup",
    "Envelope",
    "KeysetCursor",
    "Outcome",
    "Page",
    "RetryOverride",
    "Selector",
    "Stats",
    "Status",
    "Storage",
    "StorageBase",
    "TaskFilter",
    "audit_scope",
    "decode_envelope",
    "encode_envelope",
    "envelope_from_builtins",
    "envelope_to_builtins",
    "group_order",
    "limits",
    "status_time",
    "task_scope",
]
