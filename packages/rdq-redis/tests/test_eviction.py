"""A Redis that may evict keys is refused at every open, against real redis-server processes.

Under ``maxmemory`` and an ``allkeys-*`` policy Redis deletes acknowledged tasks and nobody is
told; so the store refuses to open on such a server (worker, client, node and CLI alike),
unless the URL says ``allow_eviction=true`` (then it warns at every open). The policy is read
from CONFIG GET, else INFO memory; where neither answers the store opens with a warning. And
once keys were evicted, the errors say so instead of sending the operator to a migration."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from rdq import Client, Submission, open_storage
from rdq.errors import ConfigError, StorageError
from rdq.spi import Envelope
from rdq_compliance.servers import ServerUnavailable, in_ci
from rdq_compliance.servers.redis import RedisServer, free_port
from rdq_redis._keys import LAYOUT

from .test_layout import write_layout_1

RDQ = str(Path(sys.executable).parent / "rdq")
SAFE = ["noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"]
EVICTING = ["allkeys-lru", "allkeys-lfu", "allkeys-random"]


@contextmanager
def redis_server(*args: str) -> Iterator[RedisServer]:
    """A redis-server of this test's own, with a 20 MB memory limit and ``args``."""
    try:
        server = RedisServer(["--maxmemory", "20mb", *args])
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"no redis-server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(str(exc))
    with server:
        yield server


def new_task(queue: str) -> Envelope:
    return Envelope(id=uuid.uuid4().hex, queue=queue, handler_ref="app:work", payload={"n": 1})


def _assert_refusal(message: str, policy: str) -> None:
    assert f"maxmemory-policy {policy}" in message
    assert "noeviction" in message
    assert "docs/redis.md" in message
    assert "allow_eviction=true" in message


async def _refused(url: str, *command: str) -> bool:
    """True if the server refuses ``command`` (renamed away or forbidden)."""
    raw = aioredis.Redis.from_url(url)
    try:
        await raw.execute_command(*command)
    except aioredis.ResponseError:
        return True
    finally:
        await raw.aclose()
    return False


async def _keys(url: str) -> list[bytes]:
    raw = aioredis.Redis.from_url(url)
    try:
        return list(await raw.keys("*"))
    finally:
        await raw.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("policy", SAFE + EVICTING)
