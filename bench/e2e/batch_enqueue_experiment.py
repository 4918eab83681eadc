"""Where does a batch of submissions go? ``python -m bench.e2e.batch_enqueue_experiment``.

Evidence behind the "enqueue in batches" row of BENCHMARKS.md's targets. On a throwaway durable
cluster (or ``--url``), one client submits ``--batches`` batches of ``--size`` tasks with
``Client.submit_many`` (the harness's payload) and prints, per batch, medians over the batches:

* the client's CPU (``time.process_time``) and the wall time of one ``submit_many``;
* the server's share: the admission statement's execution time, read from ``EXPLAIN ANALYZE``
  of the same statement with fresh ids (in a transaction rolled back, so it stores nothing);
* the client's pure-Python stages, each timed alone on one batch: building the submissions,
  the envelopes (``Client``), ``StorageBase``'s check of every task (``check_tasks``) and the
  statement's parameters (the Postgres plugin's ``admission``).

What is left of the client's CPU after those stages is asyncpg's encoding of the parameters and
the socket's system calls. Every submitted task is verified stored once at the end. To compare
two versions of rdq, run it on each checkout in turn, alternating, a few times.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import asyncpg

import rdq
from bench.e2e import cluster
from bench.e2e.systems import payload
from rdq._ids import new_task_ids
from rdq.spi import bounds
from rdq_postgres._admission import admission

QUEUE = "exp"
TASK = "bench.noop"
_EXECUTION = re.compile(r"Execution Time: ([0-9.]+) ms")


def _stage_ms(work: Callable[[], Any]) -> float:
    """The best of five timings of ``work`` (ms per call), each over enough calls for ~0.2 s."""
    calls, _ = timeit.Timer(work).autorange()
    return min(timeit.repeat(work, number=calls, repeat=5)) / calls * 1e3


async def _server_ms(conn: asyncpg.Connection, storage: Any, size: int) -> float:
    """The admission statement's execution time for a batch of ``size`` fresh tasks."""
    client = rdq.Client(storage)
    built = [
        client._envelope(rdq.Submission(TASK, payload(i), queue=QUEUE), task_id)[0]
        for i, task_id in enumerate(new_task_ids(size))
    ]
    batch = admission(storage._sql, built, None)
    statement = batch.statement
    tx = conn.transaction()
    await tx.start()
    try:
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS) " + statement.text, *statement.args(batch.values)
        )
    finally:
        await tx.rollback()
    plan = "\n".join(row[0] for row in rows)
    found = _EXECUTION.search(plan)
    if found is None:
        raise RuntimeError(f"no execution time in the plan:\n{plan}")
    return float(found.group(1))


async def run(args: argparse.Namespace) -> None:
    async with cluster.experiment_store(args.url) as (_, database, storage):
        client = rdq.Client(storage)
        conn = await asyncpg.connect(database)
        try:
            bodies = [payload(i) for i in range(args.size)]
            ids: list[str] = []
            cpu, wall, server = [], [], []
            for n in range(args.warmup + args.batches):
                submissions = [rdq.Submission(TASK, body, queue=QUEUE) for body in bodies]
                c0, w0 = time.process_time(), time.perf_counter()
                submitted = await client.submit_many(submissions)
                c1, w1 = time.process_time(), time.perf_counter()
                ids.extend(s.id for s in submitted)
                if n >= args.warmup:
                    cpu.append((c1 - c0) * 1e3)
                    wall.append((w1 - w0) * 1e3)
                    server.append(await _server_ms(conn, storage, args.size))
            stored = await conn.fetchval(
                "SELECT count(*) FROM rdq.task WHERE queue = $1 AND id = ANY($2::text[])",
                QUEUE,
                ids,
            )
            if stored != len(ids) or len(set(ids)) != len(ids):
                raise RuntimeError(f"{stored} of {len(ids)} submitted tasks stored")
        finally:
            await conn.close()

        submissions = [rdq.Submission(TASK, body, queue=QUEUE) for body in bodies]
        task_ids = new_task_ids(args.size)
        built = [client._envelope(s, task_ids[i])[0] for i, s in enumerate(submissions)]
        stages = {
            "submissions (the caller's)": lambda: [
                rdq.Submission(TASK, body, queue=QUEUE) for body in bodies
            ],
            "ids": lambda: new_task_ids(args.size),
            "envelopes": lambda: [
                client._envelope(s, task_ids[i]) for i, s in enumerate(submissions)
            ],
            "check_tasks": lambda: bounds.check_tasks(built),
            "admission parameters": lambda: admission(storage._sql, built, None),
        }
        print(f"{args.batches} batches of {args.size} (after {args.warmup} unmeasured), per batch:")
        print(f"  submit_many wall        {statistics.median(wall):7.2f} ms (median)")
        print(f"  submit_many client CPU  {statistics.median(cpu):7.2f} ms")
        print(f"  statement in the server {statistics.median(server):7.2f} ms (EXPLAIN ANALYZE)")
        for name, work in stages.items():
            print(f"  {name:<24}{_stage_ms(work):7.2f} ms")
        print(f"every one of {len(ids)} tasks stored once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="a PostgreSQL server (default: throwaway)")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=5)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
