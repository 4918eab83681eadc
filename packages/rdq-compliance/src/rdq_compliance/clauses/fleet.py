"""The worker registry (capability ``worker_registry``) and per-minute counts (capability
``counters``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rdq.errors import ValidationError
from rdq.spi import Counts, Storage, WorkerInfo
from rdq_compliance._fixtures import StorageOpener
from rdq_compliance._flow_support import two_stores
from rdq_compliance._support import new_id

__all__ = ["CountClauses", "WorkerRegistryClauses"]


def _worker(**fields: object) -> WorkerInfo:
    given: dict[str, object] = {
        "id": f"kit-host:{new_id('pid')}",
        "host": "kit-host",
        "pid": 42,
        "version": "9.9",
        "queues": ["a", "b"],
    }
    return WorkerInfo(**(given | fields))  # type: ignore[arg-type]


class WorkerRegistryClauses:
    """``heartbeat_worker`` keeps each worker's registration under its id with ``seen_at`` the
    store's now and ``started_at`` the store's time of its first heartbeat; ``list_workers``
    lists every one by id; ``remove_worker`` and ``purge_workers`` forget them."""

    capability = "worker_registry"
    since = 3

    @pytest.mark.asyncio
    async def test_a_heartbeat_stores_the_worker_with_the_store_time_and_keeps_its_start(
        self, storage: Storage
    ) -> None:
        info = _worker(concurrency=10, held=3, extra={"region": "eu-1"})
        before = await storage.now()
        first = await storage.heartbeat_worker(info)
        assert first.started_at is not None and first.seen_at is not None
        assert before <= first.started_at == first.seen_at <= await storage.now()
        await asyncio.sleep(0.01)
        later = await storage.heartbeat_worker(
            WorkerInfo(id=info.id, host="kit-host", held=7, state="stopping")
        )
        assert later.started_at == first.started_at, "the start is the first heartbeat's"
        assert later.seen_at is not None and later.seen_at > first.seen_at
        listed = {w.id: w for w in await storage.list_workers()}
        got = listed[info.id]
        assert (got.held, got.state, got.started_at, got.seen_at) == (
            7,
            "stopping",
            first.started_at,
            later.seen_at,
        )
        assert got.queues == [], "a heartbeat replaces what the worker said before"

    @pytest.mark.asyncio
    async def test_every_field_of_a_worker_is_kept_as_given(self, storage: Storage) -> None:
        info = _worker(concurrency=8, held=2, heartbeat=5.0, extra={"k": [1, "✓"]})
        await storage.heartbeat_worker(info)
        got = {w.id: w for w in await storage.list_workers()}[info.id]
        assert (got.host, got.pid, got.version, got.queues, got.concurrency, got.heartbeat) == (
            "kit-host",
            42,
            "9.9",
            ["a", "b"],
            8,
            5.0,
        )
        assert got.extra == {"k": [1, "✓"]}

    @pytest.mark.asyncio
    async def test_workers_are_listed_by_id_and_removed_one_by_one(self, storage: Storage) -> None:
        mine = sorted(_worker().id for _ in range(3))
        for worker_id in mine:
            await storage.heartbeat_worker(WorkerInfo(id=worker_id))
        ids = [w.id for w in await storage.list_workers()]
        assert ids == sorted(ids), "by id"
        assert set(mine) <= set(ids)
        assert await storage.remove_worker(mine[0])
        assert not await storage.remove_worker(mine[0])
        assert mine[0] not in {w.id for w in await storage.list_workers()}

    @pytest.mark.asyncio
    async def test_purge_workers_forgets_only_those_seen_before_the_cutoff(
        self, storage: Storage
    ) -> None:
        old = await storage.heartbeat_worker(_worker())
        await asyncio.sleep(0.01)
        new = await storage.heartbeat_worker(_worker())
        assert old.seen_at is not None and new.seen_at is not None
        cut = old.seen_at + (new.seen_at - old.seen_at) / 2
        assert await storage.purge_workers(cut) >= 1
        left = {w.id for w in await storage.list_workers()}
        assert old.id not in left and new.id in left

    @pytest.mark.asyncio
    async def test_a_bad_worker_registration_raises_validation_error(
        self, storage: Storage
    ) -> None:
        for bad, field in (
            (WorkerInfo(id=""), "info.id"),
            (_worker(pid=-1), "info.pid"),
            (_worker(queues=["has space"]), "info.queues[0]"),
            (_worker(heartbeat=0.0), "info.heartbeat"),
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.heartbeat_worker(bad)
            assert caught.value.field == field

    @pytest.mark.asyncio
    async def test_purge_workers_goes_by_the_last_heartbeat_not_the_first(
        self, storage: Storage
    ) -> None:
        alive = await storage.heartbeat_worker(_worker())
        silent = await storage.heartbeat_worker(_worker())
        await asyncio.sleep(0.01)
        marker = await storage.heartbeat_worker(_worker())
        await asyncio.sleep(0.01)
        again = await storage.heartbeat_worker(WorkerInfo(id=alive.id, host="kit-host"))
        assert again.started_at == alive.started_at and marker.seen_at is not None
        assert await storage.purge_workers(marker.seen_at) >= 1
        left = {w.id for w in await storage.list_workers()}
        assert silent.id not in left, "silent since before the cut-off"
        assert alive.id in left, "started before the cut-off, heard from since"
        assert marker.id in left, "seen at the cut-off itself is not before it"

    @pytest.mark.asyncio
    async def test_a_heartbeat_stamps_the_store_times_whatever_the_worker_sends(
        self, storage: Storage
    ) -> None:
        long_ago = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
        before = await storage.now()
        first = await storage.heartbeat_worker(_worker(started_at=long_ago, seen_at=long_ago))
        assert first.started_at is not None and first.started_at >= before
        assert first.seen_at == first.started_at
        later = await storage.heartbeat_worker(
            _worker(id=first.id, started_at=datetime(2050, 1, 1, tzinfo=UTC), seen_at=long_ago)
        )
        assert later.started_at == first.started_at, "the start stays the first heartbeat's"
        assert later.seen_at is not None and later.seen_at >= first.seen_at
        got = {w.id: w for w in await storage.list_workers()}[first.id]
        assert (got.started_at, got.seen_at) == (first.started_at, later.seen_at)

    @pytest.mark.asyncio
    async def test_heartbeats_of_several_workers_each_keep_their_own_start(
        self, storage: Storage
    ) -> None:
        """Workers of one host, heard from in turn: each start is its own first heartbeat's."""
        ids = [_worker().id for _ in range(3)]
        starts: dict[str, datetime | None] = {}
        for round_ in range(3):
            for worker_id in ids:
                stored = await storage.heartbeat_worker(_worker(id=worker_id, held=round_))
                starts.setdefault(worker_id, stored.started_at)
                assert stored.started_at == starts[worker_id], f"{worker_id}, round {round_}"
                await asyncio.sleep(0.005)
        assert len(set(starts.values())) == 3, "three workers started at three moments"
        listed = {w.id: w for w in await storage.list_workers()}
        assert {i: listed[i].started_at for i in ids} == starts
        assert all(listed[i].held == 2 for i in ids)

    @pytest.mark.asyncio
    async def test_a_worker_removed_and_heard_from_again_starts_afresh(
        self, storage: Storage
    ) -> None:
        first = await storage.heartbeat_worker(_worker())
        assert await storage.remove_worker(first.id)
        await asyncio.sleep(0.01)
        back = await storage.heartbeat_worker(WorkerInfo(id=first.id, host="kit-host"))
        assert back.started_at is not None and first.started_at is not None
        assert back.started_at > first.started_at, "a new start: it was forgotten"
        assert back.started_at == back.seen_at

    @pytest.mark.asyncio
    async def test_the_registry_is_one_for_every_store_instance(
        self, storage: Storage, open_peer_storage: StorageOpener
    ) -> None:
        async with two_stores(open_peer_storage) as (a, b):
            first = await a.heartbeat_worker(_worker())
            await asyncio.sleep(0.01)
            later = await b.heartbeat_worker(WorkerInfo(id=first.id, held=4))
            assert later.started_at == first.started_at, "the start of the fleet's registry"
            seen = {w.id: w for w in await a.list_workers()}[first.id]
            assert (seen.held, seen.seen_at) == (4, later.seen_at)
            assert await b.remove_worker(first.id)
            assert first.id not in {w.id for w in await a.list_workers()}


