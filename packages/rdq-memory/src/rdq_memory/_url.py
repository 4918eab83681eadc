"""``memory://[NAME][?timeout=SECONDS]`` -> :class:`MemoryConfig`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rdq.errors import ConfigError
from rdq.spi import bounds

__all__ = ["Clock", "MemoryConfig", "parse_url"]

Clock = Callable[[], datetime]
"""The storage clock: returns the store's now, timezone-aware."""


@dataclass(frozen=True)
class MemoryConfig:
    """What a ``memory://`` URL and its options say.

    ``name``: the process-wide store to share (``None``: a private store). ``timeout``: the
    operation timeout, accepted like every store's (a memory operation never waits on
    anything, so it never runs out). ``clock``: the storage clock (tests inject one)."""

    name: str | None = None
    timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT
    clock: Clock | None = None


def parse_url(url: str, **options: Any) -> MemoryConfig:
    """Parse a ``memory://`` URL; ``ConfigError`` names the offending key."""
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise ConfigError(f"not a memory:// URL: {url!r}", key="storage")
    name = (parts.netloc + parts.path).strip("/") or None
    query: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - {"timeout"})
    if unknown:
        raise ConfigError(f"unknown URL option(s) {unknown}", key=unknown[0])
    settings = query | options
    unknown = sorted(set(settings) - {"timeout", "clock"})
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}", key=unknown[0])
    timeout = _timeout(settings.get("timeout", bounds.DEFAULT_OPERATION_TIMEOUT))
    clock = settings.get("clock")
    if clock is not None and not callable(clock):
        raise ConfigError("must be a callable returning an aware datetime", key="clock")
    return MemoryConfig(name=name, timeout=timeout, clock=clock)


def _timeout(value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number of seconds, not {value!r}", key="timeout") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"must be a positive number of seconds, not {value!r}", key="timeout")
    return seconds
