"""Contract version 3 on MongoDB, beyond the kit: what a claim costs with and without control
records, claims racing over several limits of one task from two stores, what a claim gives
back, reservations of a claimant that died, the stored keys, the upgrade of a store of the
previous release, and ``retry_now`` waking a waiter."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from rdq.errors import ControlConflict, StorageUnavailable
from rdq.spi import QUEUE_KEY, Control, Envelope, handler_key
from rdq_mongo import MongoStorage
from rdq_mongo._claims import _rounds
from rdq_mongo.testing import Commands

from .claiming import LONG, A, B, put_control, stored_element


def _task(queue: str = "q", **fields: Any) -> Envelope:
    fields.setdefault("handler_ref", A)
    return Envelope(id=uuid.uuid4().hex, queue=queue, **fields)


async def _fill(store: MongoStorage, count: int, queue: str = "q", **fields: Any) -> list[str]:
    tasks = [_task(queue, **fields) for _ in range(count)]
    await store.enqueue_batch(tasks)
    return [t.id for t in tasks]


# --- what a claim costs ---------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("records", ["none", "state-only", "other-queue"])
async def test_without_a_restricting_record_a_claim_is_one_lookup_and_its_find_and_modifies(
    watched: tuple[MongoStorage, Commands], records: str
) -> None:
    store, commands = watched
    await _fill(store, 3)
    if records == "state-only":  # a closed breaker's record: it neither pauses nor limits
        await put_control(store, Control(queue="q", key="dep:psp", state={"breaker": "closed"}))
    if records == "other-queue":
        await put_control(store, Control(queue="other", key=QUEUE_KEY, paused=True))
    commands.clear()
    assert len(await store.claim_due("q", 3, LONG)) == 3
    assert commands.seen == [("aggregate", "rdq_controls")] + [("findAndModify", "rdq_tasks")] * 3
    commands.clear()
    assert await store.claim_due("q", 5, LONG) == []
    assert commands.seen == [("aggregate", "rdq_controls"), ("findAndModify", "rdq_tasks")]


@pytest.mark.asyncio
async def test_pauses_alone_filter_the_same_find_and_modifies(
    watched: tuple[MongoStorage, Commands],
) -> None:
    store, commands = watched
    held = await _fill(store, 50, handler_ref=A)  # a deep backlog of a paused handler
    keyed = await _fill(store, 5, handler_ref=B, keys=["dep:psp"])
    free = await _fill(store, 3, handler_ref=B)
    await put_control(store, Control(queue="q", key=handler_key(A), paused=True))
    await put_control(store, Control(queue="q", key="dep:psp", paused=True))
    commands.clear()
    claimed = [c.task.id for c in await store.claim_due("q", 10, LONG)]
    assert sorted(claimed) == sorted(free)
    assert commands.seen == [("aggregate", "rdq_controls")] + [("findAndModify", "rdq_tasks")] * 4
    for task_id in held + keyed:
        assert (await store.get(task_id)).status.value == "PENDING"
    await put_control(store, Control(queue="q", key=QUEUE_KEY, paused=True))
    await _fill(store, 1, handler_ref=B)
    commands.clear()
    assert await store.claim_due("q", 10, LONG) == []
    assert commands.seen == [("aggregate", "rdq_controls")], "a paused queue touches no task"


@pytest.mark.asyncio
async def test_a_backlog_held_back_by_a_limit_is_left_out_by_the_server_not_the_client(
    watched: tuple[MongoStorage, Commands],
) -> None:
    store, commands = watched
    limited = await _fill(store, 60, keys=["psp"])
    others = await _fill(store, 4, handler_ref=B)
    await put_control(store, Control(queue="q", key="psp", concurrency=2))
    first = {c.task.id for c in await store.claim_due("q", 3, LONG)}
    assert len(first & set(limited)) == 2 and len(first & set(others)) == 1
    commands.clear()
    second = {c.task.id for c in await store.claim_due("q", 3, LONG)}
    assert second == set(others) - first
    # the first peek finds three held-back tasks; the next leaves the key out on the server
    assert commands.found == [3, 3], "two peeks of three tasks each for a claim of three"


# --- limits racing --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_racing_claimants_of_two_stores_never_overdraw_any_limit_of_a_task(
    store: MongoStorage,
) -> None:
    ones = await _fill(store, 10, keys=["k1"])
    twos = await _fill(store, 10, keys=["k2"])
    both = await _fill(store, 10, keys=["k1", "k2"], priority=-1)  # claimed last
    await _fill(store, 5, handler_ref=B)
    await put_control(store, Control(queue="q", key=handler_key(A), gate=7))
    await put_control(store, Control(queue="q", key="k1", concurrency=5))
    await put_control(store, Control(queue="q", key="k2", concurrency=3, rate=100, burst=50))
    versions = {c.key: c.version for c in await store.list_controls("q")}
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
    assert len(claimed) - len(of_a) == 5, "B's tasks are held back by none of it"
    more = [c.task.id for c in await store.claim_due("q", 10, LONG)]
    assert len(of_a) + len(more) == 7, "the whole gate is let through in the end"
    listed = {c.key: c for c in await store.list_controls("q")}
    assert listed[handler_key(A)].gate == 0
    assert {k: c.version for k, c in listed.items()} == versions
    assert listed["k1"].in_use is not None and listed["k1"].in_use <= 5
    assert listed["k2"].in_use is not None and listed["k2"].in_use <= 3
    for key in ("k1", "k2"):
        assert (await stored_element(store, key))["pending"] == [], "every claim settled"


# --- what a claim gives back ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_gate_keeps_what_a_claim_did_not_lease(store: MongoStorage) -> None:
    await _fill(store, 2)
    gated = await put_control(store, Control(queue="q", key=handler_key(A), gate=5))
    assert len(await store.claim_due("q", 10, LONG)) == 2
    (after,) = await store.list_controls("q")
    assert (after.gate, after.version) == (3, gated.version)


@pytest.mark.asyncio
async def test_a_claim_failing_after_its_take_gives_everything_back(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(store, 4, keys=["psp"])
    await put_control(store, Control(queue="q", key=handler_key(A), gate=5))
    await put_control(store, Control(queue="q", key="psp", concurrency=3))
    seq = (await stored_element(store, "psp")).get("seq", 0)

    async def lost(self: _rounds.Claim, scope: object) -> bool:
        raise AutoReconnect("connection lost")

    monkeypatch.setattr(_rounds.Claim, "_lease", lost)
    with pytest.raises(StorageUnavailable):
        await store.claim_due("q", 10, LONG)
    monkeypatch.undo()
    assert (await stored_element(store, handler_key(A)))["gate"] == 5
    psp = await stored_element(store, "psp")
    assert psp["pending"] == [] and psp["seq"] == seq + 1
    assert len(await store.claim_due("q", 10, LONG)) == 3


@pytest.mark.asyncio
async def test_a_lease_made_under_a_reservation_still_held_takes_one_slot_not_two(
    store: MongoStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that counts while another claim has leased but not yet settled counts that
    task once: in its reservation, not also as a live lease."""
    await _fill(store, 4, keys=["psp"])
    await put_control(store, Control(queue="q", key="psp", concurrency=2))
    real = _rounds.Claim.settle
    leased, go_on = asyncio.Event(), asyncio.Event()

    async def first_settles_late(self: _rounds.Claim) -> None:
        if not leased.is_set():
            leased.set()
            await go_on.wait()
        await real(self)

    monkeypatch.setattr(_rounds.Claim, "settle", first_settles_late)
    first = asyncio.create_task(store.claim_due("q", 1, LONG))
    await leased.wait()
    assert len((await stored_element(store, "psp"))["pending"]) == 1, "leased, not settled"
    second = await store.claim_due("q", 10, LONG)
    go_on.set()
    assert len(await first) == 1
    assert len(second) == 1, (
        "the second slot is free: the first claim's lease is in its reservation"
    )
    assert {c.key: c.in_use for c in await store.list_controls("q")} == {"psp": 2}
    assert (await stored_element(store, "psp"))["pending"] == []
    assert await store.claim_due("q", 10, LONG) == []


