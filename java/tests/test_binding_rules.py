"""The Java binding keeps the rules every binding of the schema keeps (docs/postgres-schema.md,
"Rules for every binding"), read and written side by side with rdq's Python plugin."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from rdq import open_storage
from rdq.errors import ControlConflict, StorageError
from rdq.spi import Attempt, Control, Counts, Envelope, Outcome, Storage, WorkerInfo
from rdq_java_bridge import BridgeServer, JavaBridgeStorage

from .conftest import drop_schema

LEASE = timedelta(seconds=60)
DAY = timedelta(hours=24)


@pytest_asyncio.fixture
async def sql(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def fresh_schema(postgres_url: str) -> Iterator[str]:
    name = f"java_{secrets.token_hex(4)}"
    yield name
    drop_schema(postgres_url, name)


@pytest_asyncio.fixture
async def both(
    postgres_url: str, fresh_schema: str, bridge: BridgeServer
) -> AsyncIterator[tuple[Storage, Storage]]:
    """The Java binding and the Python plugin on one migrated schema."""
    java = JavaBridgeStorage.from_url(
        f"java+{postgres_url}?schema={fresh_schema}&bridge={bridge.socket}"
    )
    async with java, open_storage(f"{postgres_url}?schema={fresh_schema}") as python:
        assert await java.migrate() == [
            "0001_task_table",
            "0002_id_conflict",
            "0003_second_revision",
            "0004_time_range",
            "0005_flow_control",
            "0006_claim_order",
            "0007_claim_function",
            "0008_claim_plan",
            "0009_claim_plan_statistics",
            "0010_lapsed_lease_slots",
            "0011_dedup_keys",
            "0012_payload_refs",
            "0013_claim_costs",
            "0014_claim_floor",
            "0015_wide_stripes",
            "0016_one_count",
            "0017_lease_floor",
            "0018_rate_buckets",
            "0019_controlled_claim_plan",
            "0020_limit_claims_side_by_side",
        ]
        assert await java.migrate() == []
        yield java, python


def zone_changing_within_the_hour(now: datetime) -> str:
    """A POSIX time zone, UTC until the next full hour after ``now`` and an hour ahead from
    then on (for half a year)."""
    change = now + timedelta(hours=1)
    day = change.timetuple().tm_yday - 1  # zero-based, counting 29 February
    return f"XST0XDT,{day}/{change.hour},{(day + 180) % 365}/0"


@pytest.mark.asyncio
async def test_a_day_long_lease_and_delay_are_24_hours_across_a_daylight_saving_change(
    postgres_url: str, fresh_schema: str, bridge: BridgeServer, sql: asyncpg.Connection
) -> None:
    role, password = f"tz_{secrets.token_hex(4)}", secrets.token_hex(8)
    zone = zone_changing_within_the_hour(await sql.fetchval("SELECT now()"))
    await sql.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    try:
        await sql.execute(f"ALTER ROLE {role} SET TimeZone = '{zone}'")
        parts = urlsplit(postgres_url)
        netloc = f"{role}:{password}@{parts.hostname}:{parts.port}"
        url = urlunsplit(parts._replace(netloc=netloc))
        probe = await asyncpg.connect(url)
        try:
            calendar_day = await probe.fetchval("SELECT now() + interval '1 day' - now()")
        finally:
            await probe.close()
        assert calendar_day == timedelta(hours=23), "the role's zone springs forward in the hour"

        java_url = f"java+{url}?schema={fresh_schema}&bridge={bridge.socket}"
        async with JavaBridgeStorage.from_url(java_url) as java:
            await java.migrate()
            await java.enqueue(Envelope(id="delayed", queue="q", handler_ref="h"), delay=2 * DAY)
            delayed = await java.get("delayed")
            assert delayed.next_attempt_at is not None and delayed.created_at is not None
            assert delayed.next_attempt_at - delayed.created_at == 2 * DAY
            await java.enqueue(Envelope(id="leased", queue="q", handler_ref="h"))
            (claimed,) = await java.claim_due("q", 1, DAY)
            assert claimed.task.lease_expires_at is not None
            assert claimed.task.claimed_at is not None
            assert claimed.task.lease_expires_at - claimed.task.claimed_at == DAY
            before = await java.now()
            expires = await java.extend_lease("leased", claimed.token, DAY)
            assert before + DAY <= expires <= await java.now() + DAY
    finally:
        await sql.execute(f'DROP SCHEMA IF EXISTS "{fresh_schema}" CASCADE')
        await sql.execute(f"DROP OWNED BY {role}")
        await sql.execute(f"DROP ROLE {role}")


@pytest.mark.asyncio
async def test_java_writes_attempt_times_in_utc_with_z_to_the_microsecond(
    both: tuple[Storage, Storage], sql: asyncpg.Connection, fresh_schema: str
) -> None:
    java, python = both
    await java.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    (claimed,) = await java.claim_due("q", 1, LEASE)
    failed = Attempt(
        number=1,
        outcome=Outcome.FAILED,
        started_at=datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))),
        finished_at=datetime(2026, 1, 2, 3, 4, 6, 120000, tzinfo=UTC),
    )
    await java.reschedule("t", claimed.token, failed, await java.now())
    stored = await sql.fetchval(f'SELECT attempts::text FROM "{fresh_schema}".task')
    assert '"started_at":"2026-01-02T03:04:05Z"' in stored, stored
    assert '"finished_at":"2026-01-02T03:04:06.120000Z"' in stored, stored
    assert (await python.get("t")).attempts == [failed]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "written",
    [
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.000000Z",
        "2026-01-02T03:04:05.1234567Z",
        "2026-01-02t03:04:05.25z",
        "2026-01-02 05:04:05+02:00",
        "2026-01-02T00:34:05-0230",
        "2026-01-02T03:04:05",
        "2026-01-02T03:04Z",
    ],
)
async def test_java_reads_every_attempt_time_as_python_does(
    both: tuple[Storage, Storage], sql: asyncpg.Connection, fresh_schema: str, written: str
) -> None:
    java, python = both
    await python.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    await sql.execute(
        f'UPDATE "{fresh_schema}".task SET attempts = $1::json, attempt_count = 1',
        f'[{{"number":1,"outcome":"FAILED","started_at":"{written}"}}]',
    )
    by_python, by_java = await python.get("t"), await java.get("t")
    assert (by_java.corrupt is None) == (by_python.corrupt is None), (by_python, by_java)
    if by_python.corrupt is None:
        assert by_java.attempts[0].started_at == by_python.attempts[0].started_at
    else:
        assert "attempts" in (by_java.corrupt or "")


@pytest.mark.asyncio
async def test_unknown_keys_in_retry_and_attempt_records_are_ignored_and_stay_in_the_row(
    both: tuple[Storage, Storage], sql: asyncpg.Connection, fresh_schema: str
) -> None:
    java, _ = both
    await java.enqueue(Envelope(id="t", queue="q", handler_ref="h"))
    await sql.execute(
        f'UPDATE "{fresh_schema}".task SET retry = $1::json, attempts = $2::json, '
        "attempt_count = 1",
        '{"max_attempts":3,"jitter":"full"}',
        '[{"number":1,"outcome":"FAILED","x-trace":{"span":7}}]',
    )
    task = await java.get("t")
    assert task.corrupt is None
    assert task.retry is not None and task.retry.max_attempts == 3
    assert [(a.number, a.outcome) for a in task.attempts] == [(1, Outcome.FAILED)]
    (claimed,) = await java.claim_due("q", 1, LEASE)
    await java.complete("t", claimed.token, Attempt(number=2, outcome=Outcome.SUCCEEDED))
    row = await sql.fetchrow(
        f'SELECT retry::text AS retry, attempts::text AS attempts FROM "{fresh_schema}".task'
    )
    assert row["retry"] == '{"max_attempts":3,"jitter":"full"}'
    assert row["attempts"].startswith('[{"number":1,"outcome":"FAILED","x-trace":{"span":7}},')


async def _schema_at_version_1(conn: asyncpg.Connection, schema: str) -> None:
    """``schema`` as rdq's first release left it: migration 0001 only."""
    from rdq_postgres._queries import Queries, migrations

    channel = f"{schema}_due"
    await conn.execute(Queries(schema, channel).script("migrate_prepare"))
    version, name, text = migrations(schema, channel)[0]
    await conn.execute(text)
    await conn.execute(
        f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES ($1, $2)', version, name
    )


