"""An estimate of the storage's clock, learned from the claims it hands out.

Storage owns the clock: the engine never trusts its local wall clock for anything it
writes. Each claim tells the storage time of the claim (``lease_expires_at - lease``); the
estimate keeps the offset between that time and the local monotonic clock, so later readings
move with real elapsed time and ignore local wall-clock steps or skew.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rdq.spi import Storage

__all__ = ["Monotonic", "StorageClock"]

Monotonic = Callable[[], float]
"""A monotonic clock in seconds: ``time.monotonic`` unless a test gives the worker another
(``loop.time`` of a loop whose time is simulated, say)."""


class StorageClock:
    """Storage "now" as best known: the last observed storage time plus monotonic time since.

    Before the first observation it falls back to the local UTC wall clock. Observations may
    come from another thread (the lease thread's renewals): the estimate is one tuple,
    replaced in one assignment, so a reader never sees half of an update."""

    __slots__ = ("_estimate", "_observed", "mono")

    def __init__(self, mono: Monotonic = time.monotonic) -> None:
        self.mono = mono
        """The worker's monotonic clock (seconds): every wait and deadline of the worker is
        measured on it."""
        self._estimate = (datetime.now(UTC), mono())
        self._observed = False

    @property
    def observed(self) -> bool:
        """True once a storage time has been observed."""
        return self._observed

    def observe(self, storage_time: datetime, sent_mono: float, received_mono: float) -> None:
        """Record that the storage read ``storage_time`` between ``sent_mono`` and
        ``received_mono`` (local monotonic readings around the call)."""
        self._estimate = (storage_time, (sent_mono + received_mono) / 2.0)
        self._observed = True

    async def calibrate(self, storage: Storage) -> None:
        """Read the storage's clock once (before the first claim, whose lease would teach it
        too: a worker that can claim nothing yet — its queue's breaker is open — still writes
        breaker transitions in storage time)."""
        sent = self.mono()
        storage_time = await storage.now()
        self.observe(storage_time, sent, self.mono())

    def observe_claim(
        self, lease_expires_at: datetime | None, lease: timedelta, sent: float, received: float
    ) -> None:
        """Learn storage time from a claim's lease expiry (claim time = expiry - lease)."""
        if lease_expires_at is not None:
            self.observe(lease_expires_at - lease, sent, received)

    def now(self) -> datetime:
        """The estimated storage time now (timezone-aware UTC)."""
        base, base_mono = self._estimate
        return base + timedelta(seconds=self.mono() - base_mono)

    def at(self, mono: float) -> datetime:
        """The estimated storage time at local monotonic reading ``mono``."""
        base, base_mono = self._estimate
        return base + timedelta(seconds=mono - base_mono)
