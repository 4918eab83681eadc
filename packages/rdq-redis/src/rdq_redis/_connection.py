"""The redis-py client of a store (one server, a Cluster, or the master named by Sentinels),
and the scripts registered with it and run.

On one server or behind Sentinels its connections send commands the cheaper way of
:mod:`rdq_redis._sending`; on Cluster they are redis-py's own.

redis-py's ``register_script`` calls a script by SHA (``EVALSHA``) and loads it again after
``NOSCRIPT`` (a restarted or failed-over server has an empty script cache), so the text
(:func:`rdq_redis._queries.script_source`) crosses the wire only when needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from rdq_redis._errors import translate_errors
from rdq_redis._queries import SCRIPT_NAMES, script_source
from rdq_redis._sending import cheap_send
from rdq_redis._url import RedisConfig

__all__ = ["Client", "Connection", "LiveClient", "Scripts", "open_connection"]

Client = Redis | RedisCluster
LiveClient = Callable[[], Client]
"""An open store's client, looked up at each use (``NotConnected`` once the store closed)."""


class Connection:
    """A connected client, and the Sentinel clients behind it (closed with it)."""

    def __init__(self, client: Client, sentinel: Any = None) -> None:
        self.client = client
        self._sentinel = sentinel

    async def aclose(self) -> None:
        await self.client.aclose()
        if self._sentinel is not None:
            for node in self._sentinel.sentinels:
                await node.aclose()


async def open_connection(config: RedisConfig) -> Connection:
    """Build the client ``config`` describes and check that the server answers;
    ``StorageUnavailable`` (naming the address) when it does not."""
    # No driver-level retries: a retried EVALSHA whose first reply was lost could run a
    # script twice. Errors surface as StorageUnavailable and the engine backs off.
    retry = Retry(NoBackoff(), 0)
    sentinel: Any = None
    client: Client
    if config.sentinel_master:
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
            config.sentinels, sentinel_kwargs=config.sentinel_options
        )
        client = sentinel.master_for(
            config.sentinel_master, redis_class=Redis, retry=retry, **config.client_options
        )
    elif config.cluster:
        client = RedisCluster.from_url(config.url, retry=retry, **config.client_options)
    else:
        client = Redis.from_url(config.url, retry=retry, **config.client_options)
    if isinstance(client, Redis):
        pool = client.connection_pool
        pool.connection_class = cheap_send(pool.connection_class)
    connection = Connection(client, sentinel)
    try:
        with translate_errors(config.address):
            if isinstance(client, RedisCluster):
                await client.initialize()
            await client.ping()
    except BaseException:
        await connection.aclose()
        raise
    return connection


class Scripts:
    """Every script, registered with one client: ``await scripts.run("stats", keys, args)``."""

    def __init__(self, client: Any, address: str) -> None:
        self._client = client
        self._address = address
        self.by_name = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run script ``name``; driver errors become ``rdq.errors`` (see ``translate_errors``)."""
        script = self.by_name[name]
        with translate_errors(self._address):
            try:
                return await script(keys=keys, args=args)
            except NoScriptError:
                # redis-py reloaded the script and the server lost it again before the call (a
                # flush or failover in between, or a Cluster node that missed the load): send
                # the text itself once. EVAL runs it exactly like EVALSHA would.
                return await self._client.eval(script.script, len(keys), *keys, *args)

    async def load_all(self) -> None:
        """Load every script into the server's cache (``SCRIPT LOAD`` is idempotent)."""
        with translate_errors(self._address):
            for script in self.by_name.values():
                script.sha = await self._client.script_load(script.script)
