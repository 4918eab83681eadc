"""``MemoryCore``: what every group of the memory store's operations shares, the state and the
clock.

The state is the store's own, a named one shared by every store of that name in the process,
or (for :meth:`~rdq_memory.MemoryStorage.reopen`) another store's; the clock is the storage
clock, injectable for tests. The operations are grouped on top of it:
:mod:`rdq_memory._admission` (admission), :mod:`rdq_memory._claims` (claims),
:mod:`rdq_memory._controls` (control records, ``retry_now``), :mod:`rdq_memory._fleet` (the
worker registry, the counts), :mod:`rdq_memory._retention` (what leaves the store) and
:mod:`rdq_memory._store` (the rest, and the store itself).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from rdq.errors import ConfigError
from rdq.spi import StorageBase, bounds
from rdq_memory._state import MemoryState
from rdq_memory._url import Clock, MemoryConfig

__all__ = ["MemoryCore", "forget_named_stores"]

_named: dict[str, MemoryState] = {}
_named_lock = threading.Lock()


def _utc_now() -> datetime:
    return datetime.now(UTC)


def forget_named_stores() -> None:
    """Drop every named store of this process (for tests)."""
    with _named_lock:
        _named.clear()


class MemoryCore(StorageBase):
    """The state and the clock of a memory store (see the module docstring); the store is
    :class:`~rdq_memory.MemoryStorage`."""

    def __init__(
        self,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT,
        state: MemoryState | None = None,
    ) -> None:
        if state is not None:
            self._state = state
        elif name:
            with _named_lock:
                self._state = _named.setdefault(name, MemoryState())
        else:
            self._state = MemoryState()
        self._name = name
        self._clock: Clock = clock or _utc_now
        self.config = MemoryConfig(name=name, timeout=timeout, clock=clock)

    @property
    def state(self) -> MemoryState:
        """The tasks, leases and audit entries this store holds (shared with its reopened
        stores and, for a named store, every store of that name)."""
        return self._state

    def _clock_now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ConfigError("the memory store's clock returned a naive datetime", key="clock")
        return now
