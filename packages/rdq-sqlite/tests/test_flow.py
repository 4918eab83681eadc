"""Claims through control records on SQLite, beyond what the kit sees: a queue without controls
is claimed with the statements it always was; tasks a control holds back are held out of the
claim index (a deep backlog is passed over once, not by every claim) and come back in claim
order; ``wait_due`` does not report tasks the controls would skip."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rdq.spi import (
    QUEUE_KEY,
    Attempt,
    Control,
    Envelope,
    Outcome,
    Page,
    Status,
    TaskFilter,
    handler_key,
)
from rdq_sqlite import SqliteStorage, _admission, _claims, _controls, _notify
from rdq_sqlite._migrate import apply_migrations
from rdq_sqlite._queries import SQL

LEASE = timedelta(minutes=5)
A, B = "m:a", "m:b"


async def fill(
    store: SqliteStorage,
    count: int,
    prefix: str,
    handler: str = A,
    keys: Sequence[str] = (),
    priority: int = 0,
    queue: str = "q",
) -> list[str]:
    """``count`` tasks, each due a microsecond after the one before (ids sort as they do)."""
    ids = [f"{prefix}{n:05d}" for n in range(count)]
    for task_id in ids:  # one by one: each is due at its own store time
        await store.enqueue(
            Envelope(
                id=task_id, queue=queue, handler_ref=handler, keys=list(keys), priority=priority
            )
        )
    return ids


async def fill_batch(store: SqliteStorage, count: int, prefix: str, handler: str = A) -> None:
    await store.enqueue_batch(
        [Envelope(id=f"{prefix}{n:05d}", queue="q", handler_ref=handler) for n in range(count)]
    )


async def claim_ids(store: SqliteStorage, limit: int = 100, queue: str = "q") -> list[str]:
    return [c.task.id for c in await store.claim_due(queue, limit, LEASE)]


async def put(store: SqliteStorage, control: Control) -> Control:
    found = {c.key: c for c in await store.list_controls(control.queue)}.get(control.key)
    return await store.put_control(control, expected_version=0 if found is None else found.version)


def held(database: Path, key: str | None = None) -> int:
    conn = sqlite3.connect(database)
    try:
        if key is None:
            query = "SELECT count(*) FROM task WHERE held IS NOT NULL AND due_at IS NOT NULL"
            return int(conn.execute(query).fetchone()[0])
        query = "SELECT count(*) FROM task WHERE held = ? AND due_at IS NOT NULL"
        return int(conn.execute(query, (key,)).fetchone()[0])
    finally:
        conn.close()


def done(number: int = 1) -> Attempt:
    at = datetime.now(UTC)
    return Attempt(number=number, outcome=Outcome.SUCCEEDED, started_at=at, finished_at=at)


@pytest.fixture
def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The id of every candidate a claim through controls looked at."""
    seen: list[str] = []
    real = _claims._Stream.rows

    def rows(self: Any, priority: int, first: int) -> Iterator[Any]:
        for candidate in real(self, priority, first):
            seen.append(candidate[1])
            yield candidate

    monkeypatch.setattr(_claims._Stream, "rows", rows)
    return seen


# --- the claim without controls -----------------------------------------------------------------


