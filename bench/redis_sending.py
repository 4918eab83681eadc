"""How rdq-redis sends commands, beside redis-py's own connections, in one run.

    python -m bench.redis_sending                # 6 rounds, appendfsync everysec

The store's connections pack commands with hiredis and bound a send without a task
(``rdq_redis._sending``); ``stock`` is the same store with its pool making redis-py's own
connections (the lease thread's store keeps rdq's). Each round opens a store of each kind in
turn (the order alternates between rounds) and runs:

- ``submit``: ``--submits`` single enqueues in series (wall and client CPU per call);
- ``drain``: one in-process ``rdq.Worker`` (concurrency 10, a no-op handler) draining
  ``--tasks`` tasks enqueued in batches beforehand: tasks/s, the process's CPU per task, and
  how many arguments the process packed per task (``complete_many`` and the claims).

Every drain is checked: each task SUCCEEDED, once. Medians over the rounds are printed with
each round's figures. Runs on a redis-server of its own (AOF on, ``--fsync``) unless ``--url``
names one; the benchmark's keys (prefix ``sendbench``) are deleted after each store.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection, ConnectionPool

import rdq
import rdq.logging
from rdq.spi import Envelope, Status
from rdq_redis import RedisStorage
from rdq_redis._sending import CheapSend

PREFIX = "sendbench"
CONCURRENCY = 10


def stock_class(cheap: type[AbstractConnection]) -> type[AbstractConnection]:
    """The redis-py class a store's connection class was made from."""
    return next(
        c for c in cheap.__mro__[1:] if issubclass(c, AbstractConnection) and c is not CheapSend
    )


def pool_of(store: RedisStorage) -> ConnectionPool:
    client = store._redis()
    if not isinstance(client, aioredis.Redis):
        raise SystemExit("bench.redis_sending runs on one server, not a Redis Cluster")
    return client.connection_pool


class Packed:
    """Arguments packed so far by the connections :func:`use` made."""

    count = 0


async def use(store: RedisStorage, kind: str) -> None:
    """Make the just-opened store's pool drop its connection and make ``kind`` ones from
    now on ('rdq': the store's own class, 'stock': redis-py's), counting what they pack."""
    pool = pool_of(store)
    shipped = pool.connection_class
    made = shipped if kind == "rdq" else stock_class(shipped)
    pack = made.pack_command

    def counting(self: AbstractConnection, *args: Any) -> Any:
        Packed.count += len(args)
        return pack(self, *args)

    await pool.disconnect()  # the one connection the open made: nothing else holds one yet
    pool.reset()  # type: ignore[no-untyped-call]
    pool.connection_class = type(f"Counting{made.__name__}", (made,), {"pack_command": counting})


async def submits(store: RedisStorage, n: int) -> tuple[float, float]:
    """(wall µs, client CPU µs) per single enqueue."""
    queue = f"s-{uuid.uuid4().hex[:8]}"
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        await store.enqueue(Envelope(id=f"{queue}-{i}", queue=queue, handler_ref="noop"))
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


