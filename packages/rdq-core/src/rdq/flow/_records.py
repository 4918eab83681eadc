"""Changing a control record the way every writer must: read it, apply a change, and store
the result over the version it was read at (:func:`update_control`), again on a conflict, so
that N workers, nodes and operators writing one record never lose an update; the key an operator
names (:func:`control_key`); when a record may go (:func:`holds_nothing`)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from rdq.errors import ControlConflict, ValidationError
from rdq.flow._keys import dependency_key
from rdq.spi import QUEUE_KEY, Control, Storage, require

__all__ = ["CAS_ATTEMPTS", "control_key", "holds_nothing", "update_control"]

CAS_ATTEMPTS = 10
"""How many conflicts :func:`update_control` takes before it gives up (``ControlConflict``)."""


def control_key(handler: str | None = None, dependency: str | None = None) -> str:
    """The key an operator acts on: a handler's, a dependency's, or the whole queue's."""
    if handler is not None and dependency is not None:
        raise ValidationError("name a handler or a dependency, not both", field="key")
    if handler is not None:
        return f"handler:{handler}"
    if dependency is not None:
        return dependency_key(dependency)
    return QUEUE_KEY


async def update_control(
    storage: Storage, queue: str, key: str, change: Callable[[Control], Control | None]
) -> tuple[Control, Control | None]:
    """Read the (queue, key) record, apply ``change`` and store it over the version it was
    read at, again on a conflict; return (before, after) — ``after`` is ``None`` when
    ``change`` found nothing to do."""
    require(storage, "control", "pausing, breakers and limits shared by the fleet")
    found = {c.key: c for c in await storage.list_controls(queue)}.get(key)
    for _ in range(CAS_ATTEMPTS):
        current = found or Control(queue=queue, key=key)
        changed = change(current)
        if changed is None:
            return current, None
        try:
            stored = await storage.put_control(
                msgspec.structs.replace(changed, in_use=None), expected_version=current.version
            )
        except ControlConflict as conflict:
            found = conflict.found
            continue
        return current, stored
    raise ControlConflict(queue, key, found)


def holds_nothing(control: Control) -> bool:
    """True when a record holds nothing any more (no pause, gate, limit or state): it may be
    deleted."""
    return (
        not control.paused
        and control.gate is None
        and control.concurrency is None
        and control.rate is None
        and not control.state
    )