@pytest.mark.asyncio
async def test_a_reservation_of_a_claimant_that_died_lapses(store: MongoStorage) -> None:
    await _fill(store, 4, keys=["psp"])
    await put_control(store, Control(queue="q", key="psp", concurrency=2))
    now_us = int((await store.now()).timestamp() * 1_000_000)
    controls = store._connection().controls

    async def reserve(until_us: int) -> None:
        await controls.update_one(
            {"_id": "q", "c.key": "psp"},
            {"$set": {"c.$.pending": [{"o": "dead", "n": 2, "u": until_us}]}},
        )

    await reserve(now_us + 60_000_000)
    assert await store.claim_due("q", 10, LONG) == [], "a live reservation holds its slots"
    await reserve(now_us - 1)
    assert len(await store.claim_due("q", 10, LONG)) == 2, "a lapsed one frees them"
    assert (await stored_element(store, "psp"))["pending"] == []


@pytest.mark.asyncio
async def test_a_write_of_the_same_rate_keeps_the_bucket_and_the_reservations(
    store: MongoStorage,
) -> None:
    await _fill(store, 5, keys=["api"])
    slow = await put_control(store, Control(queue="q", key="api", rate=1, per=3600.0, burst=1))
    assert len(await store.claim_due("q", 10, LONG)) == 1
    # a breaker writing its state keeps the bucket empty
    await store.put_control(
        Control(queue="q", key="api", rate=1, per=3600.0, burst=1, state={"breaker": "open"}),
        expected_version=slow.version,
    )
    assert await store.claim_due("q", 10, LONG) == []
    await store._connection().controls.update_one(
        {"_id": "q", "c.key": "api"}, {"$set": {"c.$.pending": [{"o": "x", "n": 1, "u": 1}]}}
    )
    (stored,) = await store.list_controls("q")
    await store.put_control(
        Control(queue="q", key="api", concurrency=4), expected_version=stored.version
    )
    element = await stored_element(store, "api")
    assert element["pending"] == [{"o": "x", "n": 1, "u": 1}]
    assert element["tokens"] is None, "no rate any more: no bucket"


