"""Throughput while a transaction holds the xmin horizon, beside the same drain without it.

    python -m bench.xmin                          # a durable throwaway cluster
    python -m bench.xmin --url postgresql://...   # a database of yours (it creates schema rdq)

Two phases of ``--seconds`` each, in one run on one cluster: *clean*, then *held*, where one
connection runs ``BEGIN; SELECT txid_current()`` at the start of the window and stays open
until its end (what a replica's ``hot_standby_feedback`` or a long report does: VACUUM may not
remove a row version newer than that transaction). In each phase ``--workers`` ``rdq worker``
processes (no-op handler, concurrency 10) drain queue ``q`` while a producer keeps
``--backlog`` tasks due, so the rate is the workers' capacity, not the producer's. Each phase
starts from an empty table (``TRUNCATE rdq.task CASCADE``: run it on a database of its own), so
its growth per task compares with the other's.

It prints, per phase: tasks handled per second, and the growth of ``rdq.task`` (heap, and
``task_live_idx``) per handled task; then held ÷ clean. It fails if any task was dead-lettered.

``--rate N`` offers a steady N tasks/s instead (submitted every 10 ms from the moment every
worker of the phase says it runs, no backlog kept): each phase then also prints the backlog
left at its end and the submit → start latency (created_at to the first attempt's start) of
the tasks submitted in its window, p50 / p99; a task not started by the window's end counts
with the time it had waited by then (a lower bound).

``--limit concurrency|rate`` runs either kind of phase on a queue with a limit that does not
bind (``bench/xmin/app.py``), so every claim goes through the queue's control row and rewrites
it; the run fails if no control row of the queue holds the limit. Every run also prints the
control table's size (``rdq.control``: heap, indexes, total, dead tuples) before each phase's
window and at its end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

import rdq
from bench._servers import postgres
from bench.xmin import _control
from bench.xmin.app import LIMITS

ROOT = Path(__file__).resolve().parents[2]
BATCH = 1000

SIZES = """
SELECT pg_relation_size('rdq.task') AS heap,
       pg_indexes_size('rdq.task') AS indexes,
       pg_relation_size('rdq.task_live_idx') AS live_idx
"""


@dataclass
class Phase:
    name: str
    handled: int
    seconds: float
    heap_growth: int
    index_growth: int
    live_idx_growth: int
    backlog: int = 0
    p50: float = 0.0
    p99: float = 0.0
    control_before: _control.ControlSize | None = None
    control_after: _control.ControlSize | None = None

    @property
    def rate(self) -> float:
        return self.handled / self.seconds

    def per_task(self, growth: int) -> float:
        return growth / self.handled if self.handled else 0.0


def _pythonpath() -> str:
    """The workers' PYTHONPATH: the repository (for ``bench.xmin.app``) before what this
    process was given, so that a run of other code (``PYTHONPATH=…/src``) is that code's in
    the workers too, not only in the process that migrates and measures."""
    given = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(ROOT), given] if given else [str(ROOT)])


async def _spawn_worker(url: str, n: int, limit: str) -> asyncio.subprocess.Process:
    log = Path(f"/tmp/xmin-worker-{n}.log")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rdq",
        "worker",
        "bench.xmin.app:app",
        "--storage",
        url,
        "--log-level",
        "WARNING",
        env=dict(os.environ, PYTHONPATH=_pythonpath(), XMIN_LIMIT=limit),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("w"),  # noqa: ASYNC230 - opening a local log file is immediate
    )


async def _workers_running(
    db: asyncpg.Connection, since: object, count: int, timeout: float = 60.0
) -> None:
    """Wait until ``count`` workers started after ``since`` say they run (their heartbeat in
    ``rdq.worker``), at most ``timeout`` seconds (then go on: the warm-up still follows)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = await db.fetchval(
            "SELECT count(*) FROM rdq.worker WHERE started_at >= $1 AND state = 'running'",
            since,
        )
        if running >= count:
            return
        await asyncio.sleep(0.2)
    print(f"  ({count} workers not all running after {timeout:.0f} s: going on)", file=sys.stderr)


