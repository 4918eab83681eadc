"""What a storage plugin author uses: the ``Storage`` contract, its models and helpers.

See :class:`Storage` for the promise of every operation, :mod:`rdq.spi.limits` for the input
limits every backend enforces, and ``rdq_compliance.StorageSuite`` for the tests that check a
backend keeps the contract.
"""

from rdq.spi._models import (
    FORMAT_VERSION,
    Attempt,
    Capabilities,
    Claimed,
    Completion,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    RetryOverride,
    Selector,
    Stats,
    Status,
)
from rdq.spi._storage import Storage, StorageBase
from rdq.spi.codec import (
    decode_envelope,
    encode_envelope,
    envelope_from_builtins,
    envelope_to_builtins,
)
from rdq.spi.cursor import DLQCursor

Cursor = str
"""DLQ cursors are opaque strings; :class:`DLQCursor` is a ready-made keyset encoding."""

__all__ = [
    "FORMAT_VERSION",
    "Attempt",
    "Capabilities",
    "Claimed",
    "Completion",
    "Cursor",
    "DLQCursor",
    "DLQFilter",
    "Envelope",
    "Outcome",
    "Page",
    "RetryOverride",
    "Selector",
    "Stats",
    "Status",
    "Storage",
    "StorageBase",
    "decode_envelope",
    "encode_envelope",
    "envelope_from_builtins",
    "envelope_to_builtins",
]
