"""The control records of the memory store (capability ``control``): ``list_controls``,
``put_control`` (compare-and-set on the version), ``delete_control``, ``retry_now``, and the
live leases of a key (``in_use``), which claims count too (:mod:`rdq_memory._claims`), as does
the extension of a lapsed lease (``lapsed_lease_fits``).

Each operation of :class:`ControlOperations` is one call of a function here under the state's
lock (the arguments already checked by the store).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import msgspec

from rdq.errors import ControlConflict
from rdq.spi import Control, Envelope, Status, slots_free, task_keys
from rdq_memory._core import MemoryCore
from rdq_memory._state import MemoryState

__all__ = [
    "ControlOperations",
    "delete_control",
    "in_use",
    "lapsed_lease_fits",
    "list_controls",
    "put_control",
    "retry_now",
]


class ControlOperations(MemoryCore):
    """Control records and ``retry_now`` (see the module docstring)."""

    async def _list_controls(self, queue: str | None) -> list[Control]:
        with self._state.lock:
            return list_controls(self._state, queue, self._clock_now())

    async def _put_control(self, control: Control, expected_version: int) -> Control:
        with self._state.lock:
            stored = put_control(self._state, control, expected_version, self._clock_now())
            self._state.wake(control.queue)  # a control lifted may make tasks claimable
            return stored

    async def _delete_control(self, queue: str, key: str, expected_version: int) -> bool:
        with self._state.lock:
            deleted = delete_control(self._state, queue, key, expected_version)
            self._state.wake(queue)
            return deleted

    async def _retry_now(self, queue: str, task_ids: list[str]) -> int:
        with self._state.lock:
            return retry_now(self._state, queue, task_ids, self._clock_now())


def in_use(state: MemoryState, queue: str, keys: set[str], now: datetime) -> Counter[str]:
    """Per key of ``keys``: the tasks of ``queue`` with that key holding a live lease."""
    counts: Counter[str] = Counter()
    if not keys:
        return counts
    for record in state.of_queue(queue):
        task = record.task
        expires = task.lease_expires_at
        if task.status == Status.IN_FLIGHT and expires is not None and expires > now:
            for key in task_keys(task):
                if key in keys:
                    counts[key] += 1
    return counts


def lapsed_lease_fits(state: MemoryState, task: Envelope, now: datetime) -> bool:
    """Whether the lease of ``task`` (IN_FLIGHT, its token checked) may be extended now: a
    live lease always, a lapsed one only into a free slot of every concurrency limit of its
    keys (``rdq.spi.slots_free``)."""
    expires = task.lease_expires_at
    if expires is not None and expires > now:
        return True
    controls = state.controls.get(task.queue)
    if not controls:
        return True
    keys = task_keys(task)
    limited = {k for k in keys if k in controls and controls[k].concurrency is not None}
    return slots_free(controls, in_use(state, task.queue, limited, now), keys)


def list_controls(state: MemoryState, queue: str | None, now: datetime) -> list[Control]:
    queues = [queue] if queue is not None else sorted(state.controls)
    out: list[Control] = []
    for name in queues:
        controls = state.controls.get(name, {})
        used = in_use(state, name, set(controls), now)
        out.extend(
            msgspec.structs.replace(controls[key], in_use=used[key]) for key in sorted(controls)
        )
    return out


def put_control(
    state: MemoryState, control: Control, expected_version: int, now: datetime
) -> Control:
    controls = state.controls.setdefault(control.queue, {})
    current = controls.get(control.key)
    if (current.version if current is not None else 0) != expected_version:
        raise ControlConflict(control.queue, control.key, current)
    stored = msgspec.structs.replace(
        control,
        state=msgspec.json.decode(msgspec.json.encode(control.state)),
        version=expected_version + 1,
        updated_at=now,
        in_use=None,
    )
    controls[control.key] = stored
    rate_changed = current is None or (current.rate, current.per, current.bucket) != (
        stored.rate,
        stored.per,
        stored.bucket,
    )
    buckets = state.buckets.setdefault(control.queue, {})
    if rate_changed or stored.rate is None:
        buckets.pop(control.key, None)
    return stored


def delete_control(state: MemoryState, queue: str, key: str, expected_version: int) -> bool:
    controls = state.controls.get(queue, {})
    current = controls.get(key)
    if current is None:
        return False
    if current.version != expected_version:
        raise ControlConflict(queue, key, current)
    del controls[key]
    state.buckets.get(queue, {}).pop(key, None)
    return True


def retry_now(state: MemoryState, queue: str, task_ids: list[str], now: datetime) -> int:
    """Make the listed PENDING tasks of ``queue`` that are not yet due due at ``now``."""
    moved = 0
    for task_id in task_ids:
        record = state.tasks.get(task_id)
        if record is None or record.task.queue != queue:
            continue
        task = record.task
        due = task.next_attempt_at
        if task.status != Status.PENDING or due is None or due <= now:
            continue
        task.next_attempt_at = now
        record.bump()
        state.schedule(record)
        moved += 1
    if moved:
        state.wake(queue)
    return moved
