"""Bad input and faults: wrong credentials, an unreachable server, a restart mid-run."""

from __future__ import annotations

import asyncio
import socket
import traceback
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from rdq.errors import StorageUnavailable
from rdq.spi import Envelope
from rdq_compliance.servers.postgres import LocalCluster, find_bindir
from rdq_postgres import PostgresStorage


def _wrong_password(url: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}:definitely-wrong@{parts.hostname}:{parts.port}"
    return parts._replace(netloc=netloc).geturl()


@pytest.mark.asyncio
async def test_wrong_credentials_give_one_clear_error(postgres_url: str) -> None:
    parts = urlsplit(postgres_url)
    store = PostgresStorage.from_url(_wrong_password(postgres_url), connect_timeout=30)
    with pytest.raises(StorageUnavailable) as info:
        await store.connect()
    message = str(info.value)
    assert f"{parts.hostname}:{parts.port}" in message
    assert "definitely-wrong" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "asyncpg" not in "".join(traceback.format_exception(info.value))


@pytest.mark.asyncio
async def test_unreachable_server_gives_one_clear_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStorage.from_url(f"postgresql://rdq:pw@127.0.0.1:{port}/rdq")
    with pytest.raises(StorageUnavailable, match=f"127.0.0.1:{port}") as info:
        await store.connect()
    assert "asyncpg" not in "".join(traceback.format_exception(info.value))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("the restart test needs local PostgreSQL binaries (initdb, pg_ctl)")
    with LocalCluster(bindir) as running:
        yield running


@pytest.mark.slow
@pytest.mark.asyncio
async def test_restart_fails_retryably_then_recovers_losing_nothing(cluster: LocalCluster) -> None:
    acknowledged: list[str] = []
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async with PostgresStorage.from_url(cluster.url, pool_max=4) as store:
        await store.migrate()

        async def produce() -> None:
            n = 0
            while not stop.is_set():
                task_id = f"r-{n}"
                try:
                    await store.enqueue(Envelope(id=task_id, queue="restart", handler_ref="h:f"))
                    acknowledged.append(task_id)
                    n += 1
                except StorageUnavailable as exc:
                    errors.append(exc)
                    await asyncio.sleep(0.05)
                except Exception as exc:  # anything else is a defect: record and stop
                    errors.append(exc)
                    return
                await asyncio.sleep(0.005)

        producer = asyncio.create_task(produce())
        try:
            await _until(lambda: len(acknowledged) >= 20)
            await asyncio.to_thread(cluster.restart)
            before = len(acknowledged)
            await _until(lambda: len(acknowledged) >= before + 20, f"{errors!r} {before}")
        finally:
            stop.set()
            await producer

        assert errors, "the restart should have made some operation fail"
        assert all(isinstance(exc, StorageUnavailable) for exc in errors), errors
        stats = await store.stats("restart")
        assert stats.pending >= len(acknowledged)
        for task_id in acknowledged:
            await store.get(task_id)


async def _until(condition: object, why: str = "", timeout: float = 60.0) -> None:
    assert callable(condition)
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached in time {why}")
        await asyncio.sleep(0.02)