class Recorder:
    """A connection that records the statement of every call (by its ``sql/`` file name)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.names = {text: name for name, text in SQL._all.items()}
        self.ran: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.ran.append(self.names.get(sql, sql))
        return self.conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.ran.append(self.names.get(sql, sql))
        return self.conn.executemany(sql, *args)


@pytest.fixture
def conn(database: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    apply_migrations(conn, str(database))
    tasks = [Envelope(id=f"t{n}", queue="q", handler_ref=A) for n in range(3)]
    _admission.enqueue(conn, tasks, 0)
    conn.execute("COMMIT")
    yield conn
    conn.close()


def test_a_queue_without_controls_is_claimed_with_the_statements_it_always_was(
    conn: sqlite3.Connection,
) -> None:
    recorder = Recorder(conn)
    conn.execute("BEGIN IMMEDIATE")
    claimed = _claims.claim(recorder, "q", 2, 10**6, None)  # type: ignore[arg-type]
    conn.execute("COMMIT")
    assert [c.task.id for c in claimed] == ["t0", "t1"]
    # the clock read (which also tells the queue has no controls), the clock's write, one
    # seek per priority and the candidates, the lease: nothing else
    assert recorder.ran == [
        "claim_clock",
        "clock_write",
        "claim_next_priority",
        "claim_candidates",
        "claim_pending",
    ]


def test_a_queue_with_a_control_is_claimed_through_it(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    _controls.put_control(conn, Control(queue="q", key=handler_key(A), gate=1), 0)
    recorder = Recorder(conn)
    claimed = _claims.claim(recorder, "q", 2, 10**6, None)  # type: ignore[arg-type]
    conn.execute("COMMIT")
    assert [c.task.id for c in claimed] == ["t0"]
    assert "queue_controls" in recorder.ran and "take_gate" in recorder.ran


# --- held tasks -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_deep_backlog_behind_a_paused_handler_is_passed_over_once(
    store: SqliteStorage, database: Path, rows_read: list[str]
) -> None:
    await fill_batch(store, 3000, "a")  # due first
    flowing = await fill(store, 5, "b", handler=B)
    await put(store, Control(queue="q", key=handler_key(A), paused=True))

    assert await claim_ids(store, 5) == flowing, "held-back tasks never block the others"
    assert held(database, handler_key(A)) == 3000
    assert len(rows_read) < 100, "the claim that met the backlog held it in one statement"

    rows_read.clear()
    more = await fill(store, 5, "c", handler=B)
    assert await claim_ids(store, 5) == more
    assert sorted(rows_read) == more, "later claims do not look at the held backlog at all"
    assert (await store.stats("q")).pending == 3000, "held tasks are PENDING as before"

    await put(store, Control(queue="q", key=handler_key(A), paused=False))
    assert held(database) == 0, "lifting every limit releases the held tasks at once"
    first = await claim_ids(store, 10)
    assert first == [f"a{n:05d}" for n in range(10)], "in their claim order"


@pytest.mark.asyncio
async def test_a_gate_opened_over_held_tasks_lets_the_oldest_through(
    store: SqliteStorage, database: Path
) -> None:
    ids = await fill(store, 60, "a")
    await put(store, Control(queue="q", key=handler_key(A), paused=True))
    assert await claim_ids(store) == []
    assert held(database, handler_key(A)) == 60
    await put(store, Control(queue="q", key=handler_key(A), gate=3))  # a half-open breaker
    assert held(database) == 60, "a gate still limits: the tasks stay held"
    assert await claim_ids(store, 10) == ids[:3]
    assert await claim_ids(store, 10) == []
    (control,) = await store.list_controls("q")
    assert control.gate == 0 and control.in_use == 3


@pytest.mark.asyncio
async def test_tasks_held_by_a_full_concurrency_limit_are_claimed_as_slots_free(
    store: SqliteStorage, database: Path
) -> None:
    ids = await fill(store, 50, "p", keys=["psp"])
    await put(store, Control(queue="q", key="psp", concurrency=2))
    first = await store.claim_due("q", 10, LEASE)
    assert [c.task.id for c in first] == ids[:2]
    assert held(database, "psp") == 48
    await store.complete(first[0].task.id, first[0].token, done())
    assert await claim_ids(store, 10) == [ids[2]], "the freed slot takes the oldest held task"
    assert await claim_ids(store, 10) == []


@pytest.mark.asyncio
async def test_claim_order_holds_across_held_tasks_and_the_claim_index(
    store: SqliteStorage,
) -> None:
    await put(store, Control(queue="q", key=handler_key(A), concurrency=0))
    (a1,) = await fill(store, 1, "a1-", handler=A)
    (b1,) = await fill(store, 1, "b1-", handler=B)
    (a2,) = await fill(store, 1, "a2-", handler=A, priority=5)
    (b2,) = await fill(store, 1, "b2-", handler=B, priority=5)
    (a3,) = await fill(store, 1, "a3-", handler=A)
    assert await claim_ids(store, 1) == [b2], "A's tasks held, B's most urgent claimed"
    (b3,) = await fill(store, 1, "b3-", handler=B)
    await put(store, Control(queue="q", key=handler_key(A), concurrency=10))
    # A's tasks come from task_held, B's from the claim index: one order
    assert await claim_ids(store, 10) == [a2, a1, b1, a3, b3]


@pytest.mark.asyncio
async def test_deleting_a_control_releases_its_tasks_and_the_queue_claims_as_before(
    store: SqliteStorage, database: Path, rows_read: list[str]
) -> None:
    ids = await fill(store, 40, "a")
    paused = await put(store, Control(queue="q", key=handler_key(A), paused=True))
    assert await claim_ids(store) == []
    assert held(database) == 40
    assert await store.delete_control("q", handler_key(A), expected_version=paused.version)
    assert held(database) == 0
    rows_read.clear()
    assert await claim_ids(store) == ids
    assert rows_read == [], "no controls, no held tasks: the claim of a queue without controls"


@pytest.mark.asyncio
async def test_a_task_held_by_one_key_moves_to_the_next_that_holds_it_back(
    store: SqliteStorage, database: Path
) -> None:
    ids = await fill(store, 3, "k", keys=["x", "y"])
    await put(store, Control(queue="q", key="x", paused=True))
    await put(store, Control(queue="q", key="y", concurrency=5))
    assert await claim_ids(store) == []
    assert held(database, "x") == 3
    await put(store, Control(queue="q", key="y", paused=True))
    await put(store, Control(queue="q", key="x"))  # limits nothing: released
    assert await claim_ids(store) == []
    assert held(database, "y") == 3
    await put(store, Control(queue="q", key="y", gate=2))
    assert await claim_ids(store) == ids[:2]
    assert held(database, "y") == 1


@pytest.mark.asyncio
async def test_a_held_task_whose_control_is_gone_is_still_claimed(
    store: SqliteStorage, database: Path
) -> None:
    """A hand edit (or a control deleted by a tool) leaves a task held under a key without a
    control: the claim still finds it."""
    ids = await fill(store, 2, "t")
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("UPDATE task SET held = 'ghost' WHERE id = ?", (ids[0],))
    conn.close()
    assert await claim_ids(store) == ids


@pytest.mark.asyncio
async def test_a_claim_holds_back_at_most_max_skips_and_the_next_goes_on(
    store: SqliteStorage, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_claims, "MAX_SKIPS", 10)
    monkeypatch.setattr(_claims, "HOLD_ALL_AFTER", 1000)
    await fill_batch(store, 25, "a")
    (free,) = await fill(store, 1, "b", handler=B)
    await put(store, Control(queue="q", key=handler_key(A), paused=True))
    assert await claim_ids(store) == []
    assert held(database) == 10
    assert await claim_ids(store) == []
    assert await claim_ids(store) == [free]


@pytest.mark.asyncio
async def test_a_claim_holds_a_bounded_number_of_tasks_however_deep_the_backlog(
    store: SqliteStorage, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_claims, "HOLD_ALL_AFTER", 4)
    monkeypatch.setattr(_claims, "HOLD_CHUNK", 30)
    monkeypatch.setattr(_claims, "MAX_SKIPS", 12)
    await fill_batch(store, 200, "a")
    (free,) = await fill(store, 1, "b", handler=B)
    await put(store, Control(queue="q", key=handler_key(A), paused=True))
    before, claims = 0, 0
    while not (claimed := await claim_ids(store)):
        now_held = held(database)
        assert 0 < now_held - before <= 30 + 12, "each claim holds a bounded number"
        before, claims = now_held, claims + 1
    assert claimed == [free]
    assert claims >= 200 // 42 and held(database) == 200


# --- in_use, keys ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_in_use_counts_live_leases_of_the_queue_and_of_a_handler(
    store: SqliteStorage,
) -> None:
    await fill(store, 3, "a", handler=A, keys=["k"])
    await fill(store, 2, "b", handler=B)
    for key in (QUEUE_KEY, handler_key(A), handler_key(B), "k", "unused"):
        await put(store, Control(queue="q", key=key, concurrency=10))
    claimed = await store.claim_due("q", 4, LEASE)
    assert len(claimed) == 4
    in_use = {c.key: c.in_use for c in await store.list_controls("q")}
    assert in_use == {QUEUE_KEY: 4, handler_key(A): 3, handler_key(B): 1, "k": 3, "unused": 0}
    await store.complete(claimed[0].task.id, claimed[0].token, done())
    in_use = {c.key: c.in_use for c in await store.list_controls("q")}
    assert in_use[QUEUE_KEY] == 3 and in_use[handler_key(A)] == 2


@pytest.mark.asyncio
async def test_keys_are_kept_by_import_and_listings(store: SqliteStorage) -> None:
    at = datetime.now(UTC)
    task = Envelope(id="imp", queue="q", handler_ref=A, status=Status.DEAD, keys=["d:1", "t:1"])
    task.created_at = task.dead_lettered_at = at
    assert await store.import_tasks([task]) == [True]
    (dead,), _ = await store.dlq_list("q", None, Page(limit=10))
    assert dead.keys == ["d:1", "t:1"]
    (listed,), _ = await store.list_tasks("q", TaskFilter(status=Status.DEAD), Page(limit=10))
    assert listed.keys == ["d:1", "t:1"]


@pytest.mark.asyncio
async def test_spoiled_keys_make_a_corrupt_task_that_is_still_claimed_through_controls(
    store: SqliteStorage, database: Path
) -> None:
    await fill(store, 1, "bad", keys=["k"])
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("UPDATE task SET keys = '{not json' WHERE id = 'bad00000'")
    conn.close()
    task = await store.get("bad00000")
    assert task.corrupt is not None and task.corrupt.startswith("keys:")
    await put(store, Control(queue="q", key="k", paused=True))  # it has no readable keys
    await put(store, Control(queue="q", key=handler_key(A), concurrency=5))
    (claimed,) = await store.claim_due("q", 10, LEASE)
    assert claimed.task.id == "bad00000" and claimed.task.corrupt is not None
    assert {c.key: c.in_use for c in await store.list_controls("q")}[handler_key(A)] == 1


# --- wait_due -------------------------------------------------------------------------------------


async def due(store: SqliteStorage, queue: str = "q") -> tuple[int, int | None]:
    now, at, _ = await store._read(_notify.next_due, queue)
    return now, at


@pytest.mark.asyncio
async def test_wait_due_does_not_report_a_paused_queue_and_wakes_when_it_resumes(
    store: SqliteStorage,
) -> None:
    await fill(store, 3, "t")
    paused = await put(store, Control(queue="q", key=QUEUE_KEY, paused=True))
    assert (await due(store))[1] is None
    started = time.monotonic()
    assert await store.wait_due("q", 0.2) is False, "nothing is claimable: no spin"
    assert time.monotonic() - started >= 0.2

    async def resume() -> None:
        await asyncio.sleep(0.05)
        await store.put_control(Control(queue="q", key=QUEUE_KEY), expected_version=paused.version)

    resuming = asyncio.create_task(resume())
    assert await store.wait_due("q", 30) is True
    await resuming
    assert len(await claim_ids(store)) == 3


@pytest.mark.asyncio
async def test_tasks_held_behind_a_rate_limit_are_due_when_the_next_token_comes(
    store: SqliteStorage,
) -> None:
    await fill(store, 5, "r", keys=["api"])
    await put(store, Control(queue="q", key="api", rate=1, per=2.0, burst=1))
    (first,) = await store.claim_due("q", 10, LEASE)
    assert await claim_ids(store) == []  # the rest held under "api"
    claimed_at = first.task.claimed_at
    assert claimed_at is not None
    now, at = await due(store)
    assert at is not None and at > now
    token = int(claimed_at.timestamp() * 1e6) + 2_000_000  # the bucket was empty at the claim
    assert abs(at - token) <= 2


@pytest.mark.asyncio
async def test_a_full_concurrency_limit_is_due_when_its_first_lease_ends(
    store: SqliteStorage,
) -> None:
    await fill(store, 3, "c", keys=["psp"])
    await put(store, Control(queue="q", key="psp", concurrency=1))
    (first,) = await store.claim_due("q", 10, LEASE)
    assert await claim_ids(store) == []
    expires = first.task.lease_expires_at
    assert expires is not None
    _, at = await due(store)
    assert at == int((expires - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    await store.complete(first.task.id, first.token, done())
    now, at = await due(store)
    assert at is not None and at <= now, "a freed slot makes the held tasks due"
