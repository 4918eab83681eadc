"""Fair shares on PostgreSQL: how long a 10-task tenant waits behind a 100,000-task one, with
and without ``fair = "tenant:"`` on the queue, and what a claim costs either way.

    python -m bench.fairness                 # 100,000 + 10 tasks, claims of 10, 3 rounds

Each round makes one fresh queue per mode, holding ``--deep`` tasks of ``tenant:big`` due a
minute ago and then ``--shallow`` tasks of ``tenant:small`` due a second ago (younger than
every big task: behind all of them in strict order), and claims it in series with
``claim_due(queue, --batch, lease)`` as one worker's claim loop would, until every small task
is claimed. It prints, per mode, how many claims and how many big tasks came before the small
tenant's last task, the wall time from the first claim to it (claims only: a worker running
handlers adds its handlers' time per task ahead), and the median wall time of one claim.
Claimed tasks keep their lease (nothing is completed), so every claim reads a backlog that
shrinks only by what was claimed.

``--baseline N`` also claims a queue of N tasks that asks for no fairness one task at a time
(``bench.claim_latency``'s "as shipped" run): the claim cost of a queue without fairness, to
compare across releases.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from bench._servers import postgres
from bench._tenants import fill_big_and_small
from rdq.spi import QUEUE_KEY, Control, Envelope
from rdq_postgres import PostgresStorage

LEASE = timedelta(minutes=30)
SCHEMA = "fair_bench"


@dataclass
class Delay:
    """What the small tenant waited for in one run."""

    claims: int
    """claims up to and including the one that took the small tenant's last task"""
    big_ahead: int
    """big tasks claimed before the small tenant's last task"""
    seconds: float
    """from the first claim to the end of that claim"""
    claim_ms: float
    """median wall time of one claim of the run"""


async def delay(store: PostgresStorage, fair: bool, deep: int, shallow: int, batch: int) -> Delay:
    """Fill a fresh queue, then claim it until the small tenant's tasks are all claimed."""
    queue = f"{'fair' if fair else 'strict'}-{uuid.uuid4().hex[:8]}"
    await fill_big_and_small(store, queue, deep, shallow)
    if fair:
        fairness = Control(queue=queue, key=QUEUE_KEY, fair="tenant:")
        await store.put_control(fairness, expected_version=0)
    small_left, big_ahead, claims = shallow, 0, 0
    times: list[float] = []
    started = time.perf_counter()
    while small_left:
        before = time.perf_counter()
        claimed = await store.claim_due(queue, batch, LEASE)
        times.append(time.perf_counter() - before)
        claims += 1
        if not claimed:
            raise AssertionError(f"the queue ran dry with {small_left} small tasks unclaimed")
        for c in claimed:
            if "tenant:small" in c.task.keys:
                small_left -= 1
            elif small_left:
                big_ahead += 1
    seconds = time.perf_counter() - started
    return Delay(claims, big_ahead, seconds, statistics.median(times) * 1e3)


async def baseline(store: PostgresStorage, tasks: int) -> float:
    """ms per one-task claim of a queue that asks for no fairness."""
    queue = "plain-" + uuid.uuid4().hex[:8]
    await store.enqueue_batch(
        [Envelope(id=f"{queue}-{n}", queue=queue, handler_ref="h") for n in range(tasks)]
    )
    start = time.perf_counter()
    for _ in range(tasks):
        await store.claim_due(queue, 1, LEASE)
    return (time.perf_counter() - start) / tasks * 1e3


async def measure(url: str, args: argparse.Namespace) -> None:
    runs: dict[str, list[Delay]] = {"without fairness": [], "fair = 'tenant:'": []}
    plain: list[float] = []
    async with PostgresStorage.from_url(url, schema=SCHEMA) as store:
        await store.migrate()
        for round_ in range(args.rounds):
            for name, fair in (("without fairness", False), ("fair = 'tenant:'", True)):
                found = await delay(store, fair, args.deep, args.shallow, args.batch)
                runs[name].append(found)
                print(
                    f"round {round_ + 1} {name}: last small task in claim {found.claims}, "
                    f"{found.big_ahead} big tasks ahead, {found.seconds:.3f} s, "
                    f"{found.claim_ms:.2f} ms per claim",
                    flush=True,
                )
            if args.baseline:
                plain.append(await baseline(store, args.baseline))
                print(f"round {round_ + 1} one-task claims, no fairness: {plain[-1]:.3f} ms")
    print("medians:")
    for name, delays in runs.items():
        print(
            f"  {name}: claim {statistics.median(d.claims for d in delays):.0f}, "
            f"{statistics.median(d.big_ahead for d in delays):.0f} big tasks ahead, "
            f"{statistics.median(d.seconds for d in delays):.3f} s, "
            f"{statistics.median(d.claim_ms for d in delays):.2f} ms per claim"
        )
    if plain:
        print(f"  one-task claims, no fairness: {statistics.median(plain):.3f} ms per claim")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--deep", type=int, default=100_000, help="the big tenant's tasks")
    parser.add_argument("--shallow", type=int, default=10, help="the small tenant's tasks")
    parser.add_argument("--batch", type=int, default=10, help="tasks per claim")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=int, default=0, help="one-task claims of a plain queue")
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
