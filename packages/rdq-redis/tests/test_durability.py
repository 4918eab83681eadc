"""With AOF and ``appendfsync always``, every acknowledged change survives a kill -9 of Redis."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import RedisServer

LEASE = timedelta(minutes=10)


def new_task(queue: str, **fields: Any) -> Envelope:
    return Envelope(id=f"t-{uuid.uuid4().hex}", queue=queue, handler_ref="tests:noop", **fields)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_every_acknowledged_change_survives_a_kill_9_with_aof_always() -> None:
    try:
        server = RedisServer(["--appendonly", "yes", "--appendfsync", "always"])
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no redis-server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(str(exc))
    queue = "durable"
    expected: dict[str, tuple[Status, int]] = {}
    with server:
        async with open_storage(server.url) as store:
            for _ in range(40):
                task = new_task(queue, payload={"kind": "single"})
                assert await store.enqueue(task) is True
                expected[task.id] = (Status.PENDING, 0)
            batch = [new_task(queue, payload={"kind": "batch"}) for _ in range(60)]
            assert await store.enqueue_batch(batch) == [True] * 60
            expected |= {t.id: (Status.PENDING, 0) for t in batch}

            claimed = await store.claim_due(queue, 80, LEASE)
            assert len(claimed) == 80
            for i, claim in enumerate(claimed):
                task_id, token = claim.task.id, claim.token
                if i < 20:
                    await store.complete(
                        task_id, token, Attempt(number=1, outcome=Outcome.SUCCEEDED)
                    )
                    expected[task_id] = (Status.SUCCEEDED, 1)
                elif i < 40:
                    await store.dead_letter(
                        task_id, token, Attempt(number=1, outcome=Outcome.PERMANENT)
                    )
                    expected[task_id] = (Status.DEAD, 1)
                elif i < 60:
                    await store.reschedule(
                        task_id,
                        token,
                        Attempt(number=1, outcome=Outcome.FAILED),
                        claim.task.lease_expires_at + timedelta(hours=1),  # type: ignore[operator]
                    )
                    expected[task_id] = (Status.PENDING, 1)
                else:
                    expected[task_id] = (Status.IN_FLIGHT, 0)

        server.kill()  # SIGKILL: no shutdown save; only the AOF remains
        server.start()

        async with open_storage(server.url) as store:
            for task_id, (status, attempts) in expected.items():
                task = await store.get(task_id)
                assert (task.status, len(task.attempts)) == (status, attempts), task_id
            stats = await store.stats(queue)
            assert (stats.pending, stats.in_flight, stats.dlq_depth, stats.succeeded) == (
                40,
                20,
                20,
                20,
            )
