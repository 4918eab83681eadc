"""The flow-control half of :class:`~rdq.admin.TaskAdmin`: pauses, breakers by hand, retry
now, paced redrives, and what the surfaces show of them and of the fleet. The rules of pauses,
breakers and limits, and their views, are :mod:`rdq.flow`'s; retry now is
:mod:`rdq.admin._retry_now`, paced redrives :mod:`rdq.admin._pace`, the fleet's views
:mod:`rdq.admin._fleet`."""

from __future__ import annotations

from datetime import datetime

from rdq import flow
from rdq.admin import _fleet, _pace, _retry_now
from rdq.admin._selectors import TaskSelector, check_task_selector
from rdq.audit import Action, AuditSink
from rdq.errors import NotFound
from rdq.spi import QUEUE_KEY, Control, Counts, Selector, Storage

__all__ = ["FlowAdmin"]


class FlowAdmin:
    """Operator controls of queues, over ``self.storage``; every change audited."""

    storage: Storage
    sinks: list[AuditSink]

    async def count(self, queue: str, selector: Selector, *, action: Action = "redrive") -> int:
        raise NotImplementedError  # TaskAdmin's

    async def known_unless_found(self, queue: str, *, found: bool) -> None:
        raise NotImplementedError  # TaskAdmin's

    async def list_controls(self, queue: str | None = None) -> list[Control]:
        """The control records (pauses, breakers, limits, paced redrives) of ``queue`` (of
        every queue); ``[]`` from a store without the ``control`` capability."""
        if not self.storage.capabilities().control:
            return []
        return await self.storage.list_controls(queue)

    async def pause(
        self, queue: str, key: str = QUEUE_KEY, *, actor: str, reason: str | None = None
    ) -> Control:
        """Pause ``key`` of ``queue`` (``*``: the whole queue; ``handler:<ref>``;
        ``dep:<name>``): no worker or node claims its tasks from the next claim on; they
        keep their attempts and submits are still accepted. Audited."""
        now = await self.storage.now()
        return await flow.set_paused(
            self.storage, self.sinks, queue, key, True, actor=actor, reason=reason, now=now
        )

    async def resume(
        self, queue: str, key: str = QUEUE_KEY, *, actor: str, reason: str | None = None
    ) -> Control:
        """Lift the pause of ``key`` of ``queue``. Audited."""
        now = await self.storage.now()
        return await flow.set_paused(
            self.storage, self.sinks, queue, key, False, actor=actor, reason=reason, now=now
        )

    async def set_breaker(
        self,
        queue: str,
        key: str,
        change: flow.BreakerChange,
        *,
        actor: str,
        reason: str | None = None,
        config: flow.Breaker | None = None,
    ) -> Control:
        """Open the breaker of ``key`` by hand (its tasks are held until it is closed by
        hand), or close it (its held tasks are let go over the ramp). Audited."""
        now = await self.storage.now()
        return await flow.force_breaker(
            self.storage,
            self.sinks,
            queue,
            key,
            change,
            actor=actor,
            reason=reason,
            now=now,
            config=config,
        )

    async def retry_now(
        self, queue: str, selector: TaskSelector, *, actor: str, reason: str | None = None
    ) -> int:
        """Make the selected PENDING tasks that wait out a backoff due now. Audited."""
        check_task_selector(selector)
        return await _retry_now.retry_now(
            self.storage, self.sinks, queue, selector, actor=actor, reason=reason
        )

    async def start_paced_redrive(
        self,
        queue: str,
        selector: Selector,
        rate: float,
        *,
        actor: str,
        reason: str | None = None,
        driver: str | None = None,
    ) -> _pace.Operation:
        """Begin a redrive that returns the selected DEAD tasks at most ``rate`` per second
        (drive it with :meth:`drive_paced_redrive`; any node or worker resumes it if its
        driver stops)."""
        total = await self.count(queue, selector)
        return await _pace.start_redrive(
            self.storage,
            queue,
            selector,
            rate,
            actor=actor,
            reason=reason,
            total=total,
            driver=driver,
        )

    async def drive_paced_redrive(
        self,
        queue: str,
        op_id: str,
        *,
        driver: str,
        progress: _pace.Progress | None = None,
    ) -> _pace.Operation:
        return await _pace.drive_redrive(
            self.storage, self.sinks, queue, op_id, driver=driver, progress=progress
        )

    async def cancel_paced_redrive(
        self, queue: str, op_id: str, *, actor: str, reason: str | None = None
    ) -> _pace.Operation:
        return await _pace.cancel_redrive(
            self.storage, self.sinks, queue, op_id, actor=actor, reason=reason
        )

    async def paced_redrives(self, queue: str | None = None) -> list[_pace.Operation]:
        """The paced redrives of ``queue`` (of every queue), newest first; none of a named
        queue nothing knows is ``UnknownName``."""
        found = await _pace.list_operations(self.storage, queue)
        if queue is not None:
            await self.known_unless_found(queue, found=bool(found))
        return found

    async def paced_redrive(self, queue: str, op_id: str) -> _pace.Operation:
        """One paced redrive of ``queue``; ``NotFound`` when it has none of that id."""
        for op in await _pace.list_operations(self.storage, queue):
            if op.id == op_id:
                return op
        raise NotFound(f"no paced redrive {op_id!r} in queue {queue!r}")

    # --- what the surfaces show ------------------------------------------------------------

    async def controls(self, queue: str) -> list[Control]:
        """The control records of ``queue`` (its pauses, breakers, limits; not its paced
        redrives), by key. ``Unsupported`` without ``control``; none of a queue nothing
        knows is ``UnknownName``."""
        found = await flow.control_list(self.storage, queue)
        await self.known_unless_found(queue, found=bool(found))
        return found

    async def breakers(
        self, queue: str | None = None, *, count_held: bool = True
    ) -> list[flow.BreakerView]:
        """Every breaker of ``queue`` (of every queue) with a state: open, half-open, then
        closed ones. ``Unsupported`` from a store without the ``control`` capability; none of
        a named queue nothing knows is ``UnknownName``."""
        found = await flow.breaker_views(self.storage, queue, count_held=count_held)
        if queue is not None:
            await self.known_unless_found(queue, found=bool(found))
        return found

    async def pauses(
        self, queue: str | None = None, *, count_held: bool = True
    ) -> list[flow.PauseView]:
        """Every paused key of ``queue`` (of every queue). ``Unsupported`` without
        ``control``; none of a named queue nothing knows is ``UnknownName``."""
        found = await flow.pause_views(self.storage, queue, count_held=count_held)
        if queue is not None:
            await self.known_unless_found(queue, found=bool(found))
        return found

    async def limits(
        self, queue: str | None = None, *, count_waiting: bool = True
    ) -> list[flow.LimitView]:
        """Every declared limit of ``queue`` (of every queue), with its use now and, with
        ``count_waiting``, the due tasks that wait on it. ``Unsupported`` without
        ``control``; none of a named queue nothing knows is ``UnknownName``."""
        found = await flow.limit_views(self.storage, queue, waiting=count_waiting)
        if queue is not None:
            await self.known_unless_found(queue, found=bool(found))
        return found

    async def workers(self) -> tuple[datetime, list[_fleet.WorkerView]]:
        """The store's now and every registered worker, judged live or silent by it.
        ``Unsupported`` without ``worker_registry``."""
        return await _fleet.worker_views(self.storage)

    async def rates(
        self, queue: str | None = None, minutes: int = 60
    ) -> tuple[datetime, dict[str, list[Counts]]]:
        """The store's now and the per-minute counts of the last ``minutes`` minutes, per
        queue, zeros filled in. ``Unsupported`` without ``counters``."""
        return await _fleet.rate_series(self.storage, queue, minutes)

    async def count_retry_now(self, queue: str, selector: TaskSelector) -> int:
        """How many of the selected PENDING tasks :meth:`retry_now` would make due now."""
        return await _retry_now.count_retry_now(self.storage, queue, selector)
