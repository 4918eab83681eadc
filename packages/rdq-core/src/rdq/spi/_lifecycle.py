"""``StoreLifecycle``: the part of :class:`~rdq.spi.StorageBase` every operation leans on.

Opening and closing a store (``connect``/``aclose`` around the ``_open``/``_close`` hooks, the
async context manager), the ``NotConnected`` check, the operation timeout (``_run``) and the
``Unsupported`` error of an operation a store does not offer. It is its own layer so that the
groups of operations built on it (:mod:`rdq.spi._flow_operations`, :mod:`rdq.spi._base`) each
need only this, not one another.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable
from types import TracebackType
from typing import ClassVar, Self, TypeVar

from rdq.errors import NotConnected, StorageUnavailable, Unsupported
from rdq.spi._models import Capabilities

__all__ = ["StoreLifecycle"]

T = TypeVar("T")


class StoreLifecycle(abc.ABC):
    """Lifecycle, the open check and the operation timeout of a store (see the module
    docstring); stores subclass :class:`~rdq.spi.StorageBase`, not this."""

    operation_timeout: float | None = None
    """Seconds each operation but ``migrate`` and ``wait_due`` may take before it raises
    ``StorageUnavailable`` (``None``: the store bounds its own calls, as every first-party
    store's driver does)."""

    _opened: bool = False
    _closed: bool = False
    _lifecycle_lock: asyncio.Lock | None = None
    _base_lifecycle: ClassVar[bool] = True
    """False for a store that overrides ``connect``/``aclose`` itself (written for contract
    version 1): the base then cannot tell whether it is open and does not check."""

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def connect(self) -> None:
        """Open the store (``_open``) unless it is open already."""
        if self._lifecycle_lock is None:
            self._lifecycle_lock = asyncio.Lock()
        async with self._lifecycle_lock:
            if self._opened:
                return
            await self._open()
            self._opened, self._closed = True, False

    async def aclose(self) -> None:
        """Close the store (``_close``) if it is open; a no-op otherwise. A ``connect`` under
        way is waited for, so the store ends closed whichever call came first."""
        if self._lifecycle_lock is None:
            self._lifecycle_lock = asyncio.Lock()
        async with self._lifecycle_lock:
            if not self._opened:
                return
            self._opened, self._closed = False, True
            await self._close()

    @property
    def is_open(self) -> bool:
        """True between ``connect`` and ``aclose``."""
        return self._opened

    def _check_open(self) -> None:
        """Raise ``NotConnected`` unless the store is open."""
        if not self._opened and self._base_lifecycle:
            raise NotConnected(type(self).__name__, closed=self._closed)

    async def _open(self) -> None:  # noqa: B027 - optional hook
        """Open connections (no-op by default). Raise ``StorageUnavailable`` when the backend
        cannot be reached."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (no-op by default). Must not raise."""

    async def _run(self, call: Awaitable[T]) -> T:
        """Await ``call`` within :attr:`operation_timeout`; past it, ``StorageUnavailable``."""
        timeout = self.operation_timeout
        if timeout is None:
            return await call
        try:
            async with asyncio.timeout(timeout):
                return await call
        except TimeoutError as exc:
            raise StorageUnavailable(
                f"{self!r}: no answer within the operation timeout ({timeout:g} s)"
            ) from exc

    def _unsupported(self, capability: str) -> Unsupported:
        return Unsupported(type(self).__name__, capability)

    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...
