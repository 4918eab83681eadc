"""What a claim of a fair or aged queue costs on MongoDB against a strict one, by the number of
due tasks, on the test suite's SecantusDB (or ``--url``).

    python -m bench.mongo_order                  # 100, 1,000 and 5,000 due tasks, claims of 10

For each depth and mode (strict; ``fair = "tenant:"``; ``aging = 60`` s) it fills a fresh queue
with that many due tasks spread over ``--tenants`` tenant keys and priorities -2..2, then claims
it ``--claims`` times in series with ``claim_due(queue, --batch, lease)`` as one worker's claim
loop would, and prints the median and the spread of one claim's wall time. Claimed tasks keep
their lease (nothing is completed), so each claim meets a backlog that shrinks only by what was
claimed. A strict claim is one lookup plus one ``findAndModify`` per task whatever the depth; an
ordered claim also reads every due task's id, priority, due time, handler and keys.

SecantusDB evaluates every query in Python: its figures show how the cost grows with the
backlog, not what a ``mongod`` would take.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_mongo import MongoStorage

LEASE = timedelta(minutes=30)
DATABASE = "rdq_bench_order"
"""The database the benchmark fills, and drops at the end."""
MODES: dict[str, dict[str, object]] = {
    "strict": {},
    "fair = 'tenant:'": {"fair": "tenant:"},
    "aging = 60 s": {"aging": 60.0},
}


@contextlib.contextmanager
def _mongo(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from rdq_compliance.servers.mongo import server_url

    with server_url() as found:
        yield found


async def _fill(store: MongoStorage, queue: str, depth: int, tenants: int) -> None:
    now = await store.now()
    for start in range(0, depth, 1000):
        await store.enqueue_batch(
            [
                Envelope(
                    id=f"{queue}-{n}",
                    queue=queue,
                    handler_ref="bench:handler",
                    keys=[f"tenant:{n % tenants}"],
                    priority=n % 5 - 2,
                    next_attempt_at=now - timedelta(seconds=depth - n),
                )
                for n in range(start, min(depth, start + 1000))
            ]
        )


async def claim_times(
    store: MongoStorage, depth: int, settings: dict[str, object], args: argparse.Namespace
) -> list[float]:
    """Milliseconds of each of ``--claims`` claims of a fresh queue of ``depth`` due tasks."""
    queue = f"order-{uuid.uuid4().hex[:8]}"
    await _fill(store, queue, depth, args.tenants)
    if settings:
        control = Control(queue=queue, key=QUEUE_KEY, **settings)  # type: ignore[arg-type]
        await store.put_control(control, expected_version=0)
    seen: set[str] = set()
    times: list[float] = []
    for _ in range(args.claims):
        before = time.perf_counter()
        claimed = await store.claim_due(queue, args.batch, LEASE)
        times.append((time.perf_counter() - before) * 1e3)
        ids = {c.task.id for c in claimed}
        if len(ids) != args.batch or ids & seen:
            raise AssertionError(f"a claim took {len(ids)} tasks, {len(ids & seen)} twice")
        seen |= ids
    return times


async def measure(url: str, args: argparse.Namespace) -> None:
    url = urlunsplit(urlsplit(url)._replace(path="/" + DATABASE))
    async with MongoStorage.from_url(url) as store:
        await store.migrate()
        for depth in args.depth:
            for name, settings in MODES.items():
                times = await claim_times(store, depth, settings, args)
                q = statistics.quantiles(times, n=10)
                print(
                    f"{depth:>6} due, {name:<17}: {statistics.median(times):8.1f} ms per claim "
                    f"of {args.batch} (p10 {q[0]:.1f}, p90 {q[-1]:.1f})",
                    flush=True,
                )
        await store._connection().client.drop_database(store.config.database)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing MongoDB (default: the tests' SecantusDB)")
    parser.add_argument("--depth", type=int, nargs="*", default=[100, 1000, 5000])
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10, help="tasks per claim")
    parser.add_argument("--claims", type=int, default=20, help="claims per depth and mode")
    args = parser.parse_args()
    with _mongo(args.url) as base:
        asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
