"""Rows written with bad values by raw SQL (by hand, or by a producer in another language):
each is claimed, read and dead-lettered with ``corrupt`` set, never making an operation raise
and never holding back its neighbours. Values the schema's CHECK constraints refuse are
refused at write time; where a constraint was dropped, the store copes with them too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio

from rdq.spi import Attempt, Envelope, Outcome, Page, Selector, Status, TaskFilter
from rdq_postgres import PostgresStorage

NEIGHBOURS = 20
LEASE = timedelta(seconds=60)

# bad values the schema accepts (so only reading can catch them)
READ_AS_CORRUPT = {
    "retry": """'{"max_attempts":"lots"}'""",
    "headers": """'{"trace":1}'""",
    "attempts": """'[{"number":"one","outcome":"FAILED"}]'""",
    "extra": """'{"id":7,"x-new":[1,2]}'""",  # known names in extra are ignored, not corrupt
}
DEEP = 3000
"""Levels of nesting: deeper than any JSON decoder recurses, not too deep for PostgreSQL."""
_DEEP = "[" * DEEP + "]" * DEEP
# JSON of the type its column holds, nested deeper than the decoder goes
TOO_DEEP = {
    "payload": f"'{_DEEP}'",
    "headers": f"""'{{"h":{_DEEP}}}'""",
    "attempts": f"'[{_DEEP}]'",
    "retry": f"""'{{"max_attempts":{_DEEP}}}'""",
    "extra": f"""'{{"x_new":{_DEEP}}}'""",
}
# times outside the years 1-9999, which no Python datetime holds
FAR_TIMES = {
    "created_at": "'12000-01-01 00:00:00+00'",
    "next_attempt_at": "'-infinity'",  # the task stays due (first of all)
    "completed_at": "'infinity'",
    "cancelled_at": "'0100-01-01 00:00:00+00'::timestamptz - interval '200 years'",
}
# bad values a CHECK constraint refuses: (column, value, constraint)
REFUSED = [
    ("attempts", """'{"x":1}'""", "task_json_check"),
    ("headers", "'[1]'", "task_json_check"),
    ("extra", "'[1,2]'", "task_json_check"),
    ("retry", "'7'", "task_json_check"),
    ("priority", "99", "task_priority_check"),
    ("status", "'PAUSED'", "task_status_check"),
    ("attempt_count", "-1", "task_counts_check"),
    *((column, value, "task_time_range_check") for column, value in FAR_TIMES.items()),
]


@pytest_asyncio.fixture
async def sql(postgres_url: str, schema: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_url)
    try:
        yield conn
    finally:
        await conn.close()


async def _queue_with_a_bad_row(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str, value: str
) -> list[str]:
    """Task ``bad`` (due first) and ``NEIGHBOURS`` intact ones; then ``bad``'s ``column`` set
    to ``value`` by raw SQL. Returns the neighbours' ids."""
    now = await storage.now()
    await storage.enqueue(Envelope(id="bad", queue="q", handler_ref="m:f", payload={"n": 0}))
    await sql.execute(
        f'UPDATE "{storage.config.schema}".task SET next_attempt_at = $1 WHERE id = $2',
        now - timedelta(hours=2),
        "bad",
    )
    ids = [f"n{i:02d}" for i in range(NEIGHBOURS)]
    for n, task_id in enumerate(ids):
        task = Envelope(
            id=task_id,
            queue="q",
            handler_ref="m:f",
            payload={"n": n + 1},
            headers={"h": task_id},
            next_attempt_at=now - timedelta(hours=1) + timedelta(seconds=n),
        )
        await storage.enqueue(task)
    await sql.execute(
        f'UPDATE "{storage.config.schema}".task SET {column} = {value} WHERE id = $1', "bad"
    )
    return ids


def _assert_intact(task: Envelope) -> None:
    assert task.corrupt is None, task.corrupt
    assert task.payload == {"n": int(task.id[1:]) + 1} and task.headers == {"h": task.id}