@pytest.mark.asyncio
@pytest.mark.parametrize("document", ["absent", "present"])
async def test_of_racing_writers_of_a_first_record_exactly_one_succeeds(
    store: MongoStorage, document: str
) -> None:
    if document == "present":  # the queue's document exists, holding another key
        await store.put_control(Control(queue="q", key="other"), expected_version=0)

    async def writer(n: int) -> int | None:
        try:
            await store.put_control(
                Control(queue="q", key="k", state={"writer": n}), expected_version=0
            )
        except ControlConflict as exc:
            found.append(exc.found)
            return None
        return n

    found: list[Control | None] = []
    results = await asyncio.gather(*(writer(n) for n in range(8)))
    winners = [n for n in results if n is not None]
    assert [c.version if c is not None else None for c in found] == [1] * 7
    assert len(winners) == 1, winners
    listed = {c.key: c for c in await store.list_controls("q")}
    assert listed["k"].state == {"writer": winners[0]} and listed["k"].version == 1
    assert len(listed) == (2 if document == "present" else 1)


# --- listing ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_in_use_counts_the_live_leases_of_the_queue_the_handler_and_a_key(
    store: MongoStorage,
) -> None:
    await _fill(store, 3, keys=["psp"])
    await _fill(store, 2, handler_ref=B, priority=-1)
    for key in (QUEUE_KEY, handler_key(A), handler_key(B), "psp", "unused"):
        await put_control(store, Control(queue="q", key=key, state={"n": 1}))
    await store.claim_due("q", 4, LONG)
    in_use = {c.key: c.in_use for c in await store.list_controls("q")}
    assert in_use == {QUEUE_KEY: 4, handler_key(A): 3, handler_key(B): 1, "psp": 3, "unused": 0}
    assert [c.key for c in await store.list_controls("q")] == sorted(in_use)


# --- the stored keys and the upgrade -------------------------------------------------------------


