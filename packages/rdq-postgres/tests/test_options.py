"""URL options, plugin registration, the PgBouncer switch and cross-connection wake-ups."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from rdq import open_storage
from rdq.errors import ConfigError
from rdq.spi import Attempt, Envelope, Outcome, Status, bounds
from rdq_postgres import PostgresStorage, parse_url


def test_rdq_options_are_taken_out_of_the_url_and_the_rest_kept() -> None:
    config = parse_url(
        "postgres://u:p@db:6432/app?schema=jobs&pool_min=0&pool_max=3"
        "&statement_cache_size=0&notify=off&sslmode=disable"
    )
    assert config.dsn == "postgresql://u:p@db:6432/app?sslmode=disable"
    assert (config.schema, config.pool_min, config.pool_max) == ("jobs", 0, 3)
    assert config.statement_cache_size == 0 and config.notify is False
    assert "u:p" not in repr(config)


def test_the_operation_timeout_defaults_and_is_set_by_url_or_keyword() -> None:
    assert parse_url("postgresql://db/app").timeout == bounds.DEFAULT_OPERATION_TIMEOUT
    assert parse_url("postgresql://db/app?timeout=2.5").timeout == 2.5
    assert parse_url("postgresql://db/app?command_timeout=4").timeout == 4  # the older name
    assert parse_url("postgresql://db/app", timeout=None).timeout == 10
    config = parse_url("postgresql://db/app?timeout=3&server_timeout=off&connect_timeout=1")
    assert (config.timeout, config.server_timeout, config.connect_timeout) == (3, False, 1)
    assert "timeout" not in config.dsn


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "inf", "nan", ""])
def test_a_bad_timeout_names_it(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_url(f"postgresql://db/app?timeout={bad}")
    assert info.value.key == "timeout"


def test_the_notify_interval_defaults_to_5_ms_and_reaches_the_announcer() -> None:
    assert parse_url("postgresql://db/app").notify_interval == 0.005
    assert parse_url("postgresql://db/app?notify_interval=0").notify_interval == 0
    store = PostgresStorage.from_url("postgresql://db/app?notify_interval=0.05")
    assert store._announcer._interval == 0.05


def test_keywords_override_the_url() -> None:
    assert parse_url("postgresql://db/app?pool_max=3", pool_max=7).pool_max == 7


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("postgresql://db/app?pool_max=many", "pool_max"),
        ("postgresql://db/app?schema=bad-name", "schema"),
        ("postgresql://db/app?pool_min=5&pool_max=2", "pool_max"),
        ("postgresql://db/app?notify=perhaps", "notify"),
        ("postgresql://db/app?notify_interval=-1", "notify_interval"),
        ("postgresql://db/app?notify_interval=inf", "notify_interval"),
        ("postgresql://db/app?notify_interval=often", "notify_interval"),
    ],
)
def test_bad_options_name_the_key(url: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_url(url)
    assert info.value.key == key


def test_unknown_keyword_is_refused() -> None:
    with pytest.raises(ConfigError, match="pool_size"):
        PostgresStorage.from_url("postgresql://db/app", pool_size=3)


@pytest.mark.asyncio
async def test_both_schemes_open_through_rdq(postgres_url: str, schema: str) -> None:
    for scheme in ("postgresql", "postgres"):
        url = postgres_url.replace("postgresql", scheme, 1) + f"?schema={schema}"
        async with open_storage(url) as store:
            assert isinstance(store, PostgresStorage)
            await store.migrate()
            assert (await store.stats("q")).pending == 0


@pytest.mark.asyncio
async def test_without_prepared_statement_cache_for_pgbouncer(
    postgres_url: str, schema: str
) -> None:
    url = f"{postgres_url}?schema={schema}&statement_cache_size=0&notify=false"
    async with PostgresStorage.from_url(url) as store:
        await store.migrate()
        assert store.capabilities().notify is False
        for n in range(3):
            await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="m:f"))
            (claim,) = await store.claim_due("q", 1, timedelta(seconds=30))
            await store.complete(
                claim.task.id, claim.token, Attempt(number=1, outcome=Outcome.SUCCEEDED)
            )
        assert (await store.stats("q")).succeeded == 3


class DueReads:
    """Counts the ``wait_due`` calls of ``storage`` that have registered as waiters and read
    their queue's next due time: from then on only a NOTIFY, that due time or the timeout
    ends them (a task enqueued before that read is found due at once, without a NOTIFY)."""

    def __init__(self, storage: PostgresStorage, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._changed = asyncio.Condition()
        listener = storage._listener
        wait = listener.wait

        async def counted(queue: str, timeout: float, next_due: Any) -> bool:
            async def read() -> Any:
                found = await next_due()
                async with self._changed:
                    self.count += 1
                    self._changed.notify_all()
                return found

            return await wait(queue, timeout, read)

        monkeypatch.setattr(listener, "wait", counted)

    async def reached(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.count >= count), 30)


@pytest.mark.asyncio
async def test_wait_due_wakes_on_an_enqueue_from_another_process_connection(
    storage: PostgresStorage, postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = DueReads(storage, monkeypatch)
    async with PostgresStorage.from_url(postgres_url, schema=schema) as producer:
        assert await storage.wait_due("wake", 0.01) is False  # the LISTEN connection is up
        waiter = asyncio.create_task(storage.wait_due("wake", 60))
        await reads.reached(2)  # the waiter found nothing due and waits for a NOTIFY
        assert not waiter.done()
        await producer.enqueue(Envelope(id="w1", queue="wake", handler_ref="m:f"))
        assert await waiter is True  # a timeout would return False after 60 s
    assert (await storage.get("w1")).status == Status.PENDING


@pytest.mark.asyncio
async def test_an_idle_enqueue_wakes_waiters_by_its_own_commit_a_busy_one_by_the_announcer(
    storage: PostgresStorage, postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = DueReads(storage, monkeypatch)
    async with PostgresStorage.from_url(postgres_url, schema=schema) as producer:
        announcer = producer._announcer
        sent: list[list[str]] = []
        gate = asyncio.Event()
        notify = announcer._send

        async def gated_send(queues: list[str]) -> None:
            await gate.wait()
            sent.append(queues)
            await notify(queues)

        monkeypatch.setattr(announcer, "_send", gated_send)
        assert await storage.wait_due("wake", 0.01) is False  # the LISTEN connection is up
        waiter = asyncio.create_task(storage.wait_due("wake", 60))
        await reads.reached(2)
        await producer.enqueue(Envelope(id="idle", queue="wake", handler_ref="m:f"))
        assert await waiter is True
        assert sent == [], "the idle enqueue left its NOTIFY to a transaction of its own"

        announcer.announce(["elsewhere"])  # a NOTIFY in flight, held at the gate
        await asyncio.sleep(0)
        waiter = asyncio.create_task(storage.wait_due("wake2", 60))
        await reads.reached(3)
        await producer.enqueue(Envelope(id="busy", queue="wake2", handler_ref="m:f"))
        await asyncio.sleep(0.2)
        assert not waiter.done(), "two notifying transactions of one store at once"
        gate.set()
        assert await waiter is True
        assert sent == [["elsewhere"], ["wake2"]]


@pytest.mark.asyncio
async def test_wait_due_times_out_false_and_wakes_when_a_delayed_task_is_due(
    storage: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = DueReads(storage, monkeypatch)
    assert await storage.wait_due("idle", 0.1) is False
    # a waiter that found nothing due sees the enqueue's own announcement go by: the
    # wait below can only end at the delayed task's due time
    announced = asyncio.create_task(storage.wait_due("idle", 60))
    await reads.reached(2)
    await storage.enqueue(
        Envelope(id="later", queue="idle", handler_ref="m:f"), delay=timedelta(seconds=0.5)
    )
    assert await announced is True
    assert await storage.wait_due("idle", 60) is True
    assert [c.task.id for c in await storage.claim_due("idle", 5, timedelta(seconds=5))] == [
        "later"
    ]


def test_a_pooler_refusing_the_statement_timeout_is_told_how_to_connect() -> None:
    from rdq.errors import StorageUnavailable
    from rdq_postgres._errors import translate_errors

    refused = asyncpg.exceptions.ProtocolViolationError(
        "unsupported startup parameter: statement_timeout"
    )
    with pytest.raises(StorageUnavailable, match="server_timeout=false"), translate_errors("h:1"):
        raise refused