class Producer:
    """Keeps about ``backlog`` tasks of queue ``q`` due, topping up once a second."""

    def __init__(self, client: rdq.Client, db: asyncpg.Connection, backlog: int) -> None:
        self.client = client
        self.db = db  # a connection of its own: exact counts (stats estimates large ones)
        self.backlog = backlog
        self.submitted = 0

    async def top_up(self) -> None:
        pending = await self.db.fetchval("SELECT count(*) FROM rdq.task WHERE status = 'PENDING'")
        missing = self.backlog - pending
        while missing > 0:
            n = min(BATCH, missing)
            await self.client.submit_many(
                [rdq.Submission("noop", None, queue="q") for _ in range(n)]
            )
            self.submitted += n
            missing -= n

    async def run(self) -> None:
        while True:
            await self.top_up()
            await asyncio.sleep(1.0)


class SteadyProducer:
    """Offers ``rate`` tasks/s to queue ``q``: every 10 ms, the tasks due by then."""

    TICK = 0.01

    def __init__(self, client: rdq.Client, rate: float) -> None:
        self.client = client
        self.rate = rate
        self.submitted = 0

    async def top_up(self) -> None:
        return None

    async def run(self) -> None:
        started = time.monotonic()
        while True:
            owed = int((time.monotonic() - started) * self.rate) - self.submitted
            while owed > 0:
                n = min(BATCH, owed)
                await self.client.submit_many(
                    [rdq.Submission("noop", None, queue="q") for _ in range(n)]
                )
                self.submitted += n
                owed -= n
            await asyncio.sleep(self.TICK)


LATENCY = """
SELECT count(*) AS submitted,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY wait) AS p99
FROM (
    SELECT extract(epoch FROM coalesce(
               (t.attempts -> 0 ->> 'started_at')::timestamptz,
               CASE WHEN t.status = 'IN_FLIGHT' THEN t.claimed_at END,
               $2::timestamptz) - t.created_at) AS wait
    FROM rdq.task AS t
    WHERE t.queue = 'q' AND t.created_at >= $1::timestamptz AND t.created_at < $2::timestamptz
) AS w
"""


async def _succeeded(db: asyncpg.Connection) -> int:
    """An exact count (``stats`` estimates large counts)."""
    count = await db.fetchval("SELECT count(*) FROM rdq.task WHERE status = 'SUCCEEDED'")
    return int(count)


async def phase(name: str, url: str, args: argparse.Namespace, db: asyncpg.Connection) -> Phase:
    # each phase from an empty table, so both grow from the same start
    await db.execute("TRUNCATE rdq.task CASCADE")
    await db.execute("VACUUM ANALYZE rdq.task")
    async with rdq.open_storage(url) as storage:
        client = rdq.Client(storage)
        counting = await asyncpg.connect(url)
        producer: Producer | SteadyProducer = (
            SteadyProducer(client, args.rate)
            if args.rate
            else Producer(client, counting, args.backlog)
        )
        await producer.top_up()
        since = await db.fetchval("SELECT clock_timestamp()")
        workers = [await _spawn_worker(url, n, args.limit) for n in range(args.workers)]
        # an offered rate starts once the workers run: a rate offered while they start would
        # leave the window's first seconds behind a backlog no steady workload has
        await _workers_running(db, since, args.workers)
        feeding = asyncio.create_task(producer.run())
        holder: asyncpg.Connection | None = None
        try:
            await asyncio.sleep(args.warmup)  # workers started, pools opened, claims going
            before = await db.fetchrow(SIZES)
            control_before = await _control.read(db)
            done_before = await _succeeded(db)
            if name == "held":
                holder = await asyncpg.connect(url)
                await holder.execute("BEGIN")
                await holder.fetchval("SELECT txid_current()")
            began = time.monotonic()
            window_start = await db.fetchval("SELECT clock_timestamp()")
            await asyncio.sleep(args.seconds)
            done_after = await _succeeded(db)
            seconds = time.monotonic() - began
            window_end = await db.fetchval("SELECT clock_timestamp()")
            after = await db.fetchrow(SIZES)
            control_after = await _control.read(db)
            limited = await _control.limit_row(db, "q")
            backlog = await db.fetchval(
                "SELECT count(*) FROM rdq.task WHERE status IN ('PENDING', 'IN_FLIGHT')"
            )
        finally:
            if holder is not None:
                await holder.execute("ROLLBACK")
                await holder.close()
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)
            await counting.close()
            for proc in workers:
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in workers)), 60)
    if args.limit != "none" and not limited:
        raise SystemExit(f"{name}: no control row of queue q holds the {args.limit} limit")
    waits = await db.fetchrow(LATENCY, window_start, window_end)
    assert before is not None and after is not None and waits is not None
    return Phase(
        name,
        done_after - done_before,
        seconds,
        after["heap"] - before["heap"],
        after["indexes"] - before["indexes"],
        after["live_idx"] - before["live_idx"],
        backlog=int(backlog),
        p50=float(waits["p50"] or 0.0),
        p99=float(waits["p99"] or 0.0),
        control_before=control_before,
        control_after=control_after,
    )