def _minute(offset: int = 0) -> datetime:
    base = datetime(2031, 5, 6, 7, 8, tzinfo=UTC)
    return base + timedelta(minutes=offset)


class CountClauses:
    """``add_counts`` adds to the counts of each (queue, minute), atomically: concurrent
    additions lose none; ``read_counts`` reads the minutes from ``since`` on, by queue then
    minute; ``purge_counts`` deletes the minutes before a cut-off."""

    capability = "counters"
    since = 3

    @pytest.mark.asyncio
    async def test_counts_add_up_per_queue_and_minute(self, storage: Storage, queue: str) -> None:
        await storage.add_counts(
            [
                Counts(queue=queue, minute=_minute(0), succeeded=5, failed=1),
                Counts(queue=queue, minute=_minute(1), dead=2, deferred=3),
            ]
        )
        await storage.add_counts([Counts(queue=queue, minute=_minute(0), succeeded=2, dead=1)])
        got = await storage.read_counts(queue, _minute(0))
        assert got == [
            Counts(queue=queue, minute=_minute(0), succeeded=7, failed=1, dead=1),
            Counts(queue=queue, minute=_minute(1), dead=2, deferred=3),
        ]
        assert await storage.read_counts(queue, _minute(1)) == got[1:]

    @pytest.mark.asyncio
    async def test_concurrent_additions_lose_none(self, storage: Storage, queue: str) -> None:
        async def writer() -> None:
            for _ in range(10):
                await storage.add_counts([Counts(queue=queue, minute=_minute(), succeeded=1)])

        await asyncio.gather(*(writer() for _ in range(8)))
        (got,) = await storage.read_counts(queue, _minute())
        assert got.succeeded == 80

    @pytest.mark.asyncio
    async def test_counts_of_every_queue_and_the_purge_of_old_minutes(
        self, storage: Storage, queue: str, other_queue: str
    ) -> None:
        await storage.add_counts(
            [
                Counts(queue=queue, minute=_minute(-10), failed=1),
                Counts(queue=other_queue, minute=_minute(-10), failed=2),
                Counts(queue=queue, minute=_minute(5), succeeded=1),
            ]
        )
        everything = await storage.read_counts(None, _minute(-10))
        mine = [(c.queue, c.minute) for c in everything if c.queue in (queue, other_queue)]
        assert mine == sorted(mine) and len(mine) == 3
        assert await storage.purge_counts(_minute(0)) >= 2
        left = [
            c
            for c in await storage.read_counts(None, _minute(-60))
            if c.queue in (queue, other_queue)
        ]
        assert [(c.queue, c.minute) for c in left] == [(queue, _minute(5))]

    @pytest.mark.asyncio
    async def test_counts_must_be_whole_minutes_of_non_negative_numbers(
        self, storage: Storage, queue: str
    ) -> None:
        for bad, field in (
            (Counts(queue=queue, minute=_minute() + timedelta(seconds=1)), "counts[0].minute"),
            (Counts(queue=queue, minute=_minute(), failed=-1), "counts[0].failed"),
            (Counts(queue=queue, minute=datetime(2031, 1, 1)), "counts[0].minute"),
        ):
            with pytest.raises(ValidationError) as caught:
                await storage.add_counts([bad])
            assert caught.value.field == field
        assert await storage.read_counts(queue, _minute(-60)) == []

    @pytest.mark.asyncio
    async def test_every_count_adds_up_over_repeated_additions_and_within_one_call(
        self, storage: Storage, queue: str
    ) -> None:
        minute = _minute(20)
        await storage.add_counts(
            [
                Counts(queue=queue, minute=minute, succeeded=1, failed=2, dead=3, deferred=4),
                Counts(queue=queue, minute=minute, succeeded=10, failed=20, dead=30, deferred=40),
                Counts(queue=queue, minute=_minute(21), deferred=1),
            ]
        )
        await storage.add_counts(
            [Counts(queue=queue, minute=minute, succeeded=100, failed=200, dead=300, deferred=1)]
        )
        got = await storage.read_counts(queue, minute)
        assert got == [
            Counts(queue=queue, minute=minute, succeeded=111, failed=222, dead=333, deferred=45),
            Counts(queue=queue, minute=_minute(21), deferred=1),
        ], "each of the four counts adds up: entries of one call and of every call"

    @pytest.mark.asyncio
    async def test_concurrent_additions_through_two_stores_lose_none(
        self, storage: Storage, open_peer_storage: StorageOpener, queue: str
    ) -> None:
        async with two_stores(open_peer_storage) as (a, b):

            async def writer(n: int) -> None:
                store = (a, b)[n % 2]
                for _ in range(10):
                    entry = Counts(queue=queue, minute=_minute(), failed=1, dead=2, deferred=n)
                    await store.add_counts([entry])

            await asyncio.gather(*(writer(n) for n in range(8)))
            (got,) = await a.read_counts(queue, _minute())
            assert (got.failed, got.dead, got.deferred) == (80, 160, 10 * sum(range(8)))

    @pytest.mark.asyncio
    async def test_read_counts_takes_the_minute_since_and_purge_counts_keeps_the_minute_before(
        self, storage: Storage, queue: str
    ) -> None:
        base = datetime(2001, 3, 4, 5, 6, tzinfo=UTC)
        minutes = [base + timedelta(minutes=n) for n in (-1, 0, 1)]
        await storage.add_counts([Counts(queue=queue, minute=m, succeeded=1) for m in minutes])
        assert [c.minute for c in await storage.read_counts(queue, base)] == minutes[1:], (
            "from since on: since itself included"
        )
        assert await storage.purge_counts(base) >= 1
        left = [c.minute for c in await storage.read_counts(queue, minutes[0])]
        assert left == minutes[1:], "only the minutes before the cut-off go"
