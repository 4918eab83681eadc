"""A node's own background work: it registers in the store's worker registry as a node (so
``rdq workers``, the console and ``rdq dlq redrive --detach`` see it), drives the paced
redrives it starts, and takes over every paced redrive whose driver stopped renewing it
(:func:`rdq.admin.resume_orphans`), each in a task of its own.

A store without ``worker_registry`` or ``control`` costs nothing here: what needs them is not
done. A store error is logged and tried again at the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from importlib.metadata import PackageNotFoundError, version

from rdq.admin import Operation, TaskAdmin, resume_orphans
from rdq.logging import get_logger
from rdq.spi import Storage, WorkerInfo

__all__ = ["INTERVAL", "NodeUpkeep", "node_id"]

INTERVAL = 5.0
"""Seconds between two rounds: a heartbeat of the node's registration and a look for orphaned
paced redrives (a redrive whose driver died is taken over within its lease plus this)."""
_log = get_logger("rdq.server")


def node_id() -> str:
    """``node:host:pid:random``."""
    return f"node:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _rdq_version() -> str:
    try:
        return version("rdq-core")
    except PackageNotFoundError:  # pragma: no cover - a source checkout
        return ""


class NodeUpkeep:
    """The registration and the paced redrives of one node."""

    def __init__(self, node_id: str, admin: TaskAdmin, works: list[str]) -> None:
        self.node_id = node_id
        self.admin = admin
        self.storage: Storage = admin.storage
        self.works = works
        """The queues whose tasks the node's own worker runs (``[]``: none)."""
        self.interval = INTERVAL
        self._drives: dict[str, asyncio.Task[Operation]] = {}
        self._warned = False

    @property
    def driving(self) -> list[str]:
        """The ids of the paced redrives this node drives now."""
        return [op_id for op_id, task in self._drives.items() if not task.done()]

    def drive(self, queue: str, op_id: str) -> None:
        """Drive the paced redrive ``op_id`` of ``queue`` in a task of the node's."""
        if op_id in self.driving:
            return
        task = asyncio.create_task(
            self.admin.drive_paced_redrive(queue, op_id, driver=self.node_id),
            name=f"rdq-redrive-{op_id}",
        )
        self._adopt(op_id, task)

    def _adopt(self, op_id: str, task: asyncio.Task[Operation]) -> None:
        self._drives[op_id] = task
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Operation]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:  # its lease lapses: the next round (here or elsewhere) resumes it
            _log.warning(
                "a paced redrive stopped on an error; it is resumed once its lease lapses",
                task=task.get_name(),
                error=f"{type(error).__name__}: {error}",
            )

    async def round(self) -> None:
        """One heartbeat of the registration and one look for orphans."""
        storage = self.storage
        caps = storage.capabilities()
        if caps.worker_registry:
            await storage.heartbeat_worker(self._info())
        if caps.control:
            for task in await resume_orphans(storage, self.admin.sinks, None, driver=self.node_id):
                op_id = task.get_name().removeprefix("rdq-redrive-")
                self._adopt(op_id, task)

    def _info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.node_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=_rdq_version(),
            queues=[],  # the worker a node runs registers the queues it claims from itself
            concurrency=0,
            held=len(self.driving),
            heartbeat=self.interval,
            extra={
                "kind": "node",
                "works": self.works,
                "redrives": self.driving,
            },
        )

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.round()
                self._warned = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._warned:  # once per outage, not every round
                    _log.warning("node upkeep failed; trying again", error=str(exc))
                    self._warned = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval)

    async def close(self) -> None:
        """Stop driving (another node takes the redrives over once their leases lapse) and
        leave the registry."""
        for task in list(self._drives.values()):
            task.cancel()
        for task in list(self._drives.values()):
            with contextlib.suppress(BaseException):
                await task
        storage = self.storage
        if storage.capabilities().worker_registry:
            with contextlib.suppress(Exception):
                await storage.remove_worker(self.node_id)
