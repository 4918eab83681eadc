"""What the memory store promises beyond the shared kit: its injectable clock, named stores,
and safety across threads."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

import rdq
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_memory import MemoryStorage, forget_named_stores
from rdq_memory.testing import put_corrupt_task


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def task(task_id: str, queue: str = "q") -> Envelope:
    return Envelope(id=task_id, queue=queue, handler_ref="app:handler")


@pytest.mark.asyncio
async def test_due_ness_follows_the_injected_storage_clock_not_the_local_one() -> None:
    clock = FakeClock()  # the storage's "now" is years ahead of this machine's clock
    store = MemoryStorage(clock=clock)
    await store.connect()
    await store.enqueue(task("later"), delay=timedelta(seconds=30))
    assert (await store.get("later")).created_at == clock.now
    assert await store.claim_due("q", 10, timedelta(seconds=5)) == []
    clock.advance(30)
    [claimed] = await store.claim_due("q", 10, timedelta(seconds=5))
    assert claimed.task.lease_expires_at == clock.now + timedelta(seconds=5)


@pytest.mark.asyncio
async def test_a_lease_expires_by_the_storage_clock() -> None:
    clock = FakeClock()
    store = MemoryStorage(clock=clock)
    await store.connect()
    await store.enqueue(task("t"))
    [first] = await store.claim_due("q", 1, timedelta(seconds=60))
    clock.advance(59)
    assert await store.claim_due("q", 1, timedelta(seconds=60)) == []
    clock.advance(1)
    [second] = await store.claim_due("q", 1, timedelta(seconds=60))
    assert second.token != first.token
    assert [a.outcome for a in second.task.attempts] == [Outcome.LEASE_EXPIRED]
    assert second.task.attempts[0].finished_at == clock.now


@pytest.mark.asyncio
async def test_stats_age_is_measured_by_the_storage_clock() -> None:
    clock = FakeClock()
    store = MemoryStorage(clock=clock)
    await store.connect()
    await store.enqueue(task("t"))
    clock.advance(42)
    stats = await store.stats("q")
    assert (stats.pending, stats.oldest_pending_age, stats.as_of) == (1, 42.0, clock.now)


@pytest.mark.asyncio
async def test_a_named_store_is_shared_by_every_opener_in_the_process() -> None:
    forget_named_stores()
    async with (
        rdq.open_storage("memory://shared") as one,
        rdq.open_storage("memory://shared") as two,
    ):
        await one.enqueue(task("t"))
        assert (await two.get("t")).id == "t"
    async with rdq.open_storage("memory://") as private:
        with pytest.raises(rdq.NotFound):
            await private.get("t")
    forget_named_stores()


@pytest.mark.asyncio
async def test_wait_due_wakes_when_a_task_is_enqueued_from_another_thread() -> None:
    store = MemoryStorage()
    await store.connect()
    waiter = asyncio.create_task(store.wait_due("q", timeout=3600.0))
    await asyncio.sleep(0)  # one step: it looks at the empty queue and starts waiting
    assert not waiter.done()
    producer = threading.Thread(target=lambda: asyncio.run(store.enqueue(task("t"))))
    producer.start()
    producer.join()
    # Only the enqueue can wake it (its own timeout is an hour); the bound fails a lost wake.
    assert await asyncio.wait_for(waiter, 60) is True
    assert len(await store.claim_due("q", 1, timedelta(seconds=5))) == 1


def test_threads_with_their_own_event_loops_never_claim_the_same_task_twice() -> None:
    store = MemoryStorage()
    asyncio.run(store.connect())
    total = 400

    async def fill() -> None:
        await store.enqueue_batch([task(f"t{i}") for i in range(total)])

    asyncio.run(fill())
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def worker() -> None:
        async def drain() -> None:
            while claimed := await store.claim_due("q", 3, timedelta(minutes=5)):
                for c in claimed:
                    with lock:
                        seen[c.task.id] += 1
                    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED)
                    await store.complete(c.task.id, c.token, attempt)

        asyncio.run(drain())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == total
    assert set(seen.values()) == {1}

    async def check() -> None:
        stats = await store.stats("q")
        assert (stats.succeeded, stats.pending, stats.in_flight) == (total, 0, 0)
        assert (await store.get("t0")).status == Status.SUCCEEDED

    asyncio.run(check())


def test_a_naive_clock_is_reported_clearly() -> None:
    store = MemoryStorage(clock=lambda: datetime(2030, 1, 1))
    asyncio.run(store.connect())
    with pytest.raises(rdq.ConfigError, match="naive"):
        asyncio.run(store.enqueue(task("t")))


@pytest.mark.asyncio
async def test_complete_many_applies_fresh_claims_and_reports_stale_ones_per_item() -> None:
    from rdq.spi import Completion

    store = MemoryStorage()
    await store.connect()
    await store.enqueue_batch([task("a"), task("b")])
    a, b = await store.claim_due("q", 2, timedelta(minutes=1))
    done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
    results = await store.complete_many(
        [
            Completion(a.task.id, a.token, done),
            Completion(b.task.id, "not-the-token", done),
            Completion("missing", "t", done),
        ]
    )
    assert results[0] is None
    assert isinstance(results[1], rdq.StaleClaim)
    assert isinstance(results[2], rdq.NotFound)
    assert (await store.get("a")).status == Status.SUCCEEDED
    assert (await store.get("b")).status == Status.IN_FLIGHT, "the stale item changed nothing"


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("memory://x?timeout=0", "timeout"),
        ("memory://x?timeout=soon", "timeout"),
        ("memory://x?pool=3", "pool"),
        ("postgresql://x", "storage"),
    ],
)
def test_a_bad_url_raises_config_error_naming_the_option(url: str, key: str) -> None:
    with pytest.raises(rdq.ConfigError) as caught:
        MemoryStorage.from_url(url)
    assert caught.value.key == key


def test_the_timeout_option_is_kept_in_the_config() -> None:
    assert MemoryStorage.from_url("memory://x?timeout=2.5").config.timeout == 2.5
    assert MemoryStorage.from_url("memory://").config.timeout == 10.0


@pytest.mark.asyncio
async def test_the_corrupt_task_hook_refuses_a_value_that_decodes() -> None:
    async with MemoryStorage() as store:
        with pytest.raises(ValueError, match="decodes"):
            await put_corrupt_task(
                store, "q", "t", raw='{"id": "t", "queue": "q", "handler_ref": "h"}'
            )
        await put_corrupt_task(store, "q", "t", raw="{not json")
        got = await store.get("t")
        assert got.corrupt is not None and "{not json" in got.corrupt


@pytest.mark.asyncio
@pytest.mark.parametrize(("kind", "shown"), [("deep", "[[[["), ("far_time", "12000-01-01")])
async def test_stored_forms_too_deep_or_too_far_in_time_read_back_corrupt(
    kind: str, shown: str
) -> None:
    """A stored form whose payload nests deeper than the decoder goes, or whose created_at
    lies past the year 9999, is kept as stored and read back corrupt (never a RecursionError
    or an OverflowError), beside intact tasks of its batch."""
    async with MemoryStorage() as store:
        await store.enqueue(Envelope(id="ok", queue="q", handler_ref="h"))
        await put_corrupt_task(store, "q", "bad", kind=kind)
        got = await store.get("bad")
        assert got.corrupt is not None and shown in got.corrupt
        claimed = {c.task.id: c.task for c in await store.claim_due("q", 10, timedelta(minutes=1))}
        assert set(claimed) == {"ok", "bad"} and claimed["ok"].corrupt is None


@pytest.mark.asyncio
async def test_priorities_order_claims_by_the_injected_clock() -> None:
    clock = FakeClock()
    async with MemoryStorage(clock=clock) as store:
        await store.enqueue(Envelope(id="low", queue="q", handler_ref="h", priority=-1))
        clock.advance(1)
        await store.enqueue(Envelope(id="high-later", queue="q", handler_ref="h", priority=1))
        await store.enqueue(
            Envelope(id="high-not-due", queue="q", handler_ref="h", priority=5),
            delay=timedelta(seconds=30),
        )
        claimed = await store.claim_due("q", 3, timedelta(minutes=5))
        assert [c.task.id for c in claimed] == ["high-later", "low"]
        clock.advance(30)
        assert [c.task.id for c in await store.claim_due("q", 3, timedelta(minutes=5))] == [
            "high-not-due"
        ]