@pytest.mark.asyncio
async def test_on_an_older_schema_java_connects_says_to_migrate_and_migrates(
    postgres_url: str, fresh_schema: str, bridge: BridgeServer, sql: asyncpg.Connection
) -> None:
    await _schema_at_version_1(sql, fresh_schema)
    await sql.execute(
        f'INSERT INTO "{fresh_schema}".task (id, queue, handler_ref, payload, status, '
        "next_attempt_at) VALUES ('old', 'q', 'h', '[1]', 'PENDING', now())"
    )
    java_url = f"java+{postgres_url}?schema={fresh_schema}&bridge={bridge.socket}"
    async with JavaBridgeStorage.from_url(java_url) as java:
        with pytest.raises(StorageError, match="rdq migrate"):
            await java.claim_due("q", 1, LEASE)
        with pytest.raises(StorageError, match="rdq migrate"):
            await java.get("old")
        assert await java.migrate() == [
            "0002_id_conflict",
            "0003_second_revision",
            "0004_time_range",
            "0005_flow_control",
            "0006_claim_order",
            "0007_claim_function",
            "0008_claim_plan",
            "0009_claim_plan_statistics",
            "0010_lapsed_lease_slots",
            "0011_dedup_keys",
            "0012_payload_refs",
            "0013_claim_costs",
            "0014_claim_floor",
            "0015_wide_stripes",
            "0016_one_count",
            "0017_lease_floor",
            "0018_rate_buckets",
            "0019_controlled_claim_plan",
            "0020_limit_claims_side_by_side",
        ]
        assert await java.migrate() == []
        (claimed,) = await java.claim_due("q", 1, LEASE, worker_id="w")
        assert (claimed.task.id, claimed.task.payload, claimed.task.claimed_by) == ("old", [1], "w")


