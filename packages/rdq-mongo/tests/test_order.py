"""Contract version 4 on MongoDB, beyond the kit: what a claim of a fair or aged queue costs
(and that a queue without either is claimed by the same commands as before), a task a racing
claimant leased first passed over for the next in order, racing claimants of a fair queue
under limits from two stores, a claim whose take keeps losing to a racing claimant leasing
only the tasks no limit counts, what a failing claim gives back, and documents that do not
decode."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from rdq.errors import StorageUnavailable
from rdq.spi import (
    QUEUE_KEY,
    Attempt,
    ClaimOrder,
    Control,
    Envelope,
    Outcome,
    Selector,
    handler_key,
)
from rdq_mongo import MongoStorage, _admission
from rdq_mongo._claims import _rounds
from rdq_mongo._codec import envelope_to_document, group_fields
from rdq_mongo.testing import Commands

from .claiming import LONG, A, B, ids_of, put_control, stored_element

FAIR = "tenant:"


async def _due(store: MongoStorage, count: int, *, tenant: str | None, **fields: Any) -> list[str]:
    """``count`` tasks due a minute ago, one more millisecond later each (the first is the
    oldest), of ``tenant`` (no tenant key for ``None``); their ids, oldest first."""
    now = await store.now()
    fields.setdefault("handler_ref", A)
    keys = [*fields.pop("keys", []), *([f"{FAIR}{tenant}"] if tenant else [])]
    tasks = [
        Envelope(
            id=f"{tenant or 'none'}-{n:03d}-{uuid.uuid4().hex[:6]}",
            queue="q",
            keys=keys,
            next_attempt_at=now - timedelta(seconds=60) + timedelta(milliseconds=n),
            **fields,
        )
        for n in range(count)
    ]
    assert await store.enqueue_batch(tasks) == [True] * count
    return [t.id for t in tasks]


_SUCCEEDED = Attempt(number=1, outcome=Outcome.SUCCEEDED)
_FAILED = Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom")


async def _in_use(store: MongoStorage, key: str) -> int | None:
    """The live leases of ``key``'s record of queue ``q``, as ``list_controls`` reports them."""
    (control,) = [c for c in await store.list_controls("q") if c.key == key]
    return control.in_use


# --- what a claim costs ---------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("setting", "found"),
    [
        # deep's first 4 (a full page: deep may hold more), then the groups after deep
        ({"fair": FAIR}, [4, 2]),
        # one group: priority 0's first 4, then the priorities below 0 (none)
        ({"aging": 30.0}, [4, 0]),
    ],
)
async def test_an_ordered_claim_reads_each_group_s_first_tasks_and_leases_them_by_id(
    watched: tuple[MongoStorage, Commands], setting: dict[str, Any], found: list[int]
) -> None:
    store, commands = watched
    await put_control(store, Control(queue="q", key=QUEUE_KEY, **setting))
    await _due(store, 20, tenant="deep")
    paused = await _due(store, 30, tenant="deep", handler_ref=B)
    await _due(store, 2, tenant="shallow")
    await put_control(store, Control(queue="q", key=handler_key(B), paused=True))
    commands.clear()
    assert len(await store.claim_due("q", 4, LONG)) == 4
    assert commands.seen == [
        ("aggregate", "rdq_controls"),
        ("update", "rdq_tasks"),  # the tasks grouped under another order: none here
        ("find", "rdq_tasks"),
        ("find", "rdq_tasks"),
        *[("findAndModify", "rdq_tasks")] * 4,
    ]
    assert commands.found == found, "no group read past the claim's 4, the paused left out"
    for task_id in paused:
        assert (await store.get(task_id)).attempt_count == 0


@pytest.mark.asyncio
async def test_under_a_limit_an_ordered_claim_adds_the_count_the_take_and_the_settle(
    watched: tuple[MongoStorage, Commands],
) -> None:
    store, commands = watched
    await _due(store, 5, tenant="a", keys=["psp"])
    await _due(store, 5, tenant="b")
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    await put_control(store, Control(queue="q", key="psp", concurrency=2))
    commands.clear()
    assert len(await store.claim_due("q", 6, LONG)) == 6
    assert commands.seen == [
        ("aggregate", "rdq_controls"),
        ("aggregate", "rdq_tasks"),  # the live leases of psp
        ("update", "rdq_tasks"),  # the tasks grouped under another order (all ten here)
        ("find", "rdq_tasks"),  # a's 5 and b's first
        ("find", "rdq_tasks"),  # b's first 6 (all 5)
        ("find", "rdq_tasks"),  # the groups after b (none)
        ("update", "rdq_controls"),  # the take
        *[("findAndModify", "rdq_tasks")] * 6,
        ("update", "rdq_controls"),  # the settle
    ]
    assert (await stored_element(store, "psp"))["pending"] == []


