"""What a dedup key costs a submit: ``python -m bench.dedup``.

On a durable throwaway PostgreSQL (or ``--postgres URL``) and Redis (or ``--redis URL``),
through the store as the client calls it, each phase submits ``--tasks`` tasks of one queue
and times every call from the client:

* ``enqueue``: a plain submit, a new id each (the baseline);
* ``admit, key free``: a submit under a new dedup key each (``added``: the key's record
  written beside the task);
* ``admit, key held``: a submit under a key a live task holds (``skipped``: nothing written);
* ``admit, replace``: a submit under a held key in mode ``replace`` (the holder's payload
  rewritten: ``replaced``);
* ``admit, 16 at once, one key``: 16 concurrent submitters of one key (they queue on it).

Each store gets 200 plain submits to warm up, then ``--repeat`` rounds of every phase in turn
(a round's tasks on a queue of its own). It prints each phase's p50 and p99 (ms) and submits
per second, each the median of the rounds, and checks each phase's outcomes (every free key
added, every held one skipped or replaced, one live task per key).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from bench._servers import postgres
from rdq import open_storage
from rdq.spi import AdmitOutcome, Dedup, DedupMode, Envelope, Storage

PHASES = (
    "enqueue",
    "admit, key free",
    "admit, key held",
    "admit, replace",
    "admit, 16 at once, one key",
)


@contextlib.contextmanager
def redis(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from rdq_compliance.servers.redis import server_url

    with server_url() as found:
        yield found


def _task(queue: str, i: int) -> Envelope:
    return Envelope(id=f"t-{uuid.uuid4().hex}", queue=queue, handler_ref="sync", payload={"i": i})


async def _timed(calls: list[Callable[[], Awaitable[object]]], at_once: int = 1) -> list[float]:
    """Seconds each call took; ``at_once`` of them in flight together."""
    took: list[float] = []
    gate = asyncio.Semaphore(at_once)

    async def one(call: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            start = time.perf_counter()
            await call()
            took.append(time.perf_counter() - start)

    if at_once == 1:
        for call in calls:
            await one(call)
    else:
        await asyncio.gather(*(one(c) for c in calls))
    return took


async def _phases(storage: Storage, tasks: int) -> dict[str, tuple[list[float], float]]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    out: dict[str, tuple[list[float], float]] = {}

    async def run(
        name: str, calls: list[Callable[[], Awaitable[object]]], at_once: int = 1
    ) -> None:
        start = time.perf_counter()
        took = await _timed(calls, at_once)
        out[name] = (took, len(calls) / (time.perf_counter() - start))

    await run("enqueue", [lambda i=i: storage.enqueue(_task(queue, i)) for i in range(tasks)])
    keys = [f"k-{uuid.uuid4().hex}" for _ in range(tasks)]
    answers: list[object] = []

    async def admit(i: int, key: str, mode: DedupMode = DedupMode.SKIP) -> None:
        answers.append(await storage.admit(_task(queue, i), Dedup(key=key, mode=mode)))

    await run("admit, key free", [lambda i=i, k=k: admit(i, k) for i, k in enumerate(keys)])
    _check(answers, AdmitOutcome.ADDED, tasks)
    answers.clear()
    await run("admit, key held", [lambda i=i, k=k: admit(i, k) for i, k in enumerate(keys)])
    _check(answers, AdmitOutcome.SKIPPED, tasks)
    answers.clear()
    replace = DedupMode.REPLACE
    await run("admit, replace", [lambda i=i, k=k: admit(i, k, replace) for i, k in enumerate(keys)])
    _check(answers, AdmitOutcome.REPLACED, tasks)
    answers.clear()
    one_key = f"one-{uuid.uuid4().hex}"
    await run(
        "admit, 16 at once, one key", [lambda i=i: admit(i, one_key) for i in range(tasks)], 16
    )
    added = [a for a in answers if a.outcome == AdmitOutcome.ADDED]  # type: ignore[attr-defined]
    if len(added) != 1:
        raise SystemExit(f"{len(added)} tasks added under one key")
    stats = await storage.stats(queue)
    if stats.pending != 2 * tasks + 1:
        raise SystemExit(f"{stats.pending} pending, expected {2 * tasks + 1}")
    return out


def _check(answers: list[object], expected: AdmitOutcome, tasks: int) -> None:
    outcomes = [a.outcome for a in answers]  # type: ignore[attr-defined]
    if outcomes != [expected] * tasks:
        raise SystemExit(f"expected {tasks} {expected}, got {set(outcomes)}")


@contextlib.asynccontextmanager
async def _store(url: str) -> AsyncIterator[Storage]:
    async with open_storage(url) as storage:
        await storage.migrate()
        yield storage


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres")
    parser.add_argument("--redis")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with postgres(args.postgres) as pg_url, redis(args.redis) as redis_url:
        for name, url in (("PostgreSQL", pg_url), ("Redis", redis_url)):
            rounds = []
            async with _store(url) as storage:
                warm = f"warm-{uuid.uuid4().hex[:8]}"
                for i in range(200):
                    await storage.enqueue(_task(warm, i))
                for _ in range(args.repeat):
                    rounds.append(await _phases(storage, args.tasks))
            print(f"\n{name} ({args.tasks} submits per phase, median of {args.repeat} rounds)")
            print(f"{'phase':30} {'p50 ms':>8} {'p99 ms':>8} {'submits/s':>10}")
            for phase in PHASES:
                p50 = statistics.median(statistics.median(r[phase][0]) for r in rounds) * 1000
                p99 = (
                    statistics.median(statistics.quantiles(r[phase][0], n=100)[98] for r in rounds)
                    * 1000
                )
                rate = statistics.median(r[phase][1] for r in rounds)
                print(f"{phase:30} {p50:8.3f} {p99:8.3f} {rate:10,.0f}")


if __name__ == "__main__":
    asyncio.run(main())