async def verify(db: asyncpg.Connection) -> None:
    """Nothing was lost: no task is dead-lettered, and every task the producer submitted is
    still stored. (A task a worker held when it was stopped is handed back and succeeds in the
    next phase, so more than one attempt is no double run here.)"""
    dead = await db.fetchval("SELECT count(*) FROM rdq.task WHERE status = 'DEAD'")
    if dead:
        raise SystemExit(f"{dead} task(s) dead-lettered")


def report(phases: list[Phase], rate: float | None = None, limit: str = "none") -> None:
    if rate:
        print(f"offered {rate:,.0f} tasks/s")
    print(f"limit: {limit}")
    print(
        f"{'phase':<8}{'tasks/s':>10}{'handled':>10}{'heap B/task':>14}"
        f"{'indexes B/task':>16}{'live_idx B/task':>17}{'backlog':>10}"
        f"{'p50 ms':>10}{'p99 ms':>10}"
    )
    for p in phases:
        print(
            f"{p.name:<8}{p.rate:>10,.0f}{p.handled:>10,}{p.per_task(p.heap_growth):>14,.0f}"
            f"{p.per_task(p.index_growth):>16,.0f}{p.per_task(p.live_idx_growth):>17,.0f}"
            f"{p.backlog:>10,}{p.p50 * 1000:>10,.1f}{p.p99 * 1000:>10,.1f}"
        )
    clean, held = phases
    print(f"held ÷ clean: {held.rate / clean.rate:.2f}")
    sizes = [
        (p.name, p.control_before, p.control_after)
        for p in phases
        if p.control_before is not None and p.control_after is not None
    ]
    for line in _control.report_lines(sizes):
        print(line)


async def run(url: str, args: argparse.Namespace) -> None:
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
    db = await asyncpg.connect(url)
    try:
        phases = [await phase(name, url, args, db) for name in ("clean", "held")]
        await verify(db)
    finally:
        await db.close()
    report(phases, args.rate, args.limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: a durable throwaway cluster)")
    parser.add_argument("--seconds", type=float, default=90.0, help="length of each phase")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument(
        "--rate", type=float, help="offer this many tasks/s instead of keeping --backlog due"
    )
    parser.add_argument(
        "--limit",
        choices=sorted(LIMITS),
        default="none",
        help="a limit on queue q that does not bind: concurrency (Concurrency(1000)) or rate "
        "(Rate(1,000,000, burst=1,000,000)); default none",
    )
    args = parser.parse_args()
    with postgres(args.url) as url:
        asyncio.run(run(url, args))


if __name__ == "__main__":
    main()
