"""Everything a storage plugin author uses, and nothing else needed.

- the contract: :class:`Storage` (every promise is in its docstrings), the contract's
  versions and capabilities (:data:`CONTRACT_VERSION`, :data:`FEATURES`, :func:`require`) and
  the errors an operation raises (re-exported from :mod:`rdq.errors`);
- the models the operations pass around: :class:`Envelope`, :class:`Attempt`, :class:`Claimed`,
  :class:`Capabilities`, filters, pages, selectors, stats, audit entries;
- the base a store subclasses, :class:`StorageBase` (validation, lifecycle, the operation
  timeout, defaults), and :class:`ForwardingStorage` for wrappers;
- helpers: :mod:`bounds` (the bounds of every input; ``limits`` is its former name), the
  envelope codec, keyset cursors (:class:`DLQCursor`, :class:`KeysetCursor`) and
  :func:`page_of`, :func:`fence`, :func:`first_of_each_id`, :func:`stored_flags`,
  :func:`group_order`; :class:`Doubling`, the backoff of every retry loop; :class:`ClaimGate`
  and :class:`ClaimOrder`, the rules of a claim for stores that decide claims in Python, and
  :func:`slots_free`, the rule of extending a lapsed lease;
- registration: :data:`hookimpl` and the hook :func:`rdq_storage_factory` (entry-point group
  ``rdq.storage``).

The modules: ``_protocol`` (:class:`Storage`), ``_contract`` (versions, capabilities),
``_models`` (the envelope and its kin), ``_flow`` (control records, workers, counts);
``_base``, ``_lifecycle``, ``_flow_operations``, ``_keeping_operations`` (:class:`StorageBase`,
in four parts),
``_legacy`` (the template put in front of a store written before it),
``defaults`` (the later operations built on version-1 ones), ``_proxy``
(:class:`ForwardingStorage`); ``bounds`` (and its former name ``limits``), ``codec``,
``cursor``, ``_helpers``, ``_pacing``, ``_gate`` (:class:`ClaimGate`, :func:`slots_free`),
``_order`` (:class:`ClaimOrder`); ``hookspecs`` and ``_registry`` (registration).

``rdq_compliance.StorageSuite`` checks that a store keeps the contract; the guide is
``docs/writing-a-backend.md`` and the changes of promise from version to version are in
``docs/backend-changelog.md``.
"""

from typing import TYPE_CHECKING, Any

from rdq.errors import (
    ControlConflict,
    DedupConflict,
    IDConflict,
    NotConnected,
    NotFound,
    PayloadMissing,
    StaleClaim,
    StaleCursor,
    StorageError,
    StorageUnavailable,
    Unsupported,
    ValidationError,
)
from rdq.spi import bounds, limits
from rdq.spi._base import StorageBase
from rdq.spi._contract import CONTRACT_VERSION, FEATURES, Feature, require, supports
from rdq.spi._flow import QUEUE_KEY, Control, Counts, WorkerInfo, handler_key, task_keys
from rdq.spi._gate import Bucket, ClaimGate, refill, slots_free
from rdq.spi._helpers import fence, first_of_each_id, group_order, page_of, stored_flags
from rdq.spi._models import (
    DEFAULT_PRIORITY,
    FORMAT_VERSION,
    MAX_PRIORITY,
    MIN_PRIORITY,
    PAYLOAD_REF_HEADER,
    STATUS_TIME_FIELDS,
    AdmitOutcome,
    Admitted,
    Attempt,
    AuditEntry,
    AuditFilter,
    Backup,
    Capabilities,
    Claimed,
    Completion,
    Dedup,
    DedupMode,
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
from rdq.spi._order import (
    NO_GROUP,
    ClaimOrder,
    OrderKey,
    aged_due,
    fair_group,
    merged,
    ranked,
)
from rdq.spi._pacing import Doubling
from rdq.spi._protocol import Storage
from rdq.spi._proxy import ForwardingStorage, adapt
from rdq.spi._registry import StorageFactory, StorageRegistry
from rdq.spi.codec import (
    decode_envelope,
    encode_envelope,
    envelope_from_builtins,
    envelope_to_builtins,
)
from rdq.spi.cursor import DLQCursor, KeysetCursor, audit_scope, task_scope
from rdq.spi.defaults import CLOCK_QUEUE

if TYPE_CHECKING:
    from rdq.spi.hookspecs import hookimpl, rdq_register_storage, rdq_storage_factory

Cursor = str
"""Cursors are opaque strings; :class:`DLQCursor` and :class:`KeysetCursor` are ready-made
keyset encodings."""

__all__ = [
    "CLOCK_QUEUE",
    "CONTRACT_VERSION",
    "DEFAULT_PRIORITY",
    "FEATURES",
    "FORMAT_VERSION",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "NO_GROUP",
    "PAYLOAD_REF_HEADER",
    "QUEUE_KEY",
    "STATUS_TIME_FIELDS",
    "AdmitOutcome",
    "Admitted",
    "Attempt",
    "AuditEntry",
    "AuditFilter",
    "Backup",
    "Bucket",
    "Capabilities",
    "ClaimGate",
    "ClaimOrder",
    "Claimed",
    "Completion",
    "Control",
    "ControlConflict",
    "Counts",
    "Cursor",
    "DLQCursor",
    "DLQFilter",
    "DLQGroup",
    "Dedup",
    "DedupConflict",
    "DedupMode",
    "Doubling",
    "Envelope",
    "Feature",
    "ForwardingStorage",
    "IDConflict",
    "KeysetCursor",
    "NotConnected",
    "NotFound",
    "OrderKey",
    "Outcome",
    "Page",
    "PayloadMissing",
    "RetryOverride",
    "Selector",
    "StaleClaim",
    "StaleCursor",
    "Stats",
    "Status",
    "Storage",
    "StorageBase",
    "StorageError",
    "StorageFactory",
    "StorageRegistry",
    "StorageUnavailable",
    "TaskFilter",
    "Unsupported",
    "ValidationError",
    "WorkerInfo",
    "adapt",
    "aged_due",
    "audit_scope",
    "bounds",
    "decode_envelope",
    "encode_envelope",
    "envelope_from_builtins",
    "envelope_to_builtins",
    "fair_group",
    "fence",
    "first_of_each_id",
    "group_order",
    "handler_key",
    "hookimpl",
    "limits",
    "merged",
    "page_of",
    "ranked",
    "rdq_register_storage",
    "rdq_storage_factory",
    "refill",
    "require",
    "slots_free",
    "status_time",
    "stored_flags",
    "supports",
    "task_keys",
    "task_scope",
]

_HOOKS = ("hookimpl", "rdq_register_storage", "rdq_storage_factory")


def __getattr__(name: str) -> Any:
    # the hook marker needs pluggy: imported when a plugin module asks for it, so that an
    # application importing rdq does not pay for it
    if name in _HOOKS:
        from rdq.spi import hookspecs

        return getattr(hookspecs, name)
    raise AttributeError(f"module 'rdq.spi' has no attribute {name!r}")
