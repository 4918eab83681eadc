"""Random or time-ordered task ids? ``python -m bench.e2e.task_id_experiment``.

Evidence behind the client's version-7 ids (BENCHMARKS.md, "Time-ordered task ids"). On a
throwaway durable cluster (or ``--url``), two databases each hold ``--prefill`` succeeded
tasks (what a store keeps for ``task_ttl``), one with random version-4 ids, one with
version-7 ids. Then, alternating the two for ``--rounds`` rounds, each round starting right
after a ``CHECKPOINT`` (so both pay the full-page writes a round after a checkpoint pays):

* ``--batches`` batches of 1,000 submitted with ``Client.submit_many``, with ids of the
  database's kind made by the client's own generator (version 7) or ``uuid.uuid4`` (version 4);
* those tasks drained through the SPI as one worker does it: ``claim_due`` of 100, then one
  ``complete_many`` of the claimed tasks.

It prints, per kind, medians over the rounds: the enqueue and drain rates, the WAL written per
task (``pg_current_wal_lsn``). Every task
of every round is verified SUCCEEDED with one SUCCEEDED attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

import rdq
from bench.e2e import cluster
from bench.e2e.systems import payload
from rdq._ids import new_task_ids
from rdq.spi import Attempt, Completion, Outcome

QUEUE = "exp"
TASK = "bench.noop"
LEASE = timedelta(seconds=30)
KINDS: dict[str, Callable[[int], list[str]]] = {
    "version 4 (random)": lambda n: [uuid.uuid4().hex for _ in range(n)],
    "version 7 (time-ordered)": new_task_ids,
}
# The prefilled ids of each kind, made in SQL: version 7 from a time a row apart per millisecond
# before now, version 4 from gen_random_uuid().
PREFILL_ID = {
    "version 4 (random)": "replace(gen_random_uuid()::text, '-', '')",
    "version 7 (time-ordered)": (
        "lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint - $1 + i), 12, '0')"
        " || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15)"
    ),
}
PREFILL = """
INSERT INTO rdq.task (id, queue, handler_ref, payload, status, attempt_count, attempts,
                      completed_at)
SELECT {id}, 'done', 'bench.noop', '{{"n": 1}}', 'SUCCEEDED', 1, '[]', now()
FROM generate_series(1, $1) AS i
"""


async def _wal(conn: asyncpg.Connection) -> int:
    lsn: int = await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    return lsn


async def _round(
    storage: Any, conn: asyncpg.Connection, make_ids: Callable[[int], list[str]], batches: int
) -> dict[str, float]:
    client = rdq.Client(storage)
    tasks = batches * 1000
    await conn.execute("CHECKPOINT")
    wal = await _wal(conn)
    started = time.perf_counter()
    for b in range(batches):
        ids = make_ids(1000)
        await client.submit_many(
            rdq.Submission(TASK, payload(b * 1000 + i), queue=QUEUE, id=task_id)
            for i, task_id in enumerate(ids)
        )
    enqueued = time.perf_counter() - started
    wal_enqueue = await _wal(conn) - wal
    wal = await _wal(conn)
    started = time.perf_counter()
    done = 0
    while done < tasks:
        claims = await storage.claim_due(QUEUE, 100, LEASE)
        if not claims:
            raise RuntimeError(f"nothing to claim after {done} of {tasks}")
        now = datetime.now(UTC)
        await storage.complete_many(
            [
                Completion(
                    c.task.id,
                    c.token,
                    Attempt(
                        number=c.task.attempt_count + 1,
                        outcome=Outcome.SUCCEEDED,
                        started_at=now,
                        finished_at=now,
                        worker_id="experiment",
                    ),
                )
                for c in claims
            ]
        )
        done += len(claims)
    drained = time.perf_counter() - started
    wal_drain = await _wal(conn) - wal
    ok = await conn.fetchval(
        """SELECT count(*) FROM rdq.task WHERE queue = $1 AND status = 'SUCCEEDED'
           AND attempt_count = 1 AND json_array_length(attempts) = 1
           AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'""",
        QUEUE,
    )
    if ok != tasks:
        raise RuntimeError(f"{ok} of {tasks} tasks completed exactly once")
    await conn.execute("DELETE FROM rdq.task WHERE queue = $1", QUEUE)
    await conn.execute("VACUUM rdq.task")
    return {
        "enqueue in batches (tasks/s)": tasks / enqueued,
        "drain, claims of 100 (tasks/s)": tasks / drained,
        "WAL per enqueued task (bytes)": wal_enqueue / tasks,
        "WAL per drained task (bytes)": wal_drain / tasks,
    }


async def main(args: argparse.Namespace) -> None:
    with cluster.server(args.url) as target:
        names = {kind: f"bench_ids_{n}" for n, kind in enumerate(KINDS)}
        urls = await cluster.prepare(target, list(names.values()))
        results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        stores: dict[str, Any] = {}
        conns: dict[str, asyncpg.Connection] = {}
        async with contextlib.AsyncExitStack() as stack:
            for kind, name in names.items():
                stores[kind] = await stack.enter_async_context(rdq.open_storage(urls[name]))
                await stores[kind].migrate()
                conns[kind] = await asyncpg.connect(urls[name])
                stack.push_async_callback(conns[kind].close)
                started = time.perf_counter()
                await conns[kind].execute(PREFILL.format(id=PREFILL_ID[kind]), args.prefill)
                await conns[kind].execute("VACUUM ANALYZE rdq.task")
                took = time.perf_counter() - started
                print(f"{kind}: {args.prefill:,} succeeded tasks kept ({took:.1f} s)")
            for r in range(args.rounds):
                for kind in KINDS if r % 2 == 0 else reversed(list(KINDS)):
                    result = await _round(stores[kind], conns[kind], KINDS[kind], args.batches)
                    results[kind].append(result)
                    print(
                        f"round {r + 1}, {kind}: " + ", ".join(f"{v:,.1f}" for v in result.values())
                    )
    print(
        f"\nmedians of {args.rounds} rounds, {args.prefill:,} succeeded tasks kept beside them:\n"
    )
    metrics = list(next(iter(results.values()))[0])
    print("| | " + " | ".join(KINDS) + " |")
    print("|---|" + "--:|" * len(KINDS))
    for metric in metrics:
        cells = [f"{statistics.median(r[metric] for r in results[k]):,.1f}" for k in KINDS]
        print(f"| {metric} | " + " | ".join(cells) + " |")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL server to use (default: a throwaway cluster)")
    parser.add_argument("--prefill", type=int, default=1_000_000, help="succeeded tasks kept")
    parser.add_argument("--batches", type=int, default=20, help="batches of 1,000 per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per kind")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