async def test_each_policy_is_judged_when_the_store_opens(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    with redis_server("--maxmemory-policy", policy) as server:
        with caplog.at_level(logging.WARNING, logger="rdq_redis"):
            if policy in EVICTING:
                with pytest.raises(StorageError) as info:
                    async with open_storage(server.url):
                        pass
                _assert_refusal(str(info.value), policy)
                assert await _keys(server.url) == []  # refused before writing anything
            else:
                async with open_storage(server.url) as store:
                    task = new_task("q")
                    assert await store.enqueue(task)
                    assert (await store.get(task.id)).payload == task.payload
        assert [r for r in caplog.records if r.name == "rdq_redis"] == []


def _app_module(directory: Path) -> None:
    (directory / "evict_app.py").write_text(
        "import rdq\n"
        "app = rdq.App()\n\n"
        "@app.handler('h', queue='q')\n"
        "async def h(payload: object) -> None:\n"
        "    pass\n"
    )


def _run(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``rdq ARGS`` as a process of its own."""
    return subprocess.run(
        [RDQ, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


@pytest.mark.asyncio
async def test_the_worker_the_client_the_node_and_the_cli_all_refuse(tmp_path: Path) -> None:
    _app_module(tmp_path)
    with redis_server("--maxmemory-policy", "allkeys-lru") as server:
        with pytest.raises(StorageError) as info:
            async with Client.open(server.url):
                pass
        _assert_refusal(str(info.value), "allkeys-lru")

        env = {
            **os.environ,
            "RDQ_STORAGE": server.url,
            "RDQ_SERVER_TOKENS": "ops:read+submit+admin:0123456789abcdef01234567",
        }
        commands = {
            "worker": [RDQ, "worker", "evict_app:app", "--queue", "q", "--log-format", "json"],
            "node": [RDQ, "server", "--port", str(free_port()), "--log-json"],
            "stats": [RDQ, "stats"],
            "migrate": [RDQ, "migrate"],
            "dlq": [RDQ, "dlq", "list", "q"],
        }
        for name, command in commands.items():
            result = await asyncio.to_thread(_run, env, *command[1:], cwd=tmp_path)
            output = result.stdout + result.stderr
            assert result.returncode != 0, (name, output[-2000:])
            _assert_refusal(output, "allkeys-lru")
        assert await _keys(server.url) == []


@pytest.mark.asyncio
async def test_allow_eviction_opens_and_warns_at_every_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with redis_server("--maxmemory-policy", "allkeys-lfu") as server:
        with caplog.at_level(logging.WARNING, logger="rdq_redis"):
            async with open_storage(f"{server.url}?allow_eviction=true") as store:
                assert await store.enqueue(new_task("q"))
            async with open_storage(server.url, allow_eviction=True) as store:
                assert (await store.stats("q")).pending == 1
        warnings = [r.getMessage() for r in caplog.records if r.name == "rdq_redis"]
        assert len(warnings) == 2
        for warning in warnings:
            assert "allkeys-lfu" in warning and "allow_eviction=true" in warning
            assert "docs/redis.md" in warning
        with pytest.raises(ConfigError) as bad:
            async with open_storage(f"{server.url}?allow_eviction=perhaps"):
                pass
        assert bad.value.key == "allow_eviction"


@pytest.mark.asyncio
@pytest.mark.parametrize("policy", ["allkeys-lru", "noeviction"])
async def test_without_config_the_policy_is_read_from_info(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """CONFIG renamed away, as managed services do: INFO memory still tells the policy."""
    with redis_server("--maxmemory-policy", policy, "--rename-command", "CONFIG", "") as server:
        assert await _refused(server.url, "CONFIG", "GET", "maxmemory-policy")
        with caplog.at_level(logging.WARNING, logger="rdq_redis"):
            if policy in EVICTING:
                with pytest.raises(StorageError) as info:
                    async with open_storage(server.url):
                        pass
                _assert_refusal(str(info.value), policy)
            else:
                async with open_storage(server.url) as store:
                    assert await store.enqueue(new_task("q"))
        assert [r for r in caplog.records if r.name == "rdq_redis"] == []


@pytest.mark.asyncio
async def test_an_acl_that_forbids_config_still_lets_the_policy_be_read() -> None:
    with redis_server("--maxmemory-policy", "allkeys-random") as server:
        admin = aioredis.Redis.from_url(server.url)
        try:
            await admin.execute_command(
                "ACL", "SETUSER", "app", "on", ">app-secret", "~*", "&*", "+@all", "-config"
            )
        finally:
            await admin.aclose()
        url = f"redis://app:app-secret@127.0.0.1:{server.port}/0"
        assert await _refused(url, "CONFIG", "GET", "maxmemory-policy")
        with pytest.raises(StorageError) as info:
            async with open_storage(url):
                pass
        _assert_refusal(str(info.value), "allkeys-random")


@pytest.mark.asyncio
async def test_a_server_that_hides_its_policy_opens_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hidden = ("--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
    with redis_server("--maxmemory-policy", "noeviction", *hidden) as server:
        assert await _refused(server.url, "CONFIG", "GET", "maxmemory-policy")
        assert await _refused(server.url, "INFO", "memory")
        with caplog.at_level(logging.WARNING, logger="rdq_redis"):
            async with open_storage(server.url) as store:
                assert await store.enqueue(new_task("q"))
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "rdq_redis"]
    assert "maxmemory-policy" in warning and "noeviction" in warning
    assert "docs/redis.md" in warning


async def _submit_until_layout_evicted(url: str) -> int:
    """Submit 1.5 kB tasks (``allow_eviction``) until Redis has evicted rdq's layout key, as
    it did in production; return how many were acknowledged."""
    raw = aioredis.Redis.from_url(url)
    acknowledged = 0
    try:
        async with Client.open(f"{url}?allow_eviction=true") as client:
            for batch in range(400):
                await client.submit_many(
                    Submission("h", {"pad": "x" * 1500}, id=f"t{batch}-{i}", queue="q")
                    for i in range(100)
                )
                acknowledged += 100
                if not await raw.exists("rdq:layout"):
                    return acknowledged
    finally:
        await raw.aclose()
    raise AssertionError(f"Redis kept rdq:layout through {acknowledged} tasks")


@pytest.mark.asyncio
async def test_evicted_keys_are_named_as_such_not_as_an_older_layout() -> None:
    with redis_server("--maxmemory-policy", "allkeys-lru") as server:
        acknowledged = await _submit_until_layout_evicted(server.url)
        raw = aioredis.Redis.from_url(server.url)
        try:
            evicted = int((await raw.info("stats"))["evicted_keys"])
            assert evicted > 0
            # The operator fixes the policy; what is left is what rdq is asked about.
            await raw.config_set("maxmemory-policy", "noeviction")
            await raw.config_set("maxmemory", "0")
            left = await raw.keys("*")
            env = {**os.environ, "RDQ_STORAGE": server.url}
            for command in (["stats", "q"], ["migrate"]):
                result = await asyncio.to_thread(_run, env, *command)
                output = result.stdout + result.stderr
                assert result.returncode == 1, output
                assert "rdq:layout is missing" in output
                assert "evicted" in output and "has evicted" in output
                assert "do not run `rdq migrate`" in output
                assert "key layout 1 of an older rdq-redis" not in output
            assert sorted(await raw.keys("*")) == sorted(left)  # migrate changed nothing

            # The way out the error names: the version back, and rdq serves what is left.
            await raw.set("rdq:layout", str(LAYOUT))
            async with open_storage(server.url) as store:
                pending = (await store.stats("q")).pending
                assert 0 < pending <= acknowledged
        finally:
            await raw.aclose()


@pytest.mark.asyncio
async def test_an_older_layout_on_a_server_that_evicted_says_both() -> None:
    """Keys with no version and no newer key are layout 1; if the server has evicted keys,
    the error says that too, since that is what a stripped current layout looks like."""
    with redis_server("--maxmemory-policy", "allkeys-lru") as server:
        await _submit_until_layout_evicted(server.url)
        raw = aioredis.Redis.from_url(server.url)
        try:
            await raw.config_set("maxmemory-policy", "noeviction")
            await raw.config_set("maxmemory", "0")
            prefix = f"old-{uuid.uuid4().hex[:8]}"
            await write_layout_1(raw, prefix, "q")
        finally:
            await raw.aclose()
        with pytest.raises(StorageError) as info:
            async with open_storage(f"{server.url}?prefix={prefix}") as store:
                await store.stats("q")
        message = str(info.value)
        assert "key layout 1 of an older rdq-redis" in message
        assert "has evicted" in message and "migrating would be wrong" in message


@pytest.mark.asyncio
async def test_on_a_cluster_every_primary_is_asked(redis_cluster_url: str) -> None:
    cluster = aioredis.RedisCluster.from_url(redis_cluster_url.split("?")[0])
    try:
        await cluster.initialize()
        last = cluster.get_primaries()[-1]
        await cluster.config_set("maxmemory-policy", "allkeys-lru", target_nodes=last)
        try:
            with pytest.raises(StorageError) as info:
                async with open_storage(redis_cluster_url):
                    pass
            _assert_refusal(str(info.value), "allkeys-lru")
        finally:
            await cluster.config_set("maxmemory-policy", "noeviction", target_nodes=last)
        async with open_storage(redis_cluster_url) as store:
            assert await store.enqueue(new_task("q"))
    finally:
        await cluster.aclose()
