"""Redis behind Sentinel: the store finds the master through the Sentinels and follows a
failover, with retryable errors in between."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from rdq import open_storage
from rdq.errors import ConfigError, StorageUnavailable
from rdq.spi import Attempt, Envelope, Outcome
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import RedisSentinelSetup
from rdq_redis._url import parse_url

PATIENCE = 60.0
LEASE = timedelta(minutes=5)


def new_task(queue: str) -> Envelope:
    return Envelope(id=f"t-{uuid.uuid4().hex}", queue=queue, handler_ref="tests:noop")


@pytest.fixture
def sentinel_setup() -> Iterator[RedisSentinelSetup]:
    try:
        setup = RedisSentinelSetup()
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no redis-server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(str(exc))
    with setup:
        yield setup


def test_a_sentinel_url_names_every_sentinel_and_the_master_credentials() -> None:
    config = parse_url(
        "redis://app:s3cret@s1:26379,s2,s3:26380/2?sentinel_master=jobs"
        "&sentinel_password=spw&socket_timeout=3&prefix=p&timeout=4"
    )
    assert config.sentinels == [("s1", 26379), ("s2", 26379), ("s3", 26380)]
    assert config.sentinel_master == "jobs"
    assert config.prefix == "p"
    assert config.client_options["db"] == 2
    assert config.client_options["username"] == "app"
    assert config.client_options["password"] == "s3cret"
    assert config.client_options["socket_timeout"] == 3.0
    assert config.sentinel_options == {
        "socket_timeout": 3.0,
        "socket_connect_timeout": 4.0,
        "password": "spw",
    }
    assert config.timeout == 4.0
    assert config.address == "jobs via Sentinel s1:26379,s2:26379,s3:26380"


@pytest.mark.parametrize(
    "url",
    [
        "redis://s1:26379/0?sentinel_master=m&cluster=true",
        "redis://s1:notaport/0?sentinel_master=m",
        "redis:///0?sentinel_master=m",
    ],
)
def test_a_bad_sentinel_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


@pytest.mark.asyncio
async def test_the_store_works_through_sentinel(sentinel_setup: RedisSentinelSetup) -> None:
    async with open_storage(sentinel_setup.url) as store:
        await store.migrate()
        task = new_task("q")
        assert await store.enqueue(task) is True
        (claimed,) = await store.claim_due("q", 1, LEASE)
        await store.complete(task.id, claimed.token, Attempt(number=1, outcome=Outcome.SUCCEEDED))
        assert (await store.stats("q")).succeeded == 1
        assert await store.wait_due("q", 0.05) is False


@pytest.mark.asyncio
async def test_an_unknown_master_name_is_one_clear_error(
    sentinel_setup: RedisSentinelSetup,
) -> None:
    url = sentinel_setup.url.replace("sentinel_master=mymaster", "sentinel_master=nosuch")
    with pytest.raises(StorageUnavailable, match="nosuch"):
        async with open_storage(url):
            pass


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_store_follows_a_failover(sentinel_setup: RedisSentinelSetup) -> None:
    queue = "failover"
    async with open_storage(sentinel_setup.url) as store:
        before = [new_task(queue) for _ in range(20)]
        await store.enqueue_batch(before)
        await _replicated(sentinel_setup)

        sentinel_setup.primary.kill()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PATIENCE
        unavailable = 0
        while True:
            # Called first, right after the kill: the Sentinel takes a second (down-after)
            # before it even starts a failover, so this sees the outage.
            try:
                await store.stats(queue)
            except StorageUnavailable:
                unavailable += 1
            if sentinel_setup.master_port() == sentinel_setup.replica.port:
                break
            assert loop.time() < deadline, "the Sentinel never promoted the replica"
            await asyncio.sleep(0.1)
        assert unavailable > 0  # the outage showed as retryable errors, nothing else

        async def claims_again() -> int | None:
            try:
                return len(await store.claim_due(queue, 100, LEASE))
            except StorageUnavailable:
                return None

        while (claimed := await claims_again()) is None:
            assert loop.time() < deadline, "the store never reached the new master"
            await asyncio.sleep(0.1)
        assert claimed == len(before)  # they were replicated before the failover
        assert await store.enqueue(new_task(queue)) is True


async def _replicated(setup: RedisSentinelSetup) -> None:
    """Wait until the replica acknowledged every write so far (Redis's WAIT)."""
    primary = aioredis.Redis(host="127.0.0.1", port=setup.primary.port)
    try:
        assert await primary.execute_command("WAIT", 1, int(PATIENCE * 1000)) == 1
    finally:
        await primary.aclose()
