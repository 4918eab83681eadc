"""Redrives at a safe pace: a redrive of many dead tasks becomes an operation with an id that
returns them at most ``rate`` per second, shows its progress, can be cancelled, and outlives
the process that drives it.

The operation is a control record of its queue (key ``op:redrive:<id>``) whose ``state``
holds what it selects (a DLQ filter, or a list of ids), its rate, how many it selected when it
began (``total``: it never redrives more, so tasks that die again meanwhile are not looped),
how many it returned (``done``), its status, and who drives it until when: the driver renews
that every tick, and when it stops renewing (its process died) any node or worker on the store
takes the operation over (:func:`resume_orphans`). Each step is a compare-and-set, so two
drivers never both go on, and a cancel is seen at the next tick.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from rdq import metrics
from rdq.admin._finish import to_the_end
from rdq.admin._scan import scan_dlq
from rdq.audit import AuditSink, check_action, record_action
from rdq.errors import ValidationError
from rdq.flow import OP_PREFIX, update_control
from rdq.logging import get_logger
from rdq.spi import Control, DLQFilter, Selector, Storage, bounds, require

__all__ = [
    "MAX_PACED_IDS",
    "Operation",
    "cancel_redrive",
    "drive_redrive",
    "list_operations",
    "resume_orphans",
    "start_redrive",
]

DRIVER_LEASE = 15.0
"""Seconds a driver holds an operation without renewing it; then anyone may take it over."""
TICK = 0.25
MAX_PACED_IDS = 1000
"""A paced redrive by ids takes at most this many (a larger selection: by filter)."""
_log = get_logger("rdq.admin")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Operation(msgspec.Struct, kw_only=True, frozen=True):
    """A paced redrive as its control record keeps it."""

    id: str
    queue: str
    rate: float
    total: int
    done: int = 0
    status: str = "running"
    """``running``, ``done``, ``cancelled`` or ``failed``."""
    filter: DLQFilter | None = None
    ids: list[str] | None = None
    position: int = 0
    """Ids tried so far (a redrive by ids)."""
    actor: str = ""
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    driver: str | None = None
    driver_until: datetime | None = None
    error: str | None = None
    cancelled_by: str | None = None

    @property
    def key(self) -> str:
        return OP_PREFIX + self.id

    @property
    def finished(self) -> bool:
        return self.status != "running"


def _of(control: Control) -> Operation | None:
    raw = control.state.get("op")
    if not control.key.startswith(OP_PREFIX) or raw is None:
        return None
    try:
        return msgspec.convert(raw, Operation)
    except msgspec.ValidationError:
        return None


def _with(control: Control, op: Operation) -> Control:
    state = dict(control.state)
    state["op"] = msgspec.to_builtins(op)
    return msgspec.structs.replace(control, state=state)


def parse_rate(text: str) -> float:
    """``"50/s"``, ``"600/min"`` or ``"50"`` → tasks per second."""
    value, _, unit = str(text).strip().partition("/")
    per = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip())
    try:
        rate = float(value) / per if per else float("nan")
    except ValueError:
        rate = float("nan")
    if not rate > 0 or rate > 100_000:
        raise ValidationError(
            "must be a positive rate such as 50/s or 600/min (at most 100000/s)", field="rate"
        )
    return rate


async def list_operations(storage: Storage, queue: str | None = None) -> list[Operation]:
    """The paced redrives of ``queue`` (of every queue), running and finished, newest first."""
    if not storage.capabilities().control:
        return []
    ops = [op for c in await storage.list_controls(queue) if (op := _of(c)) is not None]
    return sorted(ops, key=lambda op: op.started_at or _EPOCH, reverse=True)


async def start_redrive(
    storage: Storage,
    queue: str,
    selector: Selector,
    rate: float,
    *,
    actor: str,
    reason: str | None,
    total: int,
    driver: str | None = None,
) -> Operation:
    """Create the operation (``total``: how many the selector selects now), held by
    ``driver`` when given (who then drives it with :func:`drive_redrive`)."""
    check_action(queue, actor, reason)
    bounds.check_selector(selector)
    require(storage, "control", "a redrive at a pace")
    if selector.ids is not None and len(selector.ids) > MAX_PACED_IDS:
        raise ValidationError(f"a paced redrive by ids takes at most {MAX_PACED_IDS}", field="ids")
    now = await storage.now()
    op = Operation(
        id=secrets.token_hex(6),
        queue=queue,
        rate=rate,
        total=total,
        filter=selector.filter,
        ids=list(dict.fromkeys(selector.ids)) if selector.ids is not None else None,
        actor=actor,
        reason=reason,
        started_at=now,
        driver=driver,
        driver_until=now + timedelta(seconds=DRIVER_LEASE) if driver is not None else None,
    )
    await update_control(storage, queue, op.key, lambda c: _with(c, op) if _of(c) is None else None)
    return op


async def cancel_redrive(
    storage: Storage,
    sinks: Sequence[AuditSink],
    queue: str,
    op_id: str,
    *,
    actor: str,
    reason: str | None = None,
) -> Operation:
    """Stop a running paced redrive at its next tick; the tasks not yet returned stay in the
    DLQ. Audited with how many were returned."""
    check_action(queue, actor, reason)
    now = await storage.now()

    def cancel(control: Control) -> Control | None:
        op = _of(control)
        if op is None:
            raise ValidationError(f"no paced redrive {op_id!r} in queue {queue!r}", field="id")
        if op.finished:
            return None
        return _with(
            control,
            msgspec.structs.replace(op, status="cancelled", finished_at=now, cancelled_by=actor),
        )

    before, after = await update_control(storage, queue, OP_PREFIX + op_id, cancel)
    op = _of(after or before)
    if op is None:  # pragma: no cover - checked in cancel()
        raise ValidationError(f"no paced redrive {op_id!r}", field="id")
    if after is not None:
        await record_action(
            storage,
            list(sinks),
            "redrive.cancel",
            queue,
            {"op": op_id},
            actor,
            reason,
            op.done,
            None,
        )
    return op


Progress = Callable[[Operation], None]


async def drive_redrive(
    storage: Storage,
    sinks: Sequence[AuditSink],
    queue: str,
    op_id: str,
    *,
    driver: str,
    progress: Progress | None = None,
) -> Operation:
    """Drive the operation until it is done, cancelled, or taken over by another driver
    (whose lease on it had to lapse first): return it as it was left."""
    key = OP_PREFIX + op_id
    loop = asyncio.get_running_loop()
    tokens, last = 0.0, loop.time()
    while True:
        now = await storage.now()
        found = {c.key: c for c in await storage.list_controls(queue)}.get(key)
        op = _of(found) if found is not None else None
        if op is None:
            raise ValidationError(f"no paced redrive {op_id!r} in queue {queue!r}", field="id")
        if op.finished:
            return op
        if (
            op.driver not in (None, driver)
            and op.driver_until is not None
            and op.driver_until > now
        ):
            return op  # another driver holds it
        mono = loop.time()
        tokens = min(max(op.rate, 1.0), tokens + (mono - last) * op.rate)
        last = mono
        take = min(int(tokens), op.total - op.done, bounds.MAX_LIMIT)
        if take > 0:
            tokens -= max(take, 1)
        # one tick's redrive and the record of it, finished even if the driver is cancelled
        # meanwhile: the record (and the audit entry of a cancel) counts what was returned
        current, stopped = await to_the_end(_tick(storage, op, take, driver, now))
        if stopped:
            raise asyncio.CancelledError
        if current is None:  # cancelled or taken over meanwhile: look again
            continue
        if progress is not None:
            progress(current)
        if current.finished:
            await record_action(
                storage,
                list(sinks),
                "redrive",
                queue,
                {"op": op_id, "rate": f"{op.rate:g}/s", **_selected(op)},
                op.actor,
                op.reason,
                current.done,
                None,
            )
            return current
        await asyncio.sleep(TICK)


async def _tick(
    storage: Storage, op: Operation, take: int, driver: str, now: datetime
) -> Operation | None:
    """Return the next ``take`` tasks of ``op`` and record the step; the operation as stored
    after it (``None``: it changed meanwhile, a cancel or another driver)."""
    returned, tried, exhausted = 0, 0, False
    if take > 0:
        ids, tried, exhausted = await _next(storage, op, take)
        if ids:
            returned = await storage.redrive(op.queue, Selector(ids=ids))
            metrics.REDRIVEN.labels(op.queue).inc(returned)
    done = op.done + returned
    finished = exhausted or done >= op.total
    step = msgspec.structs.replace(
        op,
        done=done,
        position=op.position + tried,
        driver=driver,
        driver_until=now + timedelta(seconds=DRIVER_LEASE),
        status="done" if finished else "running",
        finished_at=now if finished else None,
    )
    _, stored = await update_control(storage, op.queue, op.key, functools.partial(_step, op, step))
    return _of(stored) if stored is not None else None


def _step(seen: Operation, step: Operation, control: Control) -> Control | None:
    """``control`` holding ``step``, unless the operation changed since ``seen``."""
    return None if _stale(control, seen) else _with(control, step)


def _stale(control: Control, seen: Operation) -> bool:
    """True if the operation changed since ``seen`` (a cancel, another driver's step)."""
    now = _of(control)
    return now is None or now.finished or now.done != seen.done or now.driver != seen.driver


def _selected(op: Operation) -> dict[str, Any]:
    if op.ids is not None:
        return {"ids": op.ids}
    return {"filter": msgspec.to_builtins(op.filter or DLQFilter())}


async def _next(storage: Storage, op: Operation, take: int) -> tuple[list[str], int, bool]:
    """The next ``take`` ids to return, how many positions of an id list they used, and
    whether the selection is exhausted."""
    if op.ids is not None:
        chunk = op.ids[op.position : op.position + take]
        return chunk, len(chunk), op.position + len(chunk) >= len(op.ids)
    ids: list[str] = []
    pushdown = storage.capabilities().filter_pushdown
    async for page in scan_dlq(storage, pushdown, op.queue, op.filter):
        ids += [t.id for t in page][: take - len(ids)]
        if len(ids) >= take:
            break
    return ids, 0, not ids


async def resume_orphans(
    storage: Storage, sinks: Sequence[AuditSink], queues: Sequence[str] | None, *, driver: str
) -> list[asyncio.Task[Operation]]:
    """Take over every running paced redrive whose driver stopped renewing it (of ``queues``,
    or of every queue): each is driven by a task of its own, returned."""
    if not storage.capabilities().control:
        return []
    now = await storage.now()
    tasks: list[asyncio.Task[Operation]] = []
    for queue in queues if queues is not None else [None]:
        for op in await list_operations(storage, queue):
            orphaned = op.driver_until is None or op.driver_until <= now
            if not op.finished and orphaned:
                _log.info("resuming a paced redrive", queue=op.queue, op=op.id, done=op.done)
                tasks.append(
                    asyncio.create_task(
                        drive_redrive(storage, sinks, op.queue, op.id, driver=driver),
                        name=f"rdq-redrive-{op.id}",
                    )
                )
    return tasks
