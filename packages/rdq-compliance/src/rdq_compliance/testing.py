"""Helpers for a backend's own tests (and rdq's): polling until something holds, and a store
that fails chosen operations on cue — the faults a healthy server cannot be made to produce.

::

    from rdq_compliance.testing import FaultyStorage, eventually

    flaky = FaultyStorage(store, fail={"complete": (2, StorageUnavailable("down"))})
    ...
    await eventually(lambda: all_done(store), "every task SUCCEEDED")
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec

from rdq.spi import Capabilities, ForwardingStorage, Storage

__all__ = ["PATIENCE", "FaultyStorage", "eventually"]

T = TypeVar("T")

PATIENCE = 30.0
"""Seconds :func:`eventually` waits by default before it declares failure (generous: test
machines are small and shared)."""

_POLL = 0.05


async def eventually(
    probe: Callable[[], Awaitable[T | bool | None]],
    what: str = "the condition",
    patience: float = PATIENCE,
    *,
    interval: float = _POLL,
) -> T:
    """Call ``probe`` until it returns something other than ``None`` or ``False``, and return
    that; raise ``AssertionError`` naming ``what`` after ``patience`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {patience:g}s waiting for {what}")
        await asyncio.sleep(interval)


Around = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""``around(name, call)``: runs the forwarded ``call`` of operation ``name`` its own way."""


class FaultyStorage(ForwardingStorage):
    """A real store whose chosen operations fail: ``fail={"complete": (2, exc)}`` raises
    ``exc`` from the next two ``complete`` calls, then lets them through. ``calls`` counts
    every operation; ``capabilities`` overrides what the store advertises
    (``{"batch_complete": False}``); ``around`` wraps every call (to delay it, or to apply it
    and then raise as a lost reply would)."""

    def __init__(
        self,
        inner: Storage,
        fail: Mapping[str, tuple[int, BaseException]] | None = None,
        *,
        capabilities: Mapping[str, Any] | None = None,
        around: Around | None = None,
    ) -> None:
        super().__init__(inner)
        self.failures: dict[str, tuple[int, BaseException]] = dict(fail or {})
        self.calls: Counter[str] = Counter()
        self._capabilities = dict(capabilities or {})
        self._around = around

    def fail(self, name: str, times: int, exc: BaseException) -> None:
        """Make the next ``times`` calls of ``name`` raise ``exc``."""
        self.failures[name] = (times, exc)

    def reopen(self) -> Storage | None:
        """``None``: a second store would bypass the faults (a worker then renews its leases
        through this one)."""
        return None

    def capabilities(self) -> Capabilities:
        offered = self.inner.capabilities()
        return (
            msgspec.structs.replace(offered, **self._capabilities)
            if self._capabilities
            else offered
        )

    async def _forward(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        self.calls[name] += 1
        left, exc = self.failures.get(name, (0, None))
        if left > 0 and exc is not None:
            self.failures[name] = (left - 1, exc)
            raise exc
        if self._around is not None:
            result: T = await self._around(name, call)
            return result
        return await call()
