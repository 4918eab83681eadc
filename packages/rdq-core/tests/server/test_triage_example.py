"""The triage walkthrough's outage (examples/triage) builds for real on memory and PostgreSQL:
500 dead tasks in three groups, and a redriven group succeeds once the gateway is back."""

from __future__ import annotations

import secrets
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rdq
from rdq.spi import DLQFilter, Selector

from .conftest import wait_until

EXAMPLE = Path(__file__).parents[4] / "examples" / "triage"


@pytest.fixture
def outage() -> Iterator[Any]:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import outage as module

        yield module
    finally:
        sys.path.remove(str(EXAMPLE))


@pytest.fixture(params=["memory", "postgres"])
def storage_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return f"memory://triage-{uuid.uuid4().hex}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_outage_dead_letters_500_tasks_in_three_groups(
    outage: Any, storage_url: str
) -> None:
    from rdq.admin import TaskAdmin

    async with rdq.open_storage(storage_url) as storage:
        await storage.migrate()
        before = {g.handler_ref: g.count for g in await storage.dlq_groups(outage.QUEUE)}
        async with outage.serving(storage, secrets.token_urlsafe(24)):
            await outage.build(storage)
            groups = {
                (g.handler_ref, g.error_type): g.count - before.get(g.handler_ref, 0)
                for g in await storage.dlq_groups(outage.QUEUE)
            }
            assert groups == {
                ("payments.charge_card", "shop.GatewayDown"): 310,
                ("payments.refund", "shop.GatewayTimeout"): 140,
                ("payments.send_receipt", "KeyError"): 50,
            }
            admin = TaskAdmin(storage)
            charges = Selector(
                filter=DLQFilter(handler_ref="payments.charge_card", error_type="shop.GatewayDown")
            )
            # Counted before the redrive: the node's worker starts on redriven tasks at once.
            succeeded = (await storage.stats(outage.QUEUE)).succeeded
            redriven = await admin.redrive(outage.QUEUE, charges, actor="ops", reason="PSP back")
            assert redriven >= 310

            async def drained() -> bool:  # the node's worker runs them on the healthy gateway
                stats = await storage.stats(outage.QUEUE)
                return stats.pending == 0 and stats.in_flight == 0

            await wait_until(drained, timeout=300, what="the redriven tasks to run")
            stats = await storage.stats(outage.QUEUE)
            assert stats.succeeded == succeeded + redriven, stats
            remaining = {g.error_type for g in await storage.dlq_groups(outage.QUEUE)}
            assert remaining == {"shop.GatewayTimeout", "KeyError"}