@pytest.mark.asyncio
async def test_a_queue_no_longer_ordered_is_claimed_by_the_same_commands_as_before(
    watched: tuple[MongoStorage, Commands],
) -> None:
    store, commands = watched
    await _due(store, 5, tenant="a")
    fair = await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR, aging=5.0))
    await store.put_control(
        Control(queue="q", key=QUEUE_KEY, state={"note": "kept"}), expected_version=fair.version
    )
    commands.clear()
    assert len(await store.claim_due("q", 3, LONG)) == 3
    assert commands.seen == [("aggregate", "rdq_controls")] + [("findAndModify", "rdq_tasks")] * 3


# --- behind a deep backlog --------------------------------------------------------------------


async def _store_deep(store: MongoStorage, queue: str, depth: int, order: ClaimOrder) -> None:
    """``depth`` tasks of tenant "deep" in ``queue``, due from a minute ago on, stored as an
    admission under ``order`` stores them (the layout of ``envelope_to_document`` and the
    group of ``group_fields``), by ``insert_many``: 20,000 upserts take minutes on
    SecantusDB, and what is measured is the claim."""
    now = await store.now()
    keys = [f"{FAIR}deep"]
    documents = [
        envelope_to_document(
            Envelope(
                id=f"{queue}-deep-{n:06d}",
                queue=queue,
                handler_ref=A,
                keys=keys,
                next_attempt_at=now - timedelta(seconds=60) + timedelta(microseconds=n),
            )
        )
        | group_fields(order, keys)
        for n in range(depth)
    ]
    tasks = store._connection().tasks
    for start in range(0, depth, 5_000):
        await tasks.insert_many(documents[start : start + 5_000])


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "setting",
    [{"fair": FAIR}, {"aging": 30.0}, {"fair": FAIR, "aging": 30.0}],
    ids=["fair", "aged", "fair-and-aged"],
)
async def test_what_an_ordered_claim_reads_does_not_grow_with_the_backlog(
    database_url: str, setting: dict[str, Any]
) -> None:
    """One claim of 4 behind 2,000 and behind 20,000 due tasks of one tenant (and 3 of a
    small tenant, enqueued after them, of a higher priority): the same commands, returning
    the same task documents, at either depth (before groups were kept, the claim read every
    due task: 2,003 and 20,003). And the small tenant is served at once: by its rank (fair)
    or by its aged due time (aged). Work, not time, is compared: SecantusDB scans the
    collection for these queries (a ``mongod`` walks the index), so the operation timeout is
    raised for a loaded machine."""
    commands = Commands()
    patient = f"{database_url}{'&' if '?' in database_url else '?'}timeout=300"
    store = MongoStorage.from_url(patient, event_listeners=[commands])
    async with store:
        await store.migrate()
        try:
            await _claims_behind_deep_backlogs(store, commands, ClaimOrder(**setting))
        finally:
            await store._connection().client.drop_database(store.config.database)


