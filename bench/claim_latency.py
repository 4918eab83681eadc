"""One-row claims in series against PostgreSQL: wall time and client CPU per claim, and the
same with rdq's ``timestamptz`` codec swapped for asyncpg's own and with each
``plan_cache_mode``, alternating, on a durable throwaway cluster (or ``--url``).

    python -m bench.claim_latency                 # 2,000 claims per run, 3 rounds

Each run makes a fresh queue of ``--tasks`` tasks with ``enqueue_batch`` and claims them one
by one with ``claim_due(queue, 1, lease)``; the client CPU is the process's own
(``time.process_time``), so the rest of the wall time is the round trip and the server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg

import rdq_postgres._connection as connection
from bench._servers import postgres
from rdq.spi import Envelope
from rdq_postgres import PostgresStorage

_CONNECT = asyncpg.connect
_REGISTER = connection.register_times


async def _asyncpg_times(conn: asyncpg.Connection) -> None:
    """asyncpg's own timestamptz codec (fails on a time no datetime holds)."""


def _connect_with(plan_cache_mode: str | None) -> Callable[..., Awaitable[Any]]:
    async def connect(*args: Any, **kwargs: Any) -> Any:
        if plan_cache_mode:
            kwargs.setdefault("server_settings", {})["plan_cache_mode"] = plan_cache_mode
        return await _CONNECT(*args, **kwargs)

    return connect


VARIANTS: dict[str, tuple[str | None, bool]] = {
    "as shipped": (None, True),
    "asyncpg's timestamptz codec": (None, False),
    "plan_cache_mode=force_custom_plan": ("force_custom_plan", True),
    "plan_cache_mode=force_generic_plan": ("force_generic_plan", True),
}
"""name -> (plan_cache_mode, rdq's timestamptz codec)."""


async def run(base: str, variant: str, tasks: int) -> tuple[float, float]:
    """(wall ms, client CPU µs) per one-row claim."""
    plan_cache_mode, rdq_codec = VARIANTS[variant]
    asyncpg.connect = _connect_with(plan_cache_mode)
    connection.register_times = _REGISTER if rdq_codec else _asyncpg_times
    try:
        async with PostgresStorage.from_url(base, schema="claim_bench") as store:
            await store.migrate()
            queue = "c" + uuid.uuid4().hex[:8]
            await store.enqueue_batch(
                [Envelope(id=f"{queue}-{i}", queue=queue, handler_ref="h") for i in range(tasks)]
            )
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(tasks):
                await store.claim_due(queue, 1, timedelta(seconds=30))
            return (
                (time.perf_counter() - wall) / tasks * 1e3,
                (time.process_time() - cpu) / tasks * 1e6,
            )
    finally:
        asyncpg.connect = _CONNECT
        connection.register_times = _REGISTER


async def measure(base: str, tasks: int, rounds: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for round_ in range(rounds):
        for name in VARIANTS:
            wall, cpu = await run(base, name, tasks)
            results[name].append((wall, cpu))
            print(f"round {round_ + 1} {name}: {wall:.3f} ms, client CPU {cpu:.0f} µs", flush=True)
    print("medians:")
    for name, values in results.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"  {name}: {wall:.3f} ms per claim, client CPU {cpu:.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--tasks", type=int, default=2000, help="claims per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with postgres(args.url) as base:
        asyncio.run(measure(base, args.tasks, args.rounds))


if __name__ == "__main__":
    main()
