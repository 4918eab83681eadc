"""A task's own retry override applied over its queue's config, at claim time."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from rdq._checks import is_int, is_number, seconds_or
from rdq.config import Backoff, BackoffKind, QueueConfig
from rdq.spi import RetryOverride

__all__ = ["resolve"]


def resolve(config: QueueConfig, override: RetryOverride | None) -> QueueConfig:
    """The config a task runs under: its own ``override`` applied over its queue's ``config``.

    Override values that are invalid are ignored (the queue's value stays): a bad override
    written by a producer must never stop a task from being handled."""
    if override is None:
        return config
    changes: dict[str, Any] = {}
    if is_int(override.max_attempts) and override.max_attempts >= 1:
        changes["max_attempts"] = override.max_attempts
    if is_number(override.timeout) and 0 < override.timeout < math.inf:
        changes["timeout"] = float(override.timeout)
    backoff = config.backoff
    kind = backoff.kind
    if override.backoff is not None:
        try:
            kind = BackoffKind(override.backoff)
        except ValueError:
            kind = backoff.kind
    base = seconds_or(override.base, backoff.base)
    cap = seconds_or(override.cap, backoff.cap)
    if kind is BackoffKind.FIXED and override.cap is None:
        cap = base
    if cap < base:
        cap = base
    new_backoff = Backoff(kind, base, cap)
    if new_backoff != backoff:
        changes["backoff"] = new_backoff
    return dataclasses.replace(config, **changes) if changes else config