@pytest.mark.asyncio
async def test_keys_controls_workers_and_counts_are_the_same_rows_in_both_languages(
    both: tuple[Storage, Storage],
) -> None:
    """Contract version 3 across the bindings: keys either writes the other reads; a control
    either writes holds back the other's claims and is fenced on one version; workers and
    counts either records the other lists."""
    java, python = both
    await python.enqueue(Envelope(id="py", queue="q", handler_ref="h", keys=["dep:x", "t:ä"]))
    await java.enqueue_batch([Envelope(id="jv", queue="q", handler_ref="h", keys=["dep:x"])])
    await java.enqueue(Envelope(id="free", queue="q", handler_ref="h"))
    assert (await java.get("py")).keys == ["dep:x", "t:ä"]
    assert (await python.get("jv")).keys == ["dep:x"]
    paused = await python.put_control(
        Control(queue="q", key="dep:x", paused=True, state={"by": "py"}), expected_version=0
    )
    assert [c.task.id for c in await java.claim_due("q", 10, LEASE)] == ["free"]
    with pytest.raises(ControlConflict) as caught:
        await java.put_control(Control(queue="q", key="dep:x"), expected_version=0)
    assert caught.value.found is not None and caught.value.found.state == {"by": "py"}
    gated = await java.put_control(
        Control(queue="q", key="dep:x", gate=1), expected_version=paused.version
    )
    assert gated.version == 2
    (claimed,) = await python.claim_due("q", 10, LEASE)
    assert claimed.task.id in ("py", "jv") and claimed.task.keys[0] == "dep:x"
    (listed,) = await java.list_controls("q")
    assert (listed.gate, listed.version, listed.in_use) == (0, 2, 1)
    await java.heartbeat_worker(WorkerInfo(id="jv-worker", queues=["q"], extra={"lang": "java"}))
    (worker,) = [w for w in await python.list_workers() if w.id == "jv-worker"]
    assert (worker.queues, worker.extra) == (["q"], {"lang": "java"})
    minute = datetime(2031, 5, 6, 7, 8, tzinfo=UTC)
    await java.add_counts([Counts(queue="q", minute=minute, succeeded=2)])
    await python.add_counts([Counts(queue="q", minute=minute, succeeded=1, deferred=4)])
    assert await java.read_counts("q", minute) == [
        Counts(queue="q", minute=minute, succeeded=3, deferred=4)
    ]


