"""The keys of control records: which record a task's breaker lives in, a named dependency's
key, and the keys of the engine's own records, a paced redrive's and the retention's (a
limit's keys are :mod:`rdq.flow._limit_config`'s)."""

from __future__ import annotations

from rdq.spi import Envelope, handler_key

__all__ = [
    "DEPENDENCY_PREFIX",
    "OPERATION_PREFIX",
    "OP_PREFIX",
    "RETENTION_KEY",
    "breaker_key",
    "dependency_key",
]

DEPENDENCY_PREFIX = "dep:"
"""The key of a named dependency: ``dep:<name>``, carried by every task of its handlers."""
OPERATION_PREFIX = "op:"
"""The keys of the records of the engine's own operations (no task has such a key): they are
never shown as controls."""
OP_PREFIX = "op:redrive:"
"""The key of a paced redrive's record: ``op:redrive:<id>`` (see :mod:`rdq.admin`)."""
RETENTION_KEY = "op:retention"
"""The key of a queue's retention record (see :mod:`rdq.retention`)."""


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
