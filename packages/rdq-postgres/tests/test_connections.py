"""How many PostgreSQL connections one ``rdq worker`` holds: at most the sizing guide's
``pool_max + 1 + min(pool_max, 2)`` (its pool, the LISTEN connection, the lease thread's
store), counted in ``pg_stat_activity`` while 50 long handlers run (docs/sizing.md)."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

import rdq
from rdq.spi import Page, Status, TaskFilter
from rdq_postgres import PostgresStorage

RDQ = str(Path(sys.executable).parent / "rdq")
POOL_MAX = 5
HANDLERS = 50
LEASE = 3.0
"""Short, so that the lease thread renews every lease every second while the count runs."""

APP = textwrap.dedent(
    f"""
    import asyncio
    import rdq

    app = rdq.App()
    # more slots than tasks: the claim loop also waits for new tasks (LISTEN) meanwhile
    app.queue("long", lease={LEASE}, timeout=600, concurrency={HANDLERS + 10})

    @app.handler("hold", queue="long")
    async def hold(payload, ctx):
        await asyncio.sleep(3600)
    """
)


@pytest_asyncio.fixture
async def monitor(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def held_by(monitor: asyncpg.Connection, tag: str) -> list[asyncpg.Record]:
    statement = "SELECT pid, state, left(query, 50) AS query FROM pg_stat_activity"
    return await monitor.fetch(f"{statement} WHERE application_name = $1", tag)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_worker_with_50_long_handlers_holds_no_more_connections_than_the_guide_says(
    postgres_url: str, schema: str, monitor: asyncpg.Connection, tmp_path: Path
) -> None:
    tag = f"rdq-conn-{secrets.token_hex(4)}"  # names this worker's connections, and only them
    separator = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{separator}schema={schema}&pool_max={POOL_MAX}&application_name={tag}"
    app = rdq.App()
    app.queue("long")

    @app.handler("hold", queue="long")
    async def hold(payload: object, ctx: object) -> None: ...

    async with PostgresStorage.from_url(url) as store:
        await store.migrate()
    async with rdq.Client.open(url, app=app) as client:
        for n in range(HANDLERS):
            await client.submit("hold", {"n": n}, id=f"long-{n}")
    (tmp_path / "long_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if k not in ("RDQ_STORAGE", "RDQ_STORAGE_URL")}
    worker = await asyncio.create_subprocess_exec(
        RDQ, "worker", "long_app:app", "--storage", url, "--log-level", "WARNING",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    peak: list[asyncpg.Record] = []
    listened = False
    try:
        async with PostgresStorage.from_url(url.replace(tag, "rdq-test")) as store:
            deadline = time.monotonic() + 60
            while (await store.stats("long")).in_flight < HANDLERS:
                assert time.monotonic() < deadline, "the worker did not start all 50 handlers"
                await asyncio.sleep(0.1)
            first_leases = await leases(store)
            # count for four lease periods: every lease is renewed about once a second
            counting = time.monotonic() + 4 * LEASE
            while time.monotonic() < counting:
                rows = await held_by(monitor, tag)
                listened = listened or any(row["query"].startswith("LISTEN") for row in rows)
                if len(rows) > len(peak):
                    peak = rows
                await asyncio.sleep(0.01)
            renewed = await leases(store)
        assert worker.returncode is None, "the worker stopped"
    finally:
        if worker.returncode is None:
            worker.kill()  # the handlers never end: no grace period to wait out
        await worker.wait()

    assert all(renewed[i] > first_leases[i] for i in first_leases), "leases were not renewed"
    assert listened, "the worker never listened: the LISTEN connection went uncounted"
    bound = POOL_MAX + 1 + min(POOL_MAX, 2)
    shown = "\n".join(f"  {row['pid']} {row['state']}: {row['query']!r}" for row in peak)
    assert len(peak) <= bound, f"{len(peak)} connections at the peak, more than {bound}:\n{shown}"


async def leases(store: PostgresStorage) -> dict[str, object]:
    tasks, _ = await store.list_tasks(
        "long", TaskFilter(status=Status.IN_FLIGHT), Page(limit=HANDLERS)
    )
    return {task.id: task.lease_expires_at for task in tasks}
