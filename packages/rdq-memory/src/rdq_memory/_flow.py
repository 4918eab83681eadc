"""The memory store's flow-control records, worker registry and counts (the arguments already
checked by the store; every function is called under the state's lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

import msgspec

from rdq.errors import ControlConflict
from rdq.spi import (
    QUEUE_KEY,
    ClaimGate,
    Control,
    Counts,
    Status,
    WorkerInfo,
    task_keys,
)
from rdq_memory._state import MemoryState

__all__ = [
    "add_counts",
    "claim_gate",
    "delete_control",
    "heartbeat",
    "keep_gate",
    "list_controls",
    "purge_counts",
    "purge_workers",
    "put_control",
    "read_counts",
    "retry_now",
]


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


def claim_gate(state: MemoryState, queue: str, now: datetime) -> ClaimGate | None:
    """The gate a claim of ``queue`` goes through, or ``None`` when nothing restricts it."""
    controls = state.controls.get(queue)
    if not controls:
        return None
    limited = {k for k, c in controls.items() if c.concurrency is not None}
    gate = ClaimGate(
        controls, state.buckets.get(queue, {}), in_use(state, queue, limited, now), now
    )
    return None if gate.idle else gate


def keep_gate(state: MemoryState, queue: str, gate: ClaimGate) -> None:
    """Store what a claim took from the gates and the rate buckets (no version change)."""
    controls = state.controls[queue]
    for key, left in gate.gates.items():
        controls[key] = msgspec.structs.replace(controls[key], gate=left)
    state.buckets.setdefault(queue, {}).update(gate.buckets)


def blocked_queue(gate: ClaimGate) -> bool:
    return gate.blocks_everything(QUEUE_KEY)


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


def heartbeat(state: MemoryState, info: WorkerInfo, now: datetime) -> WorkerInfo:
    before = state.workers.get(info.id)
    started = before.started_at if before is not None else now
    stored = msgspec.structs.replace(
        info, queues=list(info.queues), extra=dict(info.extra), started_at=started, seen_at=now
    )
    state.workers[info.id] = stored
    return stored


def purge_workers(state: MemoryState, seen_before: datetime) -> int:
    workers = state.workers
    doomed = [i for i, w in workers.items() if w.seen_at is not None and w.seen_at < seen_before]
    for worker_id in doomed:
        del workers[worker_id]
    return len(doomed)


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


def add_counts(state: MemoryState, counts: Sequence[Counts]) -> None:
    for entry in counts:
        total = state.counts.setdefault((entry.queue, entry.minute), [0, 0, 0, 0])
        total[0] += entry.succeeded
        total[1] += entry.failed
        total[2] += entry.dead
        total[3] += entry.deferred


def read_counts(state: MemoryState, queue: str | None, since: datetime) -> list[Counts]:
    return [
        Counts(queue=q, minute=m, succeeded=c[0], failed=c[1], dead=c[2], deferred=c[3])
        for (q, m), c in sorted(state.counts.items())
        if (queue is None or q == queue) and m >= since
    ]


def purge_counts(state: MemoryState, before: datetime) -> int:
    doomed = [key for key in state.counts if key[1] < before]
    for key in doomed:
        del state.counts[key]
    return len(doomed)
