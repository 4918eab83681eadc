"""The operation timeout: against a frozen server (every process of the cluster stopped with
SIGSTOP) each operation raises ``StorageUnavailable`` after about ``timeout`` seconds instead
of hanging, and the store recovers once the server runs again. ``migrate`` and
``wait_due``'s own wait are exempt."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rdq.errors import StorageUnavailable
from rdq.spi import Attempt, Envelope, Outcome, Page, Status, TaskFilter
from rdq_compliance.servers.postgres import LocalCluster, find_bindir
from rdq_postgres import PostgresStorage

TIMEOUT = 1.0
ALLOWED = 3 * TIMEOUT + 1  # scheduling slack on a busy machine; a hang would take forever


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("freezing a server needs local PostgreSQL binaries (initdb, pg_ctl)")
    with LocalCluster(bindir) as running:
        yield running


def _cluster_pids(cluster: LocalCluster) -> list[int]:
    postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def frozen(cluster: LocalCluster) -> Iterator[None]:
    """Every process of the cluster stopped (SIGSTOP) for the block, then continued."""
    pids = _cluster_pids(cluster)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


Operation = Callable[[PostgresStorage], Awaitable[object]]

OPERATIONS: dict[str, Operation] = {
    "enqueue": lambda s: s.enqueue(Envelope(id="x", queue="q", handler_ref="m:f")),
    "enqueue_batch": lambda s: s.enqueue_batch([Envelope(id="y", queue="q", handler_ref="m:f")]),
    "claim_due": lambda s: s.claim_due("q", 10, timedelta(seconds=30)),
    "complete": lambda s: s.complete("t", "tok", Attempt(number=1, outcome=Outcome.SUCCEEDED)),
    "get": lambda s: s.get("t"),
    "list_tasks": lambda s: s.list_tasks("q", TaskFilter(status=Status.PENDING), Page()),
    "dlq_list": lambda s: s.dlq_list("q", None, Page()),
    "stats": lambda s: s.stats("q"),
    "list_queues": lambda s: s.list_queues(),
    "now": lambda s: s.now(),
    "purge_succeeded": lambda s: s.purge_succeeded("q", datetime.now(UTC)),
}


@pytest.mark.asyncio
async def test_a_frozen_server_makes_every_operation_unavailable_within_the_timeout(
    cluster: LocalCluster,
) -> None:
    url = f"{cluster.url}?schema=frozen&timeout={TIMEOUT}&pool_max=3"
    async with PostgresStorage.from_url(url) as store:
        await store.migrate()
        await store.enqueue(Envelope(id="t", queue="q", handler_ref="m:f"))
        with frozen(cluster):
            for name, operation in OPERATIONS.items():
                started = time.monotonic()
                with pytest.raises(StorageUnavailable, match="timeout") as raised:
                    await operation(store)
                took = time.monotonic() - started
                assert took < ALLOWED, f"{name} took {took:.1f} s"
                assert "asyncpg" not in str(raised.value)
            fresh = PostgresStorage.from_url(url)
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await fresh.connect()  # a new connection is bounded too
            assert time.monotonic() - started < ALLOWED
        # the server runs again: so does the store
        assert (await store.get("t")).id == "t"
        assert (await store.stats("q")).pending >= 1


@pytest.mark.asyncio
async def test_the_wait_for_a_free_connection_counts_against_the_timeout(
    cluster: LocalCluster,
) -> None:
    url = f"{cluster.url}?schema=busy&timeout={TIMEOUT}&pool_max=1"
    async with PostgresStorage.from_url(url) as store:
        await store.migrate()
        async with store._db.pool.connection():  # the pool's only connection, kept busy
            started = time.monotonic()
            with pytest.raises(StorageUnavailable, match="operation timeout"):
                await store.stats("q")
            took = time.monotonic() - started
        assert TIMEOUT * 0.9 <= took < ALLOWED
        assert (await store.stats("q")).pending == 0  # the connection is free again


@pytest.mark.asyncio
async def test_the_server_stops_a_statement_at_the_timeout_too(cluster: LocalCluster) -> None:
    url = f"{cluster.url}?schema=frozen&timeout={TIMEOUT}"
    async with PostgresStorage.from_url(url) as store:
        async with store._db.pool.connection() as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "1s"
        async with store._db.unbounded() as conn:  # migrate's: no limit
            assert await conn.fetchval("SHOW statement_timeout") == "0"
    quiet = PostgresStorage.from_url(url, server_timeout=False)  # PgBouncer: nothing sent
    async with quiet, quiet._db.pool.connection() as conn:
        assert await conn.fetchval("SHOW statement_timeout") == "0"


@pytest.mark.asyncio
async def test_wait_due_waits_past_the_operation_timeout(cluster: LocalCluster) -> None:
    url = f"{cluster.url}?schema=frozen&timeout=0.5"
    async with PostgresStorage.from_url(url) as store:
        await store.migrate()
        started = time.monotonic()
        assert await store.wait_due("idle", 1.5) is False
        assert time.monotonic() - started >= 1.5
