"""The PyMongo client, the collections rdq uses, what the server can do and its clock."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pymongo
from pymongo import AsyncMongoClient
from pymongo.errors import ConfigurationError, PyMongoError

from rdq.errors import ConfigError, StorageUnavailable
from rdq_mongo._errors import translate_errors
from rdq_mongo._url import MongoConfig

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.asynchronous.database import AsyncDatabase

__all__ = ["Connection", "Document", "close_connection", "open_connection", "server_now"]

Document = dict[str, Any]


@dataclass
class Connection:
    """An open client and what the store learnt about the server when it connected."""

    client: AsyncMongoClient[Document]
    database: AsyncDatabase[Document]
    tasks: AsyncCollection[Document]
    audit: AsyncCollection[Document]
    controls: AsyncCollection[Document]
    """One document per queue that has control records (``_controls``)."""
    workers: AsyncCollection[Document]
    counts: AsyncCollection[Document]
    dedup: AsyncCollection[Document]
    """One document per dedup key: its holder, and until when (``_admission``)."""
    transactions: bool
    """The server runs multi-document transactions (a replica-set member or mongos)."""
    change_streams: bool
    """Change streams may be used for ``wait_due`` (the server has them and the URL allows)."""
    orders: dict[str, tuple[float, Any]] = field(default_factory=dict)
    """Admission's reads of the queues' claim orders: queue -> (monotonic time until which it
    is reused, ``ClaimOrder``) (``_controls.admission_orders``)."""


async def open_connection(config: MongoConfig) -> Connection:
    """Create the client and prove that the server answers and accepts the credentials;
    ``StorageUnavailable`` otherwise, ``ConfigError`` for options PyMongo rejects."""
    with translate_errors(config.where):
        try:
            client: AsyncMongoClient[Document] = AsyncMongoClient(
                config.driver_url, **config.client_options
            )
        except ConfigurationError as exc:
            if "DNS" in str(exc):
                raise StorageUnavailable(f"cannot resolve {config.where}: {exc}") from exc
            raise ConfigError(str(exc), key="storage") from exc
        database = client[config.database]
        tasks = database[config.tasks_collection]
        try:
            with pymongo.timeout(config.timeout):
                hello = await client.admin.command("hello")
                # hello needs no login: a read proves the credentials and the permissions.
                await tasks.find_one({"_id": ""}, projection={"_id": 1})
        except BaseException:
            await _close(client, config.timeout)
            raise
    replicated = bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"
    return Connection(
        client=client,
        database=database,
        tasks=tasks,
        audit=database[config.audit_collection],
        controls=database[config.controls_collection],
        workers=database[config.workers_collection],
        counts=database[config.counts_collection],
        dedup=database[config.dedup_collection],
        transactions=replicated and hello.get("logicalSessionTimeoutMinutes") is not None,
        change_streams=replicated and config.notify,
    )


async def close_connection(connection: Connection, timeout: float) -> None:
    """Close the client within ``timeout`` seconds; never raises (a server that is gone or
    frozen has nothing left to release)."""
    await _close(connection.client, timeout)


async def server_now(connection: Connection) -> datetime:
    """The server's clock, from its ``hello`` reply (millisecond precision, the precision of
    ``$$NOW``). Driver errors propagate."""
    reply = await connection.database.command("hello")
    local: datetime = reply["localTime"]
    return local if local.tzinfo is not None else local.replace(tzinfo=UTC)


async def _close(client: AsyncMongoClient[Document], timeout: float) -> None:
    with contextlib.suppress(PyMongoError, OSError), pymongo.timeout(timeout):
        await client.close()
