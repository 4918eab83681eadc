"""The redis-py client of a store: one server, a Cluster, or the master named by Sentinels.

redis-py bounds a command's send with ``asyncio.wait_for``, which on Python 3.11 wraps the
send in a task of its own and resumes the caller one turn of the event loop later: a quarter
to a third of the client's CPU for a short script call. The connections of a store on one
server or behind Sentinels bound it with ``asyncio.timeout`` instead (see :class:`TimedSend`);
everything else, the reply's bound included, is redis-py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from redis import exceptions as rx
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from rdq_redis._errors import translate_errors
from rdq_redis._url import RedisConfig

__all__ = ["Client", "Connection", "LiveClient", "open_connection"]

Client = Redis | RedisCluster
LiveClient = Callable[[], Client]
"""An open store's client, looked up at each use (``NotConnected`` once the store closed)."""


class TimedSend(AbstractConnection):
    """A redis-py connection whose send is bounded by ``socket_timeout`` through
    ``asyncio.timeout`` (no task per command). Connecting and the health check keep their own
    bounds; a send that runs out of time drops the connection and raises redis-py's
    ``TimeoutError``, as redis-py's own send does."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        timeout = self.socket_timeout
        if not timeout:
            return await super().send_packed_command(command, check_health)
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        # redis-py's send, without its wait_for: only this send runs on the connection now
        # (a command's reply is read after it), so nothing reads the cleared socket_timeout
        self.socket_timeout = None
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health=False)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise rx.TimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


_TIMED: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def timed_send(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` with :class:`TimedSend`'s send (one class per driver class)."""
    if issubclass(connection_class, TimedSend):
        return connection_class
    if connection_class not in _TIMED:
        name = f"TimedSend{connection_class.__name__}"
        _TIMED[connection_class] = type(name, (TimedSend, connection_class), {})
    return _TIMED[connection_class]


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

        sentinel = Sentinel(  # type: ignore[no-untyped-call]
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
        pool.connection_class = timed_send(pool.connection_class)
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