@pytest.mark.asyncio
async def test_a_queue_python_makes_fair_and_aged_is_claimed_in_that_order_by_java(
    both: tuple[Storage, Storage],
) -> None:
    """Contract version 4 across the bindings: the `*` control's fair and aging that either
    writes the other lists, and Java's claims follow them."""
    java, python = both
    now = await python.now()
    deep = [
        Envelope(
            id=f"deep-{n}",
            queue="fq",
            handler_ref="h",
            keys=["tenant:deep"],
            next_attempt_at=now - timedelta(seconds=600 - n),
        )
        for n in range(6)
    ]
    shallow = Envelope(
        id="shallow",
        queue="fq",
        handler_ref="h",
        keys=["tenant:shallow"],
        next_attempt_at=now - timedelta(seconds=1),
    )
    await python.enqueue_batch([*deep, shallow])
    written = await python.put_control(
        Control(queue="fq", key="*", fair="tenant:", aging=30.0), expected_version=0
    )
    (listed,) = await java.list_controls("fq")
    assert (listed.fair, listed.aging, listed.version) == ("tenant:", 30.0, written.version)
    assert [c.task.id for c in await java.claim_due("fq", 3, LEASE)] == [
        "deep-0",
        "shallow",
        "deep-1",
    ]
    strict = await java.put_control(Control(queue="fq", key="*"), expected_version=1)
    (seen,) = await python.list_controls("fq")
    assert (seen.fair, seen.aging, seen.version) == (None, None, strict.version)


@pytest.mark.asyncio
async def test_a_dedup_key_is_one_key_for_both_languages(both: tuple[Storage, Storage]) -> None:
    """A key Python gave a task holds against Java's admissions, and the other way round: one
    table, one function (admit_task(), migration 0011) for both."""
    from rdq.errors import DedupConflict
    from rdq.spi import AdmitOutcome, Dedup, DedupMode, Envelope

    java, python = both
    first = Envelope(id="py-1", queue="q", handler_ref="h", payload={"v": 1})
    assert (await python.admit(first, Dedup(key="order-1"))).outcome == AdmitOutcome.ADDED
    second = Envelope(id="java-1", queue="q", handler_ref="h", payload={"v": 2})
    replaced = await java.admit(second, Dedup(key="order-1", mode=DedupMode.REPLACE))
    assert (replaced.outcome, replaced.task_id) == (AdmitOutcome.REPLACED, "py-1")
    assert (await python.get("py-1")).payload == {"v": 2}
    with pytest.raises(DedupConflict):
        await python.admit(
            Envelope(id="py-2", queue="other", handler_ref="h"), Dedup(key="order-1")
        )
    java_first = Envelope(id="java-2", queue="q", handler_ref="h")
    assert (await java.admit(java_first, Dedup(key="order-2"))).outcome == AdmitOutcome.ADDED
    skipped = await python.admit(
        Envelope(id="py-3", queue="q", handler_ref="h"), Dedup(key="order-2")
    )
    assert (skipped.outcome, skipped.task_id) == (AdmitOutcome.SKIPPED, "java-2")
