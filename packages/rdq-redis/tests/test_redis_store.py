"""What the Redis plugin promises beyond the kit: its registration, key layout, script
handling, notify, URL options and DLQ scanning details."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis.exceptions import NoScriptError

import rdq_redis._notify as notify_module
import rdq_redis._pages as pages_module
import rdq_redis._store as store_module
from rdq import open_storage
from rdq.errors import ConfigError, IDConflict, NotFound, StaleClaim, StorageError
from rdq.spi import (
    Attempt,
    Completion,
    DLQFilter,
    Envelope,
    Outcome,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
)
from rdq_redis._codec import to_us
from rdq_redis._queries import SCRIPT_NAMES

LEASE = timedelta(minutes=5)
T = TypeVar("T")


PATIENCE = 60.0


def new_queue(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_task(queue: str, task_id: str | None = None, **fields: Any) -> Envelope:
    fields.setdefault("handler_ref", "tests.handlers:noop")
    return Envelope(id=task_id or f"t-{uuid.uuid4().hex}", queue=queue, **fields)


def failed(number: int, error_type: str = "Boom") -> Attempt:
    return Attempt(number=number, outcome=Outcome.FAILED, error_type=error_type)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str, patience: float = PATIENCE
) -> T:
    """Call ``probe`` until it returns something other than None; fail after ``patience``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        result = await probe()
        if result is not None:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {patience:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_plugin_serves_redis_and_rediss_without_importing_the_driver() -> None:
    code = (
        "import sys\n"
        "from rdq import installed_backends\n"
        "backends, broken = installed_backends()\n"
        "schemes = {b.scheme: b.distribution for b in backends}\n"
        "assert schemes.get('redis') == 'rdq-redis', schemes\n"
        "assert schemes.get('rediss') == 'rdq-redis', schemes\n"
        "assert 'redis' not in sys.modules, 'listing backends imported redis-py'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_every_script_ships_as_a_lua_file_in_the_package() -> None:
    lua = resources.files("rdq_redis") / "lua"
    for name in ("_lib", "_flow", *SCRIPT_NAMES):
        assert (lua / f"{name}.lua").is_file(), name


def test_open_storage_builds_an_unconnected_redis_store() -> None:
    store = open_storage("redis://127.0.0.1:1/0?prefix=app1")
    assert repr(store) == "RedisStorage(address='127.0.0.1:1', prefix='app1')"
    assert open_storage("rediss://example.invalid:6380/0") is not None


@pytest.mark.parametrize("prefix", ["", "a{b}", "with space", "x" * 65])
def test_a_bad_key_prefix_is_a_config_error(prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        open_storage("redis://127.0.0.1:6379/0", prefix=prefix)


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("redis://h/0?decode_responses=true", "decode_responses"),
        ("redis://h/0?cluster=maybe", None),
        ("redis://h:99999/0", "storage"),
    ],
)
def test_a_bad_url_option_is_a_config_error(url: str, option: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    assert info.value.key == option


@pytest.mark.asyncio
async def test_every_key_of_a_queue_shares_one_cluster_slot(
    storage: Storage, redis_url: str, key_prefix: str
) -> None:
    queue = new_queue()
    tasks = [new_task(queue) for _ in range(5)]
    await storage.enqueue_batch(tasks)
    claimed = await storage.claim_due(queue, 3, LEASE)
    await storage.complete(claimed[0].task.id, claimed[0].token, failed(1))
    await storage.dead_letter(claimed[1].task.id, claimed[1].token, failed(1))
    unclaimed = {t.id for t in tasks} - {c.task.id for c in claimed}
    assert await storage.cancel(queue, [min(unclaimed)]) == 1

    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [k.decode() async for k in client.scan_iter(match=f"{key_prefix}:*")]
    finally:
        await client.aclose()
    queue_keys = [k for k in keys if k.startswith(f"{key_prefix}:{{{queue}}}:")]
    index_keys = [k for k in keys if k.startswith(f"{key_prefix}:id:")]
    global_keys = {f"{key_prefix}:queues", f"{key_prefix}:layout"}
    assert sorted(queue_keys + index_keys + sorted(global_keys)) == sorted(keys)
    assert {f"{key_prefix}:id:{{{t.id}}}" for t in tasks} == set(index_keys)
    suffixes = {k.split("}:", 1)[1] for k in queue_keys if ":task:" not in k}
    assert {s.split(":", 1)[0] for s in suffixes} == {
        "levels",
        "pending",
        "inflight",
        "dead",
        "succeeded",
        "cancelled",
        "groups",
        "group",
    }
    assert {"pending:0", "inflight:0"} <= suffixes
    assert len({key_slot(k.encode()) for k in queue_keys}) == 1


@pytest.mark.asyncio
async def test_scripts_are_loaded_again_after_the_server_forgets_them(
    storage: Storage, redis_url: str
) -> None:
    queue = new_queue()
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    assert await storage.enqueue(new_task(queue)) is True
    assert len(await storage.claim_due(queue, 10, LEASE)) == 1


@pytest.mark.asyncio
async def test_created_at_is_read_from_the_server_clock(storage: Storage, redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        before = await client.time()
        task = new_task(new_queue())
        await storage.enqueue(task)
        after = await client.time()
    finally:
        await client.aclose()
    created = (await storage.get(task.id)).created_at
    assert created is not None
    assert before[0] * 1_000_000 + before[1] <= to_us(created) <= after[0] * 1_000_000 + after[1]


@pytest.mark.asyncio
async def test_wait_due_wakes_on_a_signal_when_another_connection_enqueues(
    storage: Storage, storage_url: str, redis_url: str, key_prefix: str
) -> None:
    queue = new_queue()
    channel = f"{key_prefix}:{{{queue}}}:wake"
    waiter = asyncio.create_task(storage.wait_due(queue, 120.0))
    raw = aioredis.Redis.from_url(redis_url)
    try:

        async def subscribed() -> bool | None:
            ((_, count),) = await raw.pubsub_numsub(channel)
            return True if count >= 1 else None

        # Only once the waiter listens (and so has seen an empty queue) does a task arrive:
        # nothing but the enqueue's signal can wake it before its 120 s timeout.
        await eventually(subscribed, "wait_due to subscribe")
    finally:
        await raw.aclose()
    assert not waiter.done()
    async with open_storage(storage_url) as producer:
        await producer.enqueue(new_task(queue))
    assert await asyncio.wait_for(waiter, PATIENCE) is True


async def _subscribers(redis_url: str, channel: str) -> int:
    raw = aioredis.Redis.from_url(redis_url)
    try:
        ((_, count),) = await raw.pubsub_numsub(channel)
    finally:
        await raw.aclose()
    return int(count)


@pytest.mark.asyncio
async def test_wait_due_keeps_one_subscription_per_queue_between_calls(
    storage_url: str, redis_url: str, key_prefix: str
) -> None:
    queue = new_queue()
    channel = f"{key_prefix}:{{{queue}}}:wake"
    async with open_storage(storage_url) as store:
        for _ in range(3):
            assert await store.wait_due(queue, 0.05) is False
            assert await _subscribers(redis_url, channel) == 1
    assert await _subscribers(redis_url, channel) == 0  # aclose released it


@pytest.mark.asyncio
async def test_wait_due_ignores_signals_from_before_the_call(storage: Storage) -> None:
    queue = new_queue()
    assert await storage.wait_due(queue, 0.05) is False  # the listener now exists
    await storage.enqueue(new_task(queue))  # signals, while nobody waits
    assert len(await storage.claim_due(queue, 1, LEASE)) == 1
    # The old signal is not a reason to wake: nothing is due (and the lease is long).
    assert await storage.wait_due(queue, 0.3) is False


@pytest.mark.asyncio
async def test_concurrent_waiters_on_one_queue_all_wake(
    storage: Storage, storage_url: str, redis_url: str, key_prefix: str
) -> None:
    queue = new_queue()
    channel = f"{key_prefix}:{{{queue}}}:wake"
    waiters = [asyncio.create_task(storage.wait_due(queue, 120.0)) for _ in range(3)]

    async def all_subscribed() -> bool | None:
        return True if await _subscribers(redis_url, channel) == 3 else None

    await eventually(all_subscribed, "three subscriptions")
    async with open_storage(storage_url) as producer:
        await producer.enqueue(new_task(queue))
    assert await asyncio.wait_for(asyncio.gather(*waiters), PATIENCE) == [True] * 3


@pytest.mark.asyncio
async def test_wait_due_returns_true_at_once_when_a_task_is_due(storage: Storage) -> None:
    queue = new_queue()
    await storage.enqueue(new_task(queue))
    assert await storage.wait_due(queue, 60.0) is True


@pytest.mark.asyncio
async def test_wait_due_wakes_at_the_next_due_time_without_a_signal(storage: Storage) -> None:
    assert isinstance(storage, store_module.RedisStorage)
    waiters = storage._live().waiters  # white-box: to see what the waiter saw when it looked
    looks: list[tuple[int, int | None]] = []
    look = waiters._next_due

    async def next_due(keys: Any) -> tuple[int, int | None]:
        seen = await look(keys)
        looks.append(seen)
        return seen

    waiters._next_due = next_due  # type: ignore[method-assign]
    # The waiter must look while the task is not yet due (else it returns at once and this
    # proves nothing): if this machine was slower than the delay, try a longer one. The
    # enqueue's signal went out before the call, so only the due time can end the wait.
    for delay in (0.3, 1.0, 5.0, 25.0):
        queue = new_queue()
        await storage.enqueue(new_task(queue), delay=timedelta(seconds=delay))
        first_look = len(looks)
        assert await asyncio.wait_for(storage.wait_due(queue, 3600.0), delay + PATIENCE) is True
        assert len(await storage.claim_due(queue, 1, LEASE)) == 1  # due when it woke
        now_us, due_us = looks[first_look]
        if due_us is not None and due_us > now_us:
            return  # it looked before the task was due, then woke at the due time
    pytest.fail("wait_due never looked before the task was due, even with a 25 s delay")


@pytest.mark.asyncio
async def test_wait_due_on_an_idle_queue_times_out_with_false(storage: Storage) -> None:
    assert await storage.wait_due(new_queue(), 0.2) is False


@pytest.mark.asyncio
async def test_key_prefixes_separate_stores_on_one_server(redis_url: str, key_prefix: str) -> None:
    task_id = f"shared-{uuid.uuid4().hex}"
    async with (
        open_storage(redis_url, prefix=f"{key_prefix}:a") as a,
        open_storage(redis_url, prefix=f"{key_prefix}:b") as b,
    ):
        await a.enqueue(new_task("qa", task_id))
        await b.enqueue(new_task("qb", task_id))
        assert (await a.get(task_id)).queue == "qa"
        assert (await b.get(task_id)).queue == "qb"


@pytest.mark.asyncio
async def test_enqueue_batch_with_an_id_conflict_stores_nothing(storage: Storage) -> None:
    queue, other = new_queue(), new_queue()
    taken = new_task(other)
    await storage.enqueue(taken)
    fresh = new_task(queue)
    with pytest.raises(IDConflict) as info:
        await storage.enqueue_batch([fresh, new_task(queue, taken.id)])
    assert info.value.existing_queue == other
    with pytest.raises(NotFound):
        await storage.get(fresh.id)
    assert (await storage.stats(queue)).pending == 0


@pytest.mark.asyncio
async def test_dlq_pages_fill_up_across_bounded_scans(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A selective filter over a long DLQ: each script call scans a few entries, the page
    still comes back full and in order."""
    monkeypatch.setattr(pages_module, "SCAN_BUDGET", 3)
    queue = new_queue()
    order = await _dead_letter(
        storage, queue, ["Rare" if i % 5 == 0 else "Common" for i in range(25)]
    )
    rare = [task_id for task_id, kind in order if kind == "Rare"]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        tasks, cursor = await storage.dlq_list(
            queue, DLQFilter(error_type="Rare"), Page(limit=2, cursor=cursor)
        )
        pages += 1
        seen += [t.id for t in tasks]
        if cursor is None:
            break
        assert len(tasks) == 2
    assert seen == rare
    assert pages == 3


@pytest.mark.asyncio
async def test_dlq_entries_dead_lettered_in_the_same_microsecond_page_by_id(
    storage: Storage, redis_url: str, key_prefix: str
) -> None:
    """Equal scores in the dead set order by id bytes; the cursor continues inside them."""
    queue = new_queue()
    order = await _dead_letter(storage, queue, ["Boom"] * 5)
    ids = [task_id for task_id, _ in order]
    # Make them all dead-lettered at the same instant (a collision TIME can produce).
    same = (await storage.get(ids[0])).dead_lettered_at
    assert same is not None
    client = aioredis.Redis.from_url(redis_url)
    try:
        for task_id in ids:
            await client.zadd(f"{key_prefix}:{{{queue}}}:dead", {task_id: to_us(same)})
            await client.hset(
                f"{key_prefix}:{{{queue}}}:task:{task_id}", "dead_lettered_at", str(to_us(same))
            )
    finally:
        await client.aclose()
    seen: list[str] = []
    cursor: str | None = None
    while True:
        tasks, cursor = await storage.dlq_list(queue, None, Page(limit=2, cursor=cursor))
        seen += [t.id for t in tasks]
        if cursor is None:
            break
    assert seen == sorted(ids, key=str.encode)


@pytest.mark.asyncio
async def test_redrive_and_purge_by_filter_act_only_on_matching_dead_tasks(
    storage: Storage,
) -> None:
    queue = new_queue()
    order = await _dead_letter(storage, queue, ["A", "B", "A", "B"])
    assert await storage.redrive(queue, Selector.by_filter(DLQFilter(error_type="A"))) == 2
    assert await storage.purge(queue, Selector.by_filter(DLQFilter(error_type="B"))) == 2
    for task_id, kind in order:
        if kind == "A":
            task = await storage.get(task_id)
            assert task.status is Status.PENDING
            assert task.redrive_count == 1
        else:
            with pytest.raises(NotFound):
                await storage.get(task_id)
    stats = await storage.stats(queue)
    assert (stats.pending, stats.dlq_depth) == (2, 0)


@pytest.mark.asyncio
async def test_purge_succeeded_deletes_in_batches(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_PURGE_BATCH", 4)
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue) for _ in range(10)])
    for claimed in await storage.claim_due(queue, 10, LEASE):
        await storage.complete(claimed.task.id, claimed.token, failed(1))
    assert (await storage.stats(queue)).succeeded == 10
    cutoff = (await storage.stats(queue)).as_of + timedelta(microseconds=1)
    assert await storage.purge_succeeded(queue, cutoff) == 10
    assert (await storage.stats(queue)).succeeded == 0


async def _dead_letter(storage: Storage, queue: str, kinds: list[str]) -> list[tuple[str, str]]:
    """Dead-letter one task per entry of ``kinds`` (its error type), one after another."""
    order: list[tuple[str, str]] = []
    for kind in kinds:
        task = new_task(queue)
        await storage.enqueue(task)
        (claimed,) = await storage.claim_due(queue, 1, LEASE)
        await storage.dead_letter(claimed.task.id, claimed.token, failed(1, kind))
        order.append((task.id, kind))
    return order


@pytest.mark.asyncio
async def test_far_future_times_round_trip_exactly(storage: Storage) -> None:
    """Beyond 2^53 µs (year 2255) a Lua double is no longer exact; stored times still are."""
    queue = new_queue()
    far = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    task = new_task(queue, next_attempt_at=far)
    await storage.enqueue(task)
    assert (await storage.get(task.id)).next_attempt_at == far
    assert await storage.claim_due(queue, 1, LEASE) == []


@pytest.mark.asyncio
async def test_migrate_refuses_a_server_older_than_redis_5(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mock, for the one fault a real server of this machine cannot produce: its version."""
    client = storage._redis()  # type: ignore[attr-defined]
    real_info = client.info

    async def old_info(section: str | None = None) -> dict[str, object]:
        info = dict(await real_info(section))
        info["redis_version"] = "4.0.14"
        return info

    monkeypatch.setattr(client, "info", old_info)
    with pytest.raises(StorageError, match=r"version 4\.0\.14; rdq-redis needs 5\.0"):
        await storage.migrate()


@pytest.mark.asyncio
async def test_a_script_lost_again_after_its_reload_runs_by_its_text(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mock for a race a test cannot time: the script cache is flushed between redis-py's
    reload and its second EVALSHA, so NOSCRIPT escapes the driver."""
    scripts = storage._live().scripts  # type: ignore[attr-defined]
    calls = 0

    async def always_noscript(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        raise NoScriptError("No matching script. Please use EVAL.")

    # Calls look __call__ up on the class: every registered script now fails that way.
    monkeypatch.setattr(type(scripts.by_name["enqueue"]), "__call__", always_noscript)
    queue = new_queue()
    assert await storage.enqueue(new_task(queue)) is True
    assert calls == 1
    assert (await storage.stats(queue)).pending == 1


@pytest.mark.asyncio
async def test_wait_due_keeps_a_bounded_number_of_subscriptions(
    storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify_module, "KEPT_LISTENERS", 2)
    queues = [new_queue() for _ in range(4)]
    async with open_storage(storage_url) as store:
        for queue in queues:
            assert await store.wait_due(queue, 0.01) is False
        listeners = store._live().waiters._listeners  # type: ignore[attr-defined]
        assert sorted(listeners) == sorted(queues[:2])


@pytest.mark.asyncio
async def test_complete_many_across_queues_reports_each_item_in_order(storage: Storage) -> None:
    q1, q2 = new_queue(), new_queue()
    await storage.enqueue_batch([new_task(q1), new_task(q2), new_task(q2)])
    (a,) = await storage.claim_due(q1, 5, LEASE)
    b, c = await storage.claim_due(q2, 5, LEASE)
    ok = Attempt(number=1, outcome=Outcome.SUCCEEDED)
    results = await storage.complete_many(
        [
            Completion(a.task.id, a.token, ok),
            Completion(b.task.id, b.token, ok),
            Completion(b.task.id, b.token, ok),  # the same claim twice: completed once
            Completion(c.task.id, "not-a-token-of-this-store", ok),
            Completion("t-never-enqueued", "q/made-up", ok),
        ]
    )
    assert results[:2] == [None, None]
    assert isinstance(results[2], StaleClaim)
    assert isinstance(results[3], StaleClaim)
    assert isinstance(results[4], NotFound)
    assert (await storage.get(b.task.id)).attempts == [ok]
    assert (await storage.get(c.task.id)).status is Status.IN_FLIGHT
    assert [(await storage.stats(q)).succeeded for q in (q1, q2)] == [1, 1]


@pytest.mark.asyncio
async def test_the_tokens_of_one_claim_are_distinct_and_each_fences_only_its_own_task(
    storage: Storage,
) -> None:
    """A claim sends one random stem and the script numbers the tokens it hands out, so the
    tokens of one claim differ only in their number: none of them resolves another's task,
    and a claim that asked for more slots than it filled hands out no more tokens."""
    queue = new_queue()
    await storage.enqueue_batch([new_task(queue) for _ in range(30)])
    first = await storage.claim_due(queue, 20, LEASE)
    second = await storage.claim_due(queue, 100, LEASE)
    assert (len(first), len(second)) == (20, 10)
    claims = first + second
    tokens = [c.token for c in claims]
    assert len(set(tokens)) == 30
    assert all(token.startswith(f"{queue}/") for token in tokens)
    ok = Attempt(number=1, outcome=Outcome.SUCCEEDED)
    # every task offered the token of its neighbour in the claim: all stale, nothing changes
    crossed = [
        Completion(c.task.id, claims[(i + 1) % len(claims)].token, ok) for i, c in enumerate(claims)
    ]
    assert all(isinstance(r, StaleClaim) for r in await storage.complete_many(crossed))
    assert (await storage.stats(queue)).in_flight == 30
    results = await storage.complete_many([Completion(c.task.id, c.token, ok) for c in claims])
    assert results == [None] * 30
    assert (await storage.stats(queue)).succeeded == 30


@pytest.mark.asyncio
async def test_pending_pages_merge_priorities_and_survive_the_cursor_task_leaving(
    storage: Storage,
) -> None:
    """Equal status times across several priority sets page by id bytes; a cursor whose own
    task left the set since (here: cancelled) still continues exactly after it."""
    queue = new_queue()
    same = (await storage.now()) - timedelta(hours=1)
    ids = [f"t-{n:02d}" for n in range(9)]
    for n, task_id in enumerate(ids):
        await storage.enqueue(
            new_task(queue, f"{queue}-{task_id}", next_attempt_at=same, priority=(5, 0, -3)[n % 3])
        )
    full = [f"{queue}-{task_id}" for task_id in ids]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        tasks, cursor = await storage.list_tasks(
            queue, TaskFilter(status=Status.PENDING), Page(limit=2, cursor=cursor)
        )
        seen += [t.id for t in tasks]
        if cursor is None:
            break
        assert await storage.cancel(queue, [tasks[-1].id]) == 1
    assert seen == sorted(full, key=str.encode)


async def _commands_run(client: aioredis.Redis) -> int:
    """How many commands the server ran since its statistics were reset (script calls and
    the commands the scripts made, each counted)."""
    stats = await client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


@pytest.mark.asyncio
async def test_a_claim_does_no_work_per_delayed_task(storage: Storage, redis_url: str) -> None:
    """Thousands of delayed tasks at every priority do not add one command to a claim: each
    priority's set is read only up to now (O(log n + limit))."""
    queue = new_queue()
    far = timedelta(hours=1)
    for priority in (-10, 0, 10):
        delayed = [new_task(queue, priority=priority) for _ in range(1000)]
        await storage.enqueue_batch(delayed, delay=far)
    due = [new_task(queue, priority=p) for p in (-10, 0, 10)]
    await storage.enqueue_batch(due)
    client = aioredis.Redis.from_url(redis_url)
    try:
        await storage.claim_due(new_queue(), 1, LEASE)  # warm: scripts loaded, connection open
        await client.config_resetstat()
        claimed = await storage.claim_due(queue, 10, LEASE)
        commands = await _commands_run(client)
    finally:
        await client.aclose()
    assert [c.task.id for c in claimed] == [t.id for t in reversed(due)]
    # one EVALSHA, TIME, the levels, two range reads and a set check per priority, and a few
    # writes per claimed task: a few dozen, whatever the number of delayed tasks
    assert commands < 60, commands
