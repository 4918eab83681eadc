"""The URL options and the plugin registration."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit, urlunsplit

import pytest

from rdq import open_storage
from rdq.errors import ConfigError
from rdq.spi import Envelope, bounds
from rdq_mongo import MongoStorage
from rdq_mongo._url import parse_url


def with_param(url: str, name: str, value: str) -> str:
    """``url`` with one more query parameter."""
    parts = urlsplit(url)
    query = f"{parts.query}&{name}={value}" if parts.query else f"{name}={value}"
    return urlunsplit(parts._replace(query=query))


def test_database_and_prefix_come_from_the_url_and_rdq_params_are_stripped() -> None:
    parsed = parse_url("mongodb://u:p@h1:1,h2:2/jobs?rdq_prefix=app_&w=majority")
    assert parsed.database == "jobs"
    assert parsed.tasks_collection == "app_tasks"
    assert parsed.where == "h1:1,h2:2"
    assert parsed.driver_url == "mongodb://u:p@h1:1,h2:2/jobs?w=majority"


def test_defaults_are_database_rdq_and_prefix_rdq_() -> None:
    parsed = parse_url("mongodb+srv://cluster.example.net")
    assert (parsed.database, parsed.tasks_collection) == ("rdq", "rdq_tasks")


@pytest.mark.parametrize(
    "url",
    [
        "mongodb://h/db?rdq_bogus=1",
        "mongodb://h/db?rdq_prefix=bad-prefix",
        "mongodb:///db",
        "mongodb://h/bad.name",
        "redis://h/0",
    ],
)
def test_bad_urls_raise_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


def test_registered_for_both_schemes_without_importing_pymongo_eagerly() -> None:
    assert isinstance(open_storage("mongodb://127.0.0.1:1/x"), MongoStorage)
    assert isinstance(open_storage("mongodb+srv://cluster.example.net/x"), MongoStorage)
    assert "rdq_mongo._plugin" in sys.modules


@pytest.mark.asyncio
async def test_prefix_names_the_collection(database_url: str) -> None:
    async with open_storage(with_param(database_url, "rdq_prefix", "other_")) as storage:
        assert isinstance(storage, MongoStorage)
        await storage.migrate()
        await storage.enqueue(Envelope(id="p1", queue="q", handler_ref="a:b"))
        database = storage._connection().database
        assert await database["other_tasks"].count_documents({"_id": "p1"}) == 1
        assert "rdq_tasks" not in await database.list_collection_names()
        await database.client.drop_database(database.name)


@pytest.mark.asyncio
async def test_migrate_is_idempotent(database_url: str) -> None:
    async with open_storage(database_url) as storage:
        assert isinstance(storage, MongoStorage)
        await storage.migrate()
        await storage.migrate()
        names = {index["name"] async for index in await storage._connection().tasks.list_indexes()}
        assert names == {
            "_id_",
            "rdq_claim_by_handler",
            "rdq_in_flight_by_key",
            "rdq_by_status_time",
            "rdq_claim_by_group",
        }
        await storage._connection().client.drop_database(storage.config.database)


@pytest.mark.asyncio
async def test_migrate_names_the_steps_it_applied_and_none_once_up_to_date(
    database_url: str,
) -> None:
    async with open_storage(database_url) as storage:
        assert isinstance(storage, MongoStorage)
        try:
            assert await storage.migrate() == [
                "create collection rdq_tasks",
                "create collection rdq_audit",
                "create collection rdq_controls",
                "create collection rdq_workers",
                "create collection rdq_counts",
                "create collection rdq_dedup",
                "create index rdq_tasks.rdq_claim_by_handler",
                "create index rdq_tasks.rdq_in_flight_by_key",
                "create index rdq_tasks.rdq_by_status_time",
                "create index rdq_tasks.rdq_claim_by_group",
                "create index rdq_audit.rdq_audit_time",
                "create index rdq_audit.rdq_audit_queue_time",
                "create index rdq_workers.rdq_workers_seen",
                "create index rdq_counts.rdq_counts_queue_minute",
                "create index rdq_counts.rdq_counts_minute",
            ]
            assert await storage.migrate() == []
        finally:
            await storage._connection().client.drop_database(storage.config.database)


def test_timeout_is_rdqs_own_option_and_never_reaches_pymongo() -> None:
    parsed = parse_url("mongodb://h/db?timeout=2.5&w=majority")
    assert parsed.timeout == 2.5
    assert parsed.driver_url == "mongodb://h/db?w=majority"
    assert parse_url("mongodb://h/db", timeout=3).timeout == 3.0
    assert "timeout" not in parse_url("mongodb://h/db", timeout=3).client_options
    assert parse_url("mongodb://h/db").timeout == bounds.DEFAULT_OPERATION_TIMEOUT


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_timeout_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_url(f"mongodb://h/db?timeout={value}")
    assert caught.value.key == "timeout"


def test_rdq_defaults_for_pymongo_yield_to_the_urls_own() -> None:
    defaults = parse_url("mongodb://h/db").client_options
    assert defaults["serverSelectionTimeoutMS"] == 5000 and defaults["tz_aware"] is True
    given = parse_url("mongodb://h/db?serverselectiontimeoutms=900").client_options
    assert "serverSelectionTimeoutMS" not in given