async def _claims_behind_deep_backlogs(
    store: MongoStorage, commands: Commands, order: ClaimOrder
) -> None:
    setting = {"fair": order.fair, "aging": order.aging}
    work: dict[int, tuple[list[tuple[str, str]], int]] = {}
    for depth in (2_000, 20_000):
        queue = f"deep-{depth}"
        await put_control(store, Control(queue=queue, key=QUEUE_KEY, **setting))
        await _store_deep(store, queue, depth, order)
        now = await store.now()
        small = [
            Envelope(
                id=f"{queue}-small-{n}",
                queue=queue,
                handler_ref=A,
                keys=[f"{FAIR}small"],
                priority=5,
                next_attempt_at=now,
            )
            for n in range(3)
        ]
        assert await store.enqueue_batch(small) == [True] * 3
        commands.clear()
        first = [c.task.id for c in await store.claim_due(queue, 4, LONG)]
        work[depth] = (list(commands.seen), commands.returned)
        served = {t.id for t in small} & set(first)
        if order.fair is None:
            assert len(served) == 3, "30 s × 5 ahead of the deep tenant's minute-old tasks"
        else:
            assert len(served) == 2, "rank 1 and 2 of the small tenant among the first 4"
            second = ids_of(await store.claim_due(queue, 4, LONG))
            assert {t.id for t in small} - served <= second, "and its third in the next 4"
    assert work[20_000] == work[2_000], "the same commands and task documents at either depth"
    seen, returned = work[2_000]
    assert returned <= 3 * 4 + 3, f"each group's first 4 (per priority when aged): {returned}"
    assert len(seen) <= 10, seen


# --- the groups kept per task -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_store_from_before_groups_were_kept_is_upgraded_and_claims_its_fair_queue_in_order(
    store: MongoStorage,
) -> None:
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    a = await _due(store, 3, tenant="a")
    b = await _due(store, 3, tenant="b")
    await _due(store, 2, tenant="c", handler_ref=B)
    (done,) = await store.claim_due("q", 1, LONG)
    assert done.task.id == a[0]
    await store.complete(done.task.id, done.token, _SUCCEEDED)
    # As the release before left it: no group on any task, no index of them.
    tasks = store._connection().tasks
    await tasks.update_many({}, {"$unset": {"grp_for": "", "grp": ""}})
    await tasks.drop_index("rdq_claim_by_group")
    steps = await store.migrate()
    assert steps == [
        "create index rdq_tasks.rdq_claim_by_group",
        "group 7 live task(s) of fair or aged queues",  # not the one completed
    ]
    found = tasks.find({}, projection={"grp_for": 1, "grp": 1})
    stored = {doc["_id"]: doc async for doc in found}
    assert stored.pop(done.task.id) == {"_id": done.task.id}, "a finished task is not grouped"
    for task_id, doc in stored.items():
        tenant = task_id.split("-")[0]
        assert doc == {"_id": task_id, "grp_for": FAIR, "grp": f"{FAIR}{tenant}"}
    await put_control(store, Control(queue="q", key=handler_key(B), paused=True))
    left = [t for t in (*a, *b) if t != done.task.id]
    claims = [ids_of(await store.claim_due("q", 2, LONG)) for _ in range(3)]
    by_tenant = [{t.split("-")[0] for t in claim} for claim in claims]
    assert by_tenant == [{"a", "b"}, {"a", "b"}, {"b"}], "rank by rank, a's first done"
    assert set().union(*claims) == set(left)
    assert await store.migrate() == []


