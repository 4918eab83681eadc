"""The keys of a task's flow control: which control record its breaker lives in."""

from __future__ import annotations

from rdq.config import DEPENDENCY_PREFIX
from rdq.spi import Envelope, handler_key

__all__ = ["breaker_key", "dependency_key"]


def dependency_key(name: str) -> str:
    """The key of the named dependency ``name`` (``dep:<name>``)."""
    return DEPENDENCY_PREFIX + name


def breaker_key(task: Envelope) -> str:
    """The key of ``task``'s breaker: its dependency's (the first ``dep:`` key the task
    carries), else its handler's."""
    for key in task.keys:
        if key.startswith(DEPENDENCY_PREFIX):
            return key
    return handler_key(task.handler_ref)
