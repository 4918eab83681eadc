"""The contract's second revision on MongoDB: priorities, the claim holder, cancel, listings,
DLQ groups, import, the audit trail, the storage clock, and documents of the previous
release."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import IDConflict, NotFound, StaleClaim
from rdq.spi import (
    Attempt,
    AuditEntry,
    AuditFilter,
    Claimed,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    TaskFilter,
)
from rdq_mongo import MongoStorage

LONG = timedelta(minutes=10)


def _task(task_id: str, queue: str = "q", **fields: object) -> Envelope:
    fields.setdefault("handler_ref", "app:handler")
    return Envelope(id=task_id, queue=queue, **fields)  # type: ignore[arg-type]


async def _reclaim(store: MongoStorage, queue: str, worker_id: str) -> Claimed:
    """The next claim of ``queue``, once a short lease lapsed by the server's clock."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not (claimed := await store.claim_due(queue, 1, LONG, worker_id=worker_id)):
        assert loop.time() < deadline, "the lapsed lease was never reclaimed"
        await asyncio.sleep(0.05)
    return claimed[0]


@pytest.mark.asyncio
async def test_claims_take_the_highest_priority_first_and_the_oldest_due_within_one(
    store: MongoStorage,
) -> None:
    now = await store.now()
    due = [now - timedelta(seconds=s) for s in (50, 40, 30, 20, 10)]
    await store.enqueue(_task("low", priority=-3, next_attempt_at=due[0]))
    await store.enqueue(_task("mid", next_attempt_at=due[1]))
    await store.enqueue(_task("high-late", priority=5, next_attempt_at=due[4]))
    await store.enqueue(_task("high-early", priority=5, next_attempt_at=due[3]))
    await store.enqueue(_task("top-not-due", priority=10), delay=timedelta(hours=1))
    order = [c.task.id for c in await store.claim_due("q", 2, LONG)]
    order += [c.task.id for c in await store.claim_due("q", 10, LONG)]
    assert order == ["high-early", "high-late", "mid", "low"]
    assert (await store.get("high-early")).priority == 5


@pytest.mark.asyncio
async def test_the_claim_holder_is_recorded_and_named_by_the_lease_expired_record(
    store: MongoStorage,
) -> None:
    await store.enqueue(_task("h"))
    [first] = await store.claim_due("q", 1, timedelta(milliseconds=200), worker_id="w1")
    assert first.task.claimed_by == "w1"
    assert first.task.claimed_at == first.task.lease_expires_at - timedelta(milliseconds=200)  # type: ignore[operator]
    second = await _reclaim(store, "q", "w2")
    record = second.task.attempts[-1]
    assert record.outcome == Outcome.LEASE_EXPIRED and record.number == 1
    assert record.worker_id == "w1"
    assert record.started_at == first.task.claimed_at
    assert record.finished_at == second.task.claimed_at
    assert record.error_message is not None and "expired at 20" in record.error_message
    assert second.task.claimed_by == "w2"
    await store.complete("h", second.token, Attempt(number=2, outcome=Outcome.SUCCEEDED))
    done = await store.get("h")
    assert (done.claimed_by, done.claimed_at) == (None, None)


@pytest.mark.asyncio
async def test_cancel_stops_pending_and_in_flight_tasks_and_their_holders(
    store: MongoStorage,
) -> None:
    for name in ("p", "f", "d"):
        await store.enqueue(_task(name))
    await store.enqueue(_task("elsewhere", queue="other"))
    claims = {c.task.id: c for c in await store.claim_due("q", 3, LONG)}
    dead = claims["d"]
    await store.dead_letter("d", dead.token, Attempt(number=1, outcome=Outcome.PERMANENT))
    await store.reschedule(
        "p", claims["p"].token, Attempt(number=1, outcome=Outcome.FAILED), datetime.now(UTC)
    )

    assert await store.cancel("q", ["p", "f", "d", "elsewhere", "missing"]) == 2
    for name in ("p", "f"):
        task = await store.get(name)
        assert task.status == Status.CANCELLED and task.cancelled_at is not None
        assert (task.lease_expires_at, task.claimed_by, task.claimed_at) == (None, None, None)
    with pytest.raises(StaleClaim):
        await store.complete("f", claims["f"].token, Attempt(number=1, outcome=Outcome.SUCCEEDED))
    assert (await store.get("d")).status == Status.DEAD
    assert (await store.get("elsewhere")).status == Status.PENDING
    assert await store.claim_due("q", 10, LONG) == []
    assert (await store.stats("q")).cancelled == 2

    listed, _ = await store.list_tasks("q", TaskFilter(status=Status.CANCELLED), Page())
    assert sorted(t.id for t in listed) == ["f", "p"]
    assert await store.purge("q", Selector.by_ids("p")) == 1
    assert await store.purge_succeeded("q", datetime.now(UTC) + timedelta(days=1)) == 1
    assert (await store.stats("q")).cancelled == 0