@pytest.mark.asyncio
async def test_a_task_admitted_as_the_order_changed_is_regrouped_by_the_next_claim(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer that read the queue's order just before it changed stores its tasks
    grouped under the old one, after the change: the next claim regroups them, and ranks
    them in their group under the new order. So does a task redriven after a change."""
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    stale = {"q": ClaimOrder(fair="org:")}

    async def read_before_the_change(connection: object, queues: object) -> dict[str, Any]:
        return stale

    monkeypatch.setattr(_admission, "admission_orders", read_before_the_change)
    a = await _due(store, 2, tenant="a", keys=["org:x"])
    monkeypatch.undo()
    b = await _due(store, 2, tenant="b", keys=["org:x"])
    tasks = store._connection().tasks
    assert (await tasks.find_one({"_id": a[0]}))["grp"] == "org:x", "grouped as it read"
    assert (await tasks.find_one({"_id": b[0]}))["grp"] == f"{FAIR}b", "grouped at admission"
    assert ids_of(await store.claim_due("q", 2, LONG)) == {a[0], b[0]}, "tenant a and tenant b"
    for task_id in a:
        doc = await tasks.find_one({"_id": task_id})
        assert (doc["grp_for"], doc["grp"]) == (FAIR, f"{FAIR}a")
    # a task grouped long ago, dead, redriven after the order changed to "org:"
    dead = await _due(store, 1, tenant="c", keys=["org:y"])
    claimed = await store.claim_due("q", 3, LONG)
    assert dead[0] in ids_of(claimed)
    (mine,) = [c for c in claimed if c.task.id == dead[0]]
    await store.dead_letter(dead[0], mine.token, _FAILED)
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair="org:"))
    assert await store.redrive("q", Selector(ids=dead)) == 1
    assert (await tasks.find_one({"_id": dead[0]}))["grp_for"] == FAIR
    rest = [c.task.id for c in await store.claim_due("q", 5, LONG)]
    assert rest[0] == dead[0], "org:y, a group of its own, before org:x's second"
    assert (await tasks.find_one({"_id": dead[0]}))["grp"] == "org:y"


# --- racing claimants --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_task_a_racing_claimant_leased_first_is_passed_over_for_the_next_in_order(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await _due(store, 3, tenant="a")
    b = await _due(store, 3, tenant="b")
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    other = store.reopen()
    await other.connect()
    real = _rounds.read_candidates
    raced: list[set[str]] = []

    async def read_then_race(*args: Any) -> Any:
        found = await real(*args)
        if not raced:  # another store claims a's first task after this claim read it
            monkeypatch.setattr(_rounds, "read_candidates", real)
            raced.append(ids_of(await other.claim_due("q", 1, LONG)))
        return found

    monkeypatch.setattr(_rounds, "read_candidates", read_then_race)
    try:
        mine = ids_of(await store.claim_due("q", 2, LONG))
    finally:
        await other.aclose()
    assert raced == [{a[0]}]
    assert mine == {b[0], a[1]}, "a's first is gone: b's first, then a's second, in order"


@pytest.mark.asyncio
async def test_racing_fair_claimants_of_two_stores_never_overdraw_a_limit_or_double_claim(
    store: MongoStorage,
) -> None:
    ones = await _due(store, 10, tenant="a", keys=["k1"])
    twos = await _due(store, 10, tenant="b", keys=["k2"])
    both = await _due(store, 10, tenant="c", keys=["k1", "k2"])
    free = await _due(store, 5, tenant="d", handler_ref=B)
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR, aging=1.0))
    await put_control(store, Control(queue="q", key=handler_key(A), gate=7))
    await put_control(store, Control(queue="q", key="k1", concurrency=5))
    await put_control(store, Control(queue="q", key="k2", concurrency=3, rate=100, burst=50))
    other = store.reopen()
    await other.connect()
    try:

        async def claimant(side: MongoStorage) -> list[str]:
            mine: list[str] = []
            for _ in range(4):
                mine += [c.task.id for c in await side.claim_due("q", 3, LONG)]
                await asyncio.sleep(0)
            return mine

        results = await asyncio.gather(*(claimant((store, other)[n % 2]) for n in range(8)))
    finally:
        await other.aclose()
    claimed = Counter(t for r in results for t in r)
    assert max(claimed.values()) == 1, "no task twice"
    of_a = [t for t in claimed if t in set(ones + twos + both)]
    assert len(of_a) <= 7, "the gate of A"
    assert len([t for t in of_a if t in set(ones + both)]) <= 5, "concurrency of k1"
    assert len([t for t in of_a if t in set(twos + both)]) <= 3, "concurrency of k2"
    assert set(free) <= set(claimed), "B's tasks are held back by none of it"
    more = ids_of(await store.claim_due("q", 10, LONG))
    assert len(of_a) + len(more) == 7, "the whole gate is let through in the end"
    listed = {c.key: c for c in await store.list_controls("q")}
    assert listed[handler_key(A)].gate == 0
    for key in ("k1", "k2"):
        assert (await stored_element(store, key))["pending"] == [], "every claim settled"


@pytest.mark.asyncio
async def test_a_take_that_keeps_losing_to_a_racing_claimant_leases_only_unlimited_tasks(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a's tasks come first in the fair order (priority 5) and count towards psp; b's count
    # towards no limit
    a = await _due(store, 12, tenant="a", keys=["psp"], priority=5)
    b = await _due(store, 3, tenant="b")
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    await put_control(store, Control(queue="q", key="psp", concurrency=8))
    other = store.reopen()
    await other.connect()
    real = _rounds.live_leases
    raced: list[str] = []
    racing = False

    async def count_then_race(*args: Any) -> Any:
        """Every time this claim counts psp's leases, another store claims the first task
        in order (one of a's) before this claim's take: its settle moves psp on (``seq``),
        so the take this claim decides on that count finds the record changed."""
        nonlocal racing
        counted = await real(*args)
        if not racing:
            racing = True
            try:
                raced.extend(c.task.id for c in await other.claim_due("q", 1, LONG))
            finally:
                racing = False
        return counted

    attempts = 4  # fewer than psp's 8 slots, so the racer outlasts every take
    monkeypatch.setattr(_rounds, "live_leases", count_then_race)
    monkeypatch.setattr(_rounds, "_TAKE_ATTEMPTS", attempts)
    try:
        mine = ids_of(await store.claim_due("q", 10, LONG))
    finally:
        monkeypatch.undo()
        await other.aclose()
    assert len(raced) > attempts, "every take lost to a racing claimant"
    assert raced == a[: len(raced)], "the racer took a's tasks in order"
    assert await _in_use(store, "psp") == len(raced) <= 8, "psp: only the racer's leases"
    assert mine == set(b), "past its takes the claim leases the tasks no limit counts, only"
    assert (await stored_element(store, "psp"))["pending"] == [], "nothing left reserved"
    rest = ids_of(await store.claim_due("q", 10, LONG))
    assert rest == set(a[len(raced) : 8]), "psp's room, and no more, once nothing races"
    assert await _in_use(store, "psp") == 8


# --- what a failing claim gives back -------------------------------------------------------


@pytest.mark.asyncio
async def test_an_ordered_claim_failing_after_its_take_gives_everything_back(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _due(store, 2, tenant="a", keys=["psp"])
    await _due(store, 2, tenant="b", keys=["psp"])
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR))
    await put_control(store, Control(queue="q", key=handler_key(A), gate=5))
    await put_control(store, Control(queue="q", key="psp", concurrency=3))
    seq = (await stored_element(store, "psp")).get("seq", 0)

    async def lost(self: _rounds.Claim, scope: object, task: object = None) -> bool:
        raise AutoReconnect("connection lost")

    monkeypatch.setattr(_rounds.Claim, "_lease", lost)
    with pytest.raises(StorageUnavailable):
        await store.claim_due("q", 10, LONG)
    monkeypatch.undo()
    assert (await stored_element(store, handler_key(A)))["gate"] == 5
    psp = await stored_element(store, "psp")
    assert psp["pending"] == [] and psp["seq"] == seq + 1
    assert len(await store.claim_due("q", 10, LONG)) == 3


# --- documents that do not decode ------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_fair_queue_claims_tasks_whose_order_fields_do_not_decode_beside_the_rest(
    store: MongoStorage,
) -> None:
    a = await _due(store, 3, tenant="a")
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair=FAIR, aging=86_400.0))
    tasks = store._connection().tasks
    await tasks.update_one({"_id": a[1]}, {"$set": {"priority": "high", "keys": "tenant:a"}})
    # far beyond the times and priorities an aged due time is computed from
    await tasks.update_one({"_id": a[2]}, {"$set": {"priority": 10**12, "due": -(10**18)}})
    claimed = await store.claim_due("q", 3, LONG)
    assert ids_of(claimed) == set(a), "each placed: priority 0 and no keys, or the nearest bounds"
    (odd,) = [c.task for c in claimed if c.task.id == a[1]]
    assert odd.corrupt is not None


# --- what admission reads -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_stream_of_enqueues_reads_the_queues_order_once_and_again_after_a_change(
    watched: tuple[MongoStorage, Commands],
) -> None:
    """Admission reads a queue's order (its control document) once a second at most, not at
    every enqueue; this store's own change of the order is read by its next enqueue."""
    store, commands = watched

    async def order_reads(n: int, key: str) -> int:
        commands.seen.clear()
        for i in range(n):
            await store.enqueue(Envelope(id=f"{key}-{i}", queue="q", handler_ref=A, keys=[key]))
        return sum(1 for name, on in commands.seen if name == "find" and on.endswith("controls"))

    assert await order_reads(5, "org:x") <= 1
    await put_control(store, Control(queue="q", key=QUEUE_KEY, fair="org:"))
    assert await order_reads(5, "org:y") == 1
    doc = await store._connection().tasks.find_one({"_id": "org:y-0"})
    assert (doc["grp_for"], doc["grp"]) == ("org:", "org:y"), "grouped under the new order"
