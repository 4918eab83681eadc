"""Fixtures for the engine tests: a store per backend, unique queue names, a running worker."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import pytest_asyncio

import rdq
from rdq.spi import Envelope, Status, Storage
from rdq_compliance.testing import eventually

BACKENDS = os.environ.get("RDQ_ENGINE_BACKENDS", "memory,postgres").split(",")
"""The backends the engine tests run on; ``RDQ_ENGINE_BACKENDS=memory,postgres,redis,mongo,sqlite``
adds the others."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def storage_url(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return f"memory://engine-{uuid.uuid4().hex}"
    if backend == "sqlite":
        return f"sqlite:///{request.getfixturevalue('tmp_path')}/engine.db"
    return str(request.getfixturevalue(f"{backend}_url"))


@pytest_asyncio.fixture
async def storage(storage_url: str) -> AsyncIterator[Storage]:
    async with rdq.open_storage(storage_url) as store:
        await store.migrate()
        yield store


@pytest.fixture
def queue() -> str:
    """A queue name of its own, so tests sharing a database never see each other's tasks."""
    return f"q-{uuid.uuid4().hex[:12]}"


async def wait_status(
    storage: Storage, task_id: str, status: Status, timeout: float = 30.0
) -> Envelope:
    """Wait until the task has ``status``; return it with its history."""
    found: list[Envelope] = []

    async def check() -> bool:
        task = await storage.get(task_id)
        found[:] = [task]
        return task.status == status

    await eventually(check, f"task {task_id} {status}", timeout)
    return found[0]


@asynccontextmanager
async def running(worker: rdq.Worker) -> AsyncIterator[rdq.Worker]:
    """Run ``worker`` in the background for the duration of the block, then stop it."""
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)


def fast_worker(app: rdq.App, storage: Storage, **kwargs: Any) -> rdq.Worker:
    kwargs.setdefault("grace_period", 5.0)
    kwargs.setdefault("poll_max", 0.2)
    kwargs.setdefault("maintenance", False)
    return rdq.Worker(app, storage, **kwargs)


class Recorder:
    """A logger that keeps every line (event and fields), from any thread."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def _log(self, level: str, event: str, **fields: Any) -> None:
        with self._lock:
            self.lines.append((level, event, fields))

    def debug(self, event: str, **fields: Any) -> None:
        self._log("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log("error", event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._log("error", event, **fields)

    def events(self, prefix: str) -> list[dict[str, Any]]:
        with self._lock:
            return [fields for _, event, fields in self.lines if event.startswith(prefix)]