@pytest.mark.asyncio
async def test_keys_have_a_field_of_their_own_and_only_tasks_with_keys_have_it(
    store: MongoStorage,
) -> None:
    now = await store.now()
    with_keys = _task(keys=["dep:psp", "tenant:ä"])
    plain = _task(created_at=now, next_attempt_at=now)
    await store.enqueue(with_keys)
    await store.import_tasks([plain])
    tasks = store._connection().tasks
    stored = await tasks.find_one({"_id": with_keys.id})
    assert stored is not None and stored["keys"] == ["dep:psp", "tenant:ä"]
    assert '"keys"' not in stored["body"]
    bare = await tasks.find_one({"_id": plain.id})
    assert bare is not None and "keys" not in bare and '"keys"' not in bare["body"]


@pytest.mark.asyncio
async def test_a_store_of_the_previous_release_is_upgraded_in_place(database_url: str) -> None:
    store = MongoStorage.from_url(database_url)
    async with store:
        connection = store._connection()
        try:
            # As the previous release left it: its indexes, tasks with keys in their body.
            await connection.tasks.create_index(
                [("queue", 1), ("status", 1), ("priority", -1), ("due", 1)],
                name="rdq_claim_by_priority",
            )
            await connection.tasks.create_index(
                [("queue", 1), ("status", 1), ("status_at", 1), ("_id", 1)],
                name="rdq_by_status_time",
            )
            await connection.audit.create_index([("time", 1), ("_id", 1)], name="rdq_audit_time")
            await connection.audit.create_index(
                [("queue", 1), ("time", 1), ("_id", 1)], name="rdq_audit_queue_time"
            )
            keyed, bare, payload = _task(), _task(), _task()
            await store.enqueue(keyed)
            await store.enqueue(bare)
            await store.enqueue(payload)
            bodies = {
                keyed.id: '{"payload":{"n":1},"keys":["dep:psp"],"format_version":1}',
                bare.id: '{"payload":null,"keys":[],"format_version":1}',
                payload.id: '{"payload":{"keys":["not the envelope\'s"]},"format_version":1}',
            }
            for task_id, body in bodies.items():
                await connection.tasks.update_one({"_id": task_id}, {"$set": {"body": body}})
            assert (await store.get(keyed.id)).keys == ["dep:psp"], "read before the upgrade"
            steps = await store.migrate()
            assert steps == [
                "create collection rdq_controls",
                "create collection rdq_workers",
                "create collection rdq_counts",
                "create collection rdq_dedup",
                "create index rdq_tasks.rdq_claim_by_handler",
                "create index rdq_tasks.rdq_in_flight_by_key",
                "create index rdq_tasks.rdq_claim_by_group",
                "create index rdq_workers.rdq_workers_seen",
                "create index rdq_counts.rdq_counts_queue_minute",
                "create index rdq_counts.rdq_counts_minute",
                "move keys out of the body of 2 task(s)",
                "drop index rdq_tasks.rdq_claim_by_priority",
            ]
            assert await store.migrate() == []
            doc = await connection.tasks.find_one({"_id": keyed.id})
            assert doc is not None and doc["keys"] == ["dep:psp"] and '"keys"' not in doc["body"]
            doc = await connection.tasks.find_one({"_id": bare.id})
            assert doc is not None and "keys" not in doc and '"keys"' not in doc["body"]
            assert (await store.get(keyed.id)).keys == ["dep:psp"]
            assert (await store.get(payload.id)).payload == {"keys": ["not the envelope's"]}
            await store.put_control(
                Control(queue="q", key="dep:psp", paused=True), expected_version=0
            )
            claimed = {c.task.id for c in await store.claim_due("q", 10, LONG)}
            assert claimed == {bare.id, payload.id}
        finally:
            await connection.client.drop_database(store.config.database)


# --- retry_now ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_retry_now_wakes_a_waiter(store: MongoStorage) -> None:
    task = _task()
    await store.enqueue(task, delay=timedelta(hours=1))
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiter = asyncio.create_task(store.wait_due("q", 20.0))
    await asyncio.sleep(1.0)
    assert not waiter.done()
    assert await store.retry_now("q", [task.id]) == 1
    assert await asyncio.wait_for(waiter, 15.0)
    assert loop.time() - started < 15.0
    (claimed,) = await store.claim_due("q", 10, LONG)
    assert claimed.task.id == task.id
