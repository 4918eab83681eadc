"""Claim orders on Redis: what one claim costs on a deep backlog in strict order and with
``fair``, ``aging`` or both on the queue's own control, and where a small tenant's tasks go.

    python -m bench.redis_order                  # 10,000 and 100,000 due, claims of 10

For each depth and mode a fresh queue holds ``depth`` tasks of ``tenant:big`` due a minute
ago (priorities -1, 0, 1 in turn) and then ``--shallow`` tasks of ``tenant:small`` due a
second ago (priority 0: behind every big task in strict and in aged order). ``--claims``
claims of ``--batch`` run in series (nothing is completed, so each reads a backlog that
shrinks only by what was claimed); the script prints the median wall time of one claim, the
server's own time per claim script (``INFO commandstats``: ``evalsha`` µs per call), and in
which claim the small tenant's last task came (or that it had not come yet). The queue's keys
are deleted after each mode. Runs on a redis-server of its own (``rdq_compliance.servers``:
the test suite's, which keeps nothing on disk) unless ``--url`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis.asyncio as aioredis

from bench._tenants import fill_big_and_small
from rdq import open_storage
from rdq.spi import QUEUE_KEY, Control, Storage

LEASE = timedelta(minutes=30)
PREFIX = "orderbench"
MODES: dict[str, dict[str, Any]] = {
    "strict (no control)": {},
    "strict ('*' control, no order)": {"gate": 10**9},
    "fair = 'tenant:'": {"fair": "tenant:"},
    "aging = 1 s": {"aging": 1.0},
    "fair + aging": {"fair": "tenant:", "aging": 1.0},
}


@dataclass
class Run:
    claim_ms: float
    """median wall time of one claim"""
    server_us: float
    """the server's time per claim script"""
    small_done_in: int | None
    """the claim that took the small tenant's last task (None: not within the claims)"""


async def run(
    store: Storage,
    raw: aioredis.Redis,
    settings: dict[str, Any],
    args: argparse.Namespace,
    depth: int,
) -> Run:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    await fill_big_and_small(store, queue, depth, args.shallow, big_priorities=(-1, 0, 1))
    if settings:
        await store.put_control(Control(queue=queue, key=QUEUE_KEY, **settings), expected_version=0)
    small_left, small_done_in = args.shallow, None
    times: list[float] = []
    await raw.config_resetstat()
    for n in range(1, args.claims + 1):
        before = time.perf_counter()
        claimed = await store.claim_due(queue, args.batch, LEASE)
        times.append(time.perf_counter() - before)
        if len(claimed) != args.batch:
            raise AssertionError(f"claim {n} took {len(claimed)} of {args.batch}")
        small_left -= sum("tenant:small" in c.task.keys for c in claimed)
        if small_left == 0 and small_done_in is None:
            small_done_in = n
    stats = await raw.info("commandstats")
    server_us = float(stats["cmdstat_evalsha"]["usec_per_call"])
    async for key in raw.scan_iter(match=f"{PREFIX}:{{{queue}}}:*", count=1000):
        await raw.unlink(key)
    return Run(statistics.median(times) * 1e3, server_us, small_done_in)


async def measure(url: str, args: argparse.Namespace) -> None:
    raw = aioredis.Redis.from_url(url)
    try:
        async with open_storage(url, prefix=PREFIX) as store:
            await store.migrate()
            for depth in args.depth:
                for name, settings in MODES.items():
                    found = await run(store, raw, settings, args, depth)
                    small = (
                        f"claim {found.small_done_in}"
                        if found.small_done_in is not None
                        else f"not within {args.claims} claims"
                    )
                    print(
                        f"{depth:>7,} due  {name:<31} {found.claim_ms:8.2f} ms per claim, "
                        f"server {found.server_us / 1e3:8.2f} ms per claim, "
                        f"small tenant's last task: {small}",
                        flush=True,
                    )
    finally:
        await raw.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing Redis (default: a redis-server of its own)")
    parser.add_argument("--depth", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--shallow", type=int, default=10, help="the small tenant's tasks")
    parser.add_argument("--batch", type=int, default=10, help="tasks per claim")
    parser.add_argument("--claims", type=int, default=20, help="claims per mode and depth")
    args = parser.parse_args()
    if args.url:
        asyncio.run(measure(args.url, args))
        return
    from rdq_compliance.servers.redis import server_url

    with server_url() as url:
        asyncio.run(measure(url, args))


if __name__ == "__main__":
    main()