async def _drain_with_a_poison_row(storage: PostgresStorage, column: str) -> None:
    """A worker's view: batches of 10; the corrupt task is dead-lettered, the rest succeed."""
    batch = await storage.claim_due("q", 10, LEASE, worker_id="w-1")
    assert len(batch) == 10
    by_id = {c.task.id: c for c in batch}
    bad_claim = by_id.pop("bad")
    bad = bad_claim.task
    assert bad.corrupt is not None and f"column {column}" in bad.corrupt, bad.corrupt
    assert (bad.status, bad.claimed_by) == (Status.IN_FLIGHT, "w-1")
    for claimed in by_id.values():
        _assert_intact(claimed.task)
        done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
        await storage.complete(claimed.task.id, claimed.token, done)
    failure = Attempt(
        number=1, outcome=Outcome.PERMANENT, error_type="rdq.CorruptTask", error_message="x"
    )
    await storage.dead_letter("bad", bad_claim.token, failure)
    rest = await storage.claim_due("q", 100, LEASE)
    assert len(rest) == NEIGHBOURS - 9
    for claimed in rest:
        _assert_intact(claimed.task)
    stats = await storage.stats("q")
    assert (stats.in_flight, stats.dlq_depth, stats.succeeded) == (len(rest), 1, 9)


async def _assert_readable(
    storage: PostgresStorage, column: str, *, seen_without_attempts: bool = True
) -> Envelope:
    got = await storage.get("bad")
    assert got.corrupt is not None and f"column {column}" in got.corrupt
    assert (got.id, got.queue, got.status) == ("bad", "q", Status.DEAD)
    for include in (False, True):
        # A page without attempts does not read them, so it cannot see bad attempt records
        # (documented); every other bad value is seen on every page.
        seen = include or seen_without_attempts
        [listed], _ = await storage.dlq_list("q", None, Page(include_attempts=include))
        assert listed.id == "bad" and (listed.corrupt is not None) == seen
        [listed], _ = await storage.list_tasks(
            "q", TaskFilter(status=Status.DEAD), Page(include_attempts=include)
        )
        assert listed.id == "bad" and (listed.corrupt is not None) == seen
    assert [g.count for g in await storage.dlq_groups("q")] == [1]
    return got


@pytest.mark.asyncio
@pytest.mark.parametrize("column", READ_AS_CORRUPT)
async def test_a_row_that_does_not_decode_is_claimed_among_intact_neighbours(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str
) -> None:
    await _queue_with_a_bad_row(storage, sql, column, READ_AS_CORRUPT[column])
    if column == "extra":  # known field names in extra are dropped, not read as corrupt
        task = await storage.get("bad")
        assert task.corrupt is None and task.id == "bad" and task.extra == {"x-new": [1, 2]}
        return
    await _drain_with_a_poison_row(storage, column)
    got = await _assert_readable(storage, column, seen_without_attempts=column != "attempts")
    raw = READ_AS_CORRUPT[column].strip("'")
    if column == "attempts":  # the dead-letter record was appended to the bad one
        raw = raw.removeprefix("[").removesuffix("]")
    assert raw in got.corrupt, "the raw stored value is shown"
    assert await storage.purge("q", Selector.by_ids("bad")) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(("column", "value", "constraint"), REFUSED)
async def test_values_no_reader_can_use_are_refused_at_write_time(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str, value: str, constraint: str
) -> None:
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await _queue_with_a_bad_row(storage, sql, column, value)
    assert refused.value.constraint_name == constraint
    await _drain_intact(storage)


async def _drain_intact(storage: PostgresStorage) -> None:
    claimed = await storage.claim_due("q", 100, LEASE)
    assert len(claimed) == NEIGHBOURS + 1
    assert all(c.task.corrupt is None for c in claimed)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("column", "value"), [(c, v) for c, v, k in REFUSED if k == "task_json_check"]
)
async def test_without_the_json_constraint_a_bad_json_value_still_harms_no_neighbour(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str, value: str
) -> None:
    """As if task_json_check had been dropped (or a value predates it): the row is claimed
    with ``corrupt`` set and dead-lettered; an ``attempts`` value that is not an array is
    moved, raw, to ``quarantine`` when the dead-letter record is appended."""
    await sql.execute(f'ALTER TABLE "{storage.config.schema}".task DROP CONSTRAINT task_json_check')
    await _queue_with_a_bad_row(storage, sql, column, value)
    await _drain_with_a_poison_row(storage, column)
    got = await _assert_readable(storage, column)
    raw = value.strip("'")
    assert raw in got.corrupt
    stored = await sql.fetchrow(
        f"SELECT {column}::text AS value, quarantine::text AS q "
        f'FROM "{storage.config.schema}".task WHERE id = $1',
        "bad",
    )
    if column == "attempts":
        assert stored["q"] == f'{{"attempts":{raw}}}'
        assert [a.error_type for a in got.attempts] == ["rdq.CorruptTask"]
    else:
        assert stored["value"] == raw and stored["q"] is None, "the raw value stays in place"


