"""A real outage: the PostgreSQL server stops under a running worker and comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import rdq
from rdq import metrics
from rdq.spi import Outcome, Status

from .conftest import eventually, fast_worker, running, wait_status


@pytest.fixture
def cluster() -> Iterator[object]:
    postgres = pytest.importorskip("rdq_compliance.servers.postgres")
    bindir = postgres.find_bindir()
    if bindir is None:
        pytest.skip("no local PostgreSQL binaries for a private cluster")
    with postgres.LocalCluster(bindir) as local:
        yield local


@pytest.mark.slow
@pytest.mark.asyncio
async def test_worker_survives_a_postgres_restart_and_keeps_working(cluster, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=3)
    ran: list[int] = []

    @app.handler("job", queue=queue)
    async def job(payload: int) -> None:
        ran.append(payload)

    async with rdq.open_storage(cluster.url) as storage:  # type: ignore[attr-defined]
        await storage.migrate()
        client = rdq.Client(storage, app)
        first = await client.submit("job", 1)
        errors_before = metrics.STORAGE_ERRORS.labels("claim_due")._value.get()

        async def claims_failed() -> bool:
            return bool(metrics.STORAGE_ERRORS.labels("claim_due")._value.get() > errors_before)

        async with running(fast_worker(app, storage)) as worker:
            await wait_status(storage, first.id, Status.SUCCEEDED)
            await asyncio.to_thread(cluster.stop)  # type: ignore[attr-defined]
            await eventually(claims_failed)  # the worker claims into a dead server
            await asyncio.to_thread(cluster.start)  # type: ignore[attr-defined]
            second = None
            for _ in range(100):  # the pool reconnects; submitting may fail until it has
                try:
                    second = await client.submit("job", 2)
                    break
                except rdq.StorageUnavailable:
                    await asyncio.sleep(0.2)
            assert second is not None
            task = await wait_status(storage, second.id, Status.SUCCEEDED, timeout=60)
            assert worker.in_flight == 0
        # the outage was real: claims failed while the server was down
        assert metrics.STORAGE_ERRORS.labels("claim_due")._value.get() > errors_before
    assert ran == [1, 2]
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCEEDED]