async def drain(store: RedisStorage, n: int) -> tuple[float, float, float]:
    """(tasks/s, process CPU µs per task, arguments packed per task) of one worker."""
    queue = f"d-{uuid.uuid4().hex[:8]}"
    for start in range(0, n, 1000):
        await store.enqueue_batch(
            [
                Envelope(id=f"{queue}-{i}", queue=queue, handler_ref="noop")
                for i in range(start, min(n, start + 1000))
            ]
        )
    handled: defaultdict[str, int] = defaultdict(int)
    all_ran = asyncio.Event()
    app = rdq.App()
    app.queue(queue, concurrency=CONCURRENCY)

    @app.handler("noop", queue=queue)
    async def noop(body: Any, ctx: rdq.TaskContext) -> None:
        handled[ctx.task_id] += 1
        if len(handled) == n:
            all_ran.set()

    worker = rdq.Worker(app, store, queues=[queue])
    packed = Packed.count
    wall, cpu = time.perf_counter(), time.process_time()
    running = asyncio.create_task(worker.run())
    await all_ran.wait()
    # the last successes are written within a flush or two; no event says when
    while (await store.stats(queue)).succeeded < n:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    packed = Packed.count - packed
    worker.stop()  # untimed: a graceful stop waits for the worker's loops to wind down
    await running
    twice = [task_id for task_id, count in handled.items() if count != 1]
    succeeded = (await store.stats(queue)).succeeded
    if len(handled) != n or twice or succeeded != n:
        raise AssertionError(
            f"{len(handled)} of {n} tasks handled ({len(twice)} more than once), "
            f"{succeeded} SUCCEEDED"
        )
    for i in range(0, n, max(1, n // 50)):  # a sample read back: SUCCEEDED, one attempt
        task = await store.get(f"{queue}-{i}")
        if task.status is not Status.SUCCEEDED or task.attempt_count != 1:
            raise AssertionError(f"{task.id}: {task.status}, {task.attempt_count} attempts")
    return n / wall, cpu / n * 1e6, packed / n


async def clear(raw: aioredis.Redis) -> None:
    """Every key of the benchmark's prefix (the next store's ``migrate`` writes the layout)."""
    async for key in raw.scan_iter(match=f"{PREFIX}:*", count=1000):
        await raw.unlink(key)


async def measure(url: str, args: argparse.Namespace) -> None:
    rdq.logging.configure(json=True, level="WARNING")
    raw = aioredis.Redis.from_url(url)
    found: dict[str, defaultdict[str, list[float]]] = {
        kind: defaultdict(list) for kind in ("rdq", "stock")
    }
    try:
        for round_ in range(args.rounds):
            kinds = ["rdq", "stock"] if round_ % 2 == 0 else ["stock", "rdq"]
            for kind in kinds:
                async with rdq.open_storage(url, prefix=PREFIX) as store:
                    if not isinstance(store, RedisStorage):
                        raise SystemExit(f"{url}: not a Redis store")
                    await use(store, kind)
                    await store.migrate()
                    wall, cpu = await submits(store, args.submits)
                    rate, cpu_task, packed = await drain(store, args.tasks)
                await clear(raw)
                figures = found[kind]
                figures["submit µs"].append(wall)
                figures["submit CPU µs"].append(cpu)
                figures["drain tasks/s"].append(rate)
                figures["drain CPU µs/task"].append(cpu_task)
                figures["arguments/task"].append(packed)
                print(
                    f"round {round_ + 1} {kind:<5}: submit {wall:6.0f} µs (CPU {cpu:4.0f}), "
                    f"drain {rate:7,.0f} tasks/s (CPU {cpu_task:4.0f} µs/task, "
                    f"{packed:4.1f} arguments packed per task)",
                    flush=True,
                )
    finally:
        await raw.aclose()
    print(f"\nmedians of {args.rounds} rounds | rdq's connections | redis-py's | ratio")
    for metric in found["rdq"]:
        ours = statistics.median(found["rdq"][metric])
        theirs = statistics.median(found["stock"][metric])
        ratio = f"{ours / theirs:5.2f}" if theirs else "    –"
        print(f"{metric:<18} | {ours:10,.1f} | {theirs:10,.1f} | {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing Redis (default: a redis-server of its own)")
    parser.add_argument("--fsync", choices=["always", "everysec"], default="everysec")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per drain")
    parser.add_argument("--submits", type=int, default=2_000, help="single enqueues per run")
    args = parser.parse_args()
    if args.url:
        asyncio.run(measure(args.url, args))
        return
    from rdq_compliance.servers.redis import RedisServer

    aof = ["--appendonly", "yes", "--appendfsync", args.fsync]
    with RedisServer(args=aof) as server:
        asyncio.run(measure(server.url, args))


if __name__ == "__main__":
    main()