@pytest.mark.asyncio
async def test_a_lapsed_lease_on_an_attempts_value_that_is_not_an_array_is_reclaimed(
    storage: PostgresStorage, sql: asyncpg.Connection
) -> None:
    """The reclaim appends a LEASE_EXPIRED record: with ``attempts`` not an array (constraint
    dropped) it starts a new array and keeps the raw value in quarantine, and the queue goes
    on."""
    await sql.execute(f'ALTER TABLE "{storage.config.schema}".task DROP CONSTRAINT task_json_check')
    ids = await _queue_with_a_bad_row(storage, sql, "attempts", """'{"x":1}'""")
    [lapsing] = await storage.claim_due("q", 1, timedelta(milliseconds=1), worker_id="w-dead")
    assert lapsing.task.id == "bad" and lapsing.task.lease_expires_at is not None
    while await storage.now() <= lapsing.task.lease_expires_at:
        pass
    batch = await storage.claim_due("q", 100, LEASE, worker_id="w-2")
    by_id = {c.task.id: c.task for c in batch}
    assert set(by_id) == {"bad", *ids}
    bad = by_id["bad"]
    assert bad.corrupt is not None and '{"x":1}' in bad.corrupt
    [record] = bad.attempts
    assert (record.outcome, record.worker_id, record.number) == (
        Outcome.LEASE_EXPIRED,
        "w-dead",
        1,
    )
    for task_id in ids:
        _assert_intact(by_id[task_id])


@pytest.mark.asyncio
@pytest.mark.parametrize("column", TOO_DEEP)
async def test_json_nested_deeper_than_the_decoder_goes_is_read_as_corrupt_among_neighbours(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str
) -> None:
    """The decoder's RecursionError never escapes: the claim hands out its whole batch, the
    bad row with ``corrupt`` set, and every read shows it so."""
    await _queue_with_a_bad_row(storage, sql, column, TOO_DEEP[column])
    await _drain_with_a_poison_row(storage, column)
    got = await _assert_readable(storage, column, seen_without_attempts=column != "attempts")
    assert got.corrupt is not None and "nests deeper than the decoder goes" in got.corrupt
    assert "[[[[" in got.corrupt and len(got.corrupt) < 10_000, "the raw value is shown, cut"
    assert await storage.purge("q", Selector.by_ids("bad")) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("column", FAR_TIMES)
async def test_without_the_time_constraint_a_time_past_the_years_1_to_9999_harms_no_neighbour(
    storage: PostgresStorage, sql: asyncpg.Connection, column: str
) -> None:
    """As if task_time_range_check had been dropped: a time no ``datetime`` holds is read as
    corrupt (naming the column and what it holds), never as an OverflowError or a naive
    time, and its batch is handed out whole."""
    await sql.execute(
        f'ALTER TABLE "{storage.config.schema}".task DROP CONSTRAINT task_time_range_check'
    )
    await _queue_with_a_bad_row(storage, sql, column, FAR_TIMES[column])
    stats = await storage.stats("q")
    assert stats.pending == NEIGHBOURS + 1 and stats.as_of.tzinfo is not None
    await _drain_with_a_poison_row(storage, column)
    got = await _assert_readable(storage, column)
    assert got.corrupt is not None and "outside the years 1-9999" in got.corrupt
    assert getattr(got, column) is None, "a time that does not decode holds its default"
    for at in (got.created_at, got.dead_lettered_at):
        assert at is None or at.tzinfo is not None
    assert await storage.purge("q", Selector.by_ids("bad")) == 1