@pytest.mark.asyncio
async def test_list_tasks_pages_each_status_by_its_time_then_id(store: MongoStorage) -> None:
    now = await store.now()
    for n in range(7):
        at = now - timedelta(minutes=10 - n // 2)  # pairs share a time: the id breaks ties
        await store.enqueue(_task(f"t{n}", next_attempt_at=at, headers={"n": str(n)}))
    await store.enqueue(_task("other-handler", handler_ref="x:y", next_attempt_at=now))

    seen: list[str] = []
    cursor: str | None = None
    selected = TaskFilter(status=Status.PENDING, handler_ref="app:handler")
    while True:
        page, cursor = await store.list_tasks("q", selected, Page(limit=3, cursor=cursor))
        seen += [t.id for t in page]
        if cursor is None:
            break
    assert seen == [f"t{n}" for n in range(7)]

    window = TaskFilter(
        status=Status.PENDING, after=now - timedelta(minutes=9), before=now - timedelta(minutes=8)
    )
    page, _ = await store.list_tasks("q", window, Page())
    assert [t.id for t in page] == ["t2", "t3"]

    [claim] = await store.claim_due("q", 1, LONG)
    failed = Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom")
    await store.reschedule(claim.task.id, claim.token, failed, now + timedelta(hours=1))
    by_error = TaskFilter(status=Status.PENDING, error_type="Boom")
    page, _ = await store.list_tasks("q", by_error, Page(include_attempts=True))
    assert [t.id for t in page] == [claim.task.id]
    assert page[0].attempts == [failed]
    in_flight, _ = await store.list_tasks("q", TaskFilter(status=Status.IN_FLIGHT), Page())
    assert in_flight == []


@pytest.mark.asyncio
async def test_list_queues_and_dlq_groups_are_counted_by_the_server(store: MongoStorage) -> None:
    for n in range(5):
        await store.enqueue(_task(f"a{n}", queue="alpha"))
    await store.enqueue(_task("b0", queue="beta"))
    claims = await store.claim_due("alpha", 4, LONG)
    for n, claim in enumerate(claims):
        error = "Boom" if n < 3 else None
        record = Attempt(number=1, outcome=Outcome.PERMANENT, error_type=error)
        await store.dead_letter(claim.task.id, claim.token, record)

    queues = await store.list_queues()
    assert [s.queue for s in queues] == ["alpha", "beta"]
    alpha = queues[0]
    assert (alpha.pending, alpha.dlq_depth, alpha.in_flight) == (1, 4, 0)
    assert queues[1].pending == 1

    groups = await store.dlq_groups("alpha")
    assert [(g.handler_ref, g.error_type, g.count) for g in groups] == [
        ("app:handler", "Boom", 3),
        ("app:handler", None, 1),
    ]
    assert groups[0].first_dead_lettered_at <= groups[0].last_dead_lettered_at
    filtered, _ = await store.dlq_list("alpha", DLQFilter(error_type="Boom"), Page())
    assert len(filtered) == 3


@pytest.mark.asyncio
async def test_import_stores_tasks_verbatim_and_an_in_flight_one_is_reclaimed(
    store: MongoStorage,
) -> None:
    past = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    history = [
        Attempt(
            number=1, outcome=Outcome.FAILED, error_type="Boom", started_at=past, traceback="tb"
        )
    ]
    dead = _task(
        "i-dead",
        status=Status.DEAD,
        attempts=history,
        attempt_count=1,
        created_at=past,
        dead_lettered_at=past + timedelta(seconds=1),
        priority=3,
        payload={"big": 2**70},
    )
    running = _task(
        "i-running",
        status=Status.IN_FLIGHT,
        created_at=past,
        lease_expires_at=past + timedelta(minutes=1),
        claimed_at=past,
        claimed_by="old-worker",
    )
    assert await store.import_tasks([dead, running]) == [True, True]
    assert await store.import_tasks([dead]) == [False]
    assert await store.get("i-dead") == dead
    assert (await store.dlq_groups("q"))[0].error_type == "Boom"

    with pytest.raises(IDConflict):
        await store.import_tasks(
            [
                _task("i-new", created_at=past, next_attempt_at=past),
                _task("i-dead", queue="zz", created_at=past, next_attempt_at=past),
            ]
        )
    with pytest.raises(NotFound):
        await store.get("i-new")

    [reclaimed] = await store.claim_due("q", 1, LONG, worker_id="new-worker")
    assert reclaimed.task.id == "i-running"
    record = reclaimed.task.attempts[-1]
    assert (record.outcome, record.worker_id, record.started_at) == (
        Outcome.LEASE_EXPIRED,
        "old-worker",
        past,
    )


@pytest.mark.asyncio
async def test_audit_entries_are_listed_newest_first_in_stable_pages(store: MongoStorage) -> None:
    stored = []
    for n in range(5):
        entry = AuditEntry(
            actor="ops",
            action="purge" if n % 2 else "redrive",
            queue="q" if n < 4 else "other",
            selector={"ids": [f"t{n}"], "$odd": "kept"},
            count=n,
            reason=f"because {n}",
        )
        stored.append(await store.append_audit(entry))
    assert len({e.id for e in stored}) == 5
    assert all(e.time is not None for e in stored)
    assert stored[0].selector == {"ids": ["t0"], "$odd": "kept"}

    seen: list[str | None] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list_audit(None, Page(limit=2, cursor=cursor))
        seen += [e.id for e in page]
        if cursor is None:
            break
    times = {e.id: e.time for e in stored}
    assert sorted(seen, key=lambda i: (times[i], i), reverse=True) == seen
    assert set(seen) == set(times)

    purges, _ = await store.list_audit(AuditFilter(queue="q", action="purge"), Page())
    assert sorted(e.count for e in purges) == [1, 3]


@pytest.mark.asyncio
async def test_now_is_the_clock_that_stamps_tasks(store: MongoStorage) -> None:
    before = await store.now()
    await store.enqueue(_task("clock"))
    after = await store.now()
    created = (await store.get("clock")).created_at
    assert created is not None and before.tzinfo is not None
    assert before <= created <= after + timedelta(milliseconds=1)


@pytest.mark.asyncio
async def test_documents_of_the_previous_release_are_read_and_upgraded_by_migrate(
    store: MongoStorage,
) -> None:
    tasks = store._connection().tasks
    micros = 1_714_564_800_000_000  # 2024-05-01T12:00:00Z
    common = {
        "handler_ref": "app:old",
        "attempt_count": 1,
        "redrive_count": 0,
        "created_at": micros,
        "lease_expires_at": None,
        "completed_at": None,
        "token": None,
        "claimed_at": None,
        "body": '{"payload": {"v": 1}, "headers": {}, "retry": null, "format_version": 1}',
    }
    boom = {
        "number": 1,
        "outcome": "PERMANENT",
        "error_type": "Boom",
        "error_message": "old",
        "started_at": micros,
        "finished_at": micros,
        "worker_id": None,
    }
    await tasks.insert_many(
        [
            {
                **common,
                "_id": "old-dead",
                "queue": "q",
                "status": "DEAD",
                "attempts": [boom],
                "next_attempt_at": micros,
                "dead_lettered_at": micros + 1,
                "due": None,
                "dl_error_type": "Boom",
            },
            {
                **common,
                "_id": "old-pending",
                "queue": "q",
                "status": "PENDING",
                "attempts": [{**boom, "outcome": "FAILED"}],
                "next_attempt_at": micros,
                "dead_lettered_at": None,
                "due": micros,
                "dl_error_type": None,
            },
        ]
    )
    old_dead = await store.get("old-dead")
    assert (old_dead.priority, old_dead.claimed_by, old_dead.payload) == (0, None, {"v": 1})
    assert old_dead.attempts[0].traceback is None

    await tasks.create_index([("queue", 1), ("status", 1), ("due", 1)], name="rdq_claim")
    assert await store.migrate() == [
        "set priority on 2 task(s) of the previous release",
        "set last_error_type on 2 task(s) of the previous release",
        "set status_at on 2 task(s) of the previous release",
        "drop index rdq_tasks.rdq_claim",
    ]
    dead, _ = await store.dlq_list("q", DLQFilter(error_type="Boom"), Page())
    assert [t.id for t in dead] == ["old-dead"]
    pending, _ = await store.list_tasks("q", TaskFilter(status=Status.PENDING), Page())
    assert [t.id for t in pending] == ["old-pending"]
    await store.enqueue(_task("new-low", priority=-1))
    [claim] = await store.claim_due("q", 1, LONG)
    assert claim.task.id == "old-pending", "an old task has priority 0, above -1"
    assert [g.count for g in await store.dlq_groups("q")] == [1]
