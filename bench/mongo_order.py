"""What a claim of a fair or aged queue costs on MongoDB against a strict one, by the number of
due tasks, on the test suite's SecantusDB (or ``--url``).

    python -m bench.mongo_order                  # 100, 1,000 and 5,000 due tasks, claims of 10

For each depth and mode (strict; ``fair = "tenant:"``; ``aging = 60`` s) it fills a fresh queue
with that many due tasks spread over ``--tenants`` tenant keys and priorities -2..2, then claims
it ``--claims`` times in series with ``claim_due(queue, --batch, lease)`` as one worker's claim
loop would, and prints the median and the spread of one claim's wall time, and what the median
claim read: the task documents its ``find`` returned and the server's time for that ``find`` and
its ``getMore`` (command monitoring). Claimed tasks keep their lease (nothing is completed), so
each claim meets a backlog that shrinks only by what was claimed (the median claim's is the
depth less half the tasks claimed). Each run deletes its queue afterwards. A strict claim is one
lookup plus one ``findAndModify`` per task whatever the depth; an ordered claim also reads every
due task's id, priority, due time, handler and keys.

SecantusDB evaluates every query in Python and scans the collection for every
``findAndModify`` it is sent, so there a strict claim grows with the backlog too: its figures
show what the read costs beside that, not what a ``mongod`` would take.
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

from pymongo import monitoring

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


class Reads(monitoring.CommandListener):
    """The task documents ``find`` and ``getMore`` returned, and the server's milliseconds for
    them, since the last :meth:`clear`."""

    def __init__(self) -> None:
        self.docs = 0
        self.ms = 0.0
        self._reads: set[int] = set()

    def clear(self) -> None:
        self.docs, self.ms = 0, 0.0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("find", "getMore"):
            self._reads.add(event.request_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id in self._reads:
            self._reads.discard(event.request_id)
            cursor = event.reply.get("cursor", {})
            self.docs += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))
            self.ms += event.duration_micros / 1000

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._reads.discard(event.request_id)


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
    store: MongoStorage,
    reads: Reads,
    depth: int,
    settings: dict[str, object],
    args: argparse.Namespace,
) -> tuple[list[float], list[int], list[float]]:
    """Of each of ``--claims`` claims of a fresh queue of ``depth`` due tasks: its wall
    milliseconds, the task documents it read and the server's milliseconds for reading them."""
    queue = f"order-{uuid.uuid4().hex[:8]}"
    await _fill(store, queue, depth, args.tenants)
    if settings:
        control = Control(queue=queue, key=QUEUE_KEY, **settings)  # type: ignore[arg-type]
        await store.put_control(control, expected_version=0)
    seen: set[str] = set()
    times: list[float] = []
    docs: list[int] = []
    read_ms: list[float] = []
    for _ in range(args.claims):
        reads.clear()
        before = time.perf_counter()
        claimed = await store.claim_due(queue, args.batch, LEASE)
        times.append((time.perf_counter() - before) * 1e3)
        docs.append(reads.docs)
        read_ms.append(reads.ms)
        ids = {c.task.id for c in claimed}
        if len(ids) != args.batch or ids & seen:
            raise AssertionError(f"a claim took {len(ids)} tasks, {len(ids & seen)} twice")
        seen |= ids
    # SecantusDB's every findAndModify grows with the collection: the next run starts empty.
    await store._connection().tasks.delete_many({"queue": queue})
    await store._connection().controls.delete_many({"_id": queue})
    return times, docs, read_ms


async def measure(url: str, args: argparse.Namespace) -> None:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, f"timeout={args.timeout:g}") if q)
    url = urlunsplit(parts._replace(path="/" + DATABASE, query=query))
    reads = Reads()
    async with MongoStorage.from_url(url, event_listeners=[reads]) as store:
        await store.migrate()
        for depth in args.depth:
            for name, settings in MODES.items():
                if name.split()[0] not in args.modes:
                    continue
                times, docs, read_ms = await claim_times(store, reads, depth, settings, args)
                q = statistics.quantiles(times, n=10)
                print(
                    f"{depth:>6} due, {name:<17}: {statistics.median(times):8.1f} ms per claim "
                    f"of {args.batch} (p10 {q[0]:.1f}, p90 {q[-1]:.1f}); read "
                    f"{statistics.median(docs):.0f} tasks in "
                    f"{statistics.median(read_ms):.1f} ms of the server's",
                    flush=True,
                )
        await store._connection().client.drop_database(store.config.database)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing MongoDB (default: the tests' SecantusDB)")
    parser.add_argument("--depth", type=int, nargs="*", default=[100, 1000, 5000])
    parser.add_argument(
        "--modes", nargs="*", default=["strict", "fair", "aging"], help="of strict, fair, aging"
    )
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10, help="tasks per claim")
    parser.add_argument("--claims", type=int, default=20, help="claims per depth and mode")
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="the store's operation timeout, s (a claim cut short by it would be a short batch)",
    )
    args = parser.parse_args()
    with _mongo(args.url) as base:
        asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
