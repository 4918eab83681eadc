"""Would a split layout pay? ``python -m bench.e2e.split_layout_experiment``.

Evidence for BENCHMARKS.md ("Experiments behind the design"). rdq keeps every task in one
table, ``rdq.task``, from its admission to its TTL: a completion turns the row SUCCEEDED and
``task_ttl`` (7 days by default) later the worker's maintenance deletes it
(``purge_succeeded.sql``, once a minute), leaving dead rows and index entries for VACUUM in the
table the claims scan. The split layout keeps the live tasks in a small table of their own,
moves a task at its completion into a table partitioned by completion time, whose expired
partitions are dropped instead of deleted, and the DLQ in a third table. On one durable
throwaway cluster (or ``--url``) this experiment measures both side by side, interleaved
rounds, PostgreSQL's CPU (its processes, from /proc), WAL bytes (``pg_current_wal_lsn``) and
commits (``pg_stat_database.xact_commit`` less the harness's own statements; each backend's
counts forced out with ``pg_stat_force_next_flush()``) per task, and the time:

* ``today``: rdq's schema as shipped (its own migrations); rdq's batch admission
  (``enqueue_batch_fresh.sql``, what ``Client.submit_many`` sends), ``claim_due()``,
  ``complete_many.sql`` (keeps the SUCCEEDED row) and ``purge_succeeded.sql``'s DELETE;
* ``split``: the prototype of ``sql/split/``: ``split.live`` (PENDING and IN_FLIGHT only, the
  claim's indexes; ``schema.sql``), claimed by ``claim_due()`` line for line over it
  (``claim_due.sql``, with its claim floor, ``floor.sql``), a batch completed by one statement
  (in ``split.complete_many()``, planned once per connection as ``claim_due()`` is, each row
  found by its primary key: ``split.live`` is analyzed near empty) that deletes the claimed
  rows and inserts them, their attempt appended, into ``split.succeeded`` (partitioned by
  range of ``completed_at``, one partition per ``--partition-hours``; ``complete_many.sql``),
  admitted by ``enqueue_batch.sql`` (which also probes ``split.succeeded`` and ``split.dead``
  for the id, as no unique index spans partitions), purged by ``DETACH PARTITION …
  CONCURRENTLY`` and ``DROP TABLE``.

Autovacuum is off on the tables of both layouts: each round runs the VACUUM its work calls for
at a fixed point and measures it, so that no autovacuum lands at a random point of a drain.

Before the phases, ``--kept`` SUCCEEDED tasks of another queue are stored in each layout (the
same ids, times and content; bulk ``INSERT … SELECT generate_series``), their completion times
spread over the 7 days before the current partition (so over 7 daily partitions for ``split``
with the default ``--partition-hours 24``): the rows a 7-day ``task_ttl`` keeps.

1. ``e2e`` (``--repeat`` rounds, after an unmeasured warm-up round of each layout):
   ``--tasks`` tasks admitted in batches of ``--batch``, drained by ``--loops`` loops, each
   claiming ``--limit`` and completing the previous claim's tasks in one statement, the two
   sent at once on two connections (as narrow_row_experiment does); every task verified
   completed exactly once with one SUCCEEDED attempt record; the TTL purge of those tasks,
   treated as expired (``today``: the DELETE with ``older_than`` a day ahead; ``split``: the
   partitions they landed in detached and dropped), verified to leave none of them; and the
   VACUUM the round calls for, once (``today``: ``rdq.task`` after the purge, the versions the
   drain left and the rows the purge deleted in one pass; ``split``: before the purge,
   ``split.live`` and the partitions the tasks were inserted into, as the autovacuum of an
   insert-only table would, since a dropped partition leaves nothing). Each step measured
   alone; the total of admission, drain and purge, and that total with the VACUUM.
2. ``purge`` (``--repeat`` rounds): the purge of ``--purge-rows`` expired tasks (60,000: one
   minute at a sustained 1,000 tasks/s, what the maintenance loop deletes at each of its
   rounds a minute apart) beside the ``--kept`` ones: ``today``: ``purge_succeeded.sql`` (in
   statements of ``--purge-chunk`` rows, by default one), then its VACUUM; ``split``: the
   partition holding those tasks detached and dropped. Each round purges older tasks stored
   for it beforehand (``--repeat`` x ``--purge-rows`` more, in partitions of their own, the
   same rows in ``today``). Its server CPU is then set against the handling of those tasks:
   the server CPU per task of admission and drain from phase 1, the same layout's.

Each measured step starts from the same state for both layouts: ``VACUUM ANALYZE`` of the
database and a ``CHECKPOINT`` before each round (``cluster.quiesce``), so the first change to
each page after it writes the full page to the WAL, as it does in production after each
checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import msgspec

from bench.e2e import cluster, pg_counters
from bench.e2e.narrow_row_experiment import LEASE_US
from bench.e2e.resolve_experiment import QUEUE
from bench.e2e.systems import payload
from rdq._ids import new_task_ids
from rdq.spi import Attempt, Envelope, Outcome
from rdq_postgres._admission import Admission, admission
from rdq_postgres._queries import Queries, Statement, compile_statement

LAYOUTS = ("today", "split")
PHASES = ("e2e", "purge")
SQL = Path(__file__).parent / "sql" / "split"
TTL = timedelta(days=7)
KEPT = "kept"
"""The queue of the kept (and expired) SUCCEEDED tasks."""
HANDLER = "bench.noop"
WORKER = "exp"
FILL_ROWS = 100_000
"""Rows per statement of the bulk fill."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
E2E_STEPS = ("enqueue", "drain", "purge", "vacuum")
TOTAL = "total: enqueue + drain + purge"
TOTAL_VACUUM = "total with the vacuum"
_encode = msgspec.json.Encoder().encode
T = TypeVar("T")
FLUSH = "SELECT pg_stat_force_next_flush() FROM pg_catalog.pg_namespace LIMIT 1"
"""Have the connection's transaction counts reported when it next goes idle (right after this
statement, before it answers): PostgreSQL 15+ reports nothing, not even them, when the
connection has no other pending statistics, so the statement reads a catalog row to have
some."""


def _text(name: str, **slots: str) -> str:
    """``sql/split/<name>.sql`` with each ``{slot}`` replaced by fixed text."""
    text = (SQL / f"{name}.sql").read_text()
    for slot, value in slots.items():
        text = text.replace("{" + slot + "}", value)
    return text


def _statement(name: str, **slots: str) -> Statement:
    """``sql/split/<name>.sql`` compiled as rdq compiles its own (``:name`` parameters)."""
    return compile_statement(name, _text(name, **slots))


def _attempt() -> str:
    now = datetime.now(UTC)
    record = Attempt(
        number=1, outcome=Outcome.SUCCEEDED, started_at=now, finished_at=now, worker_id=WORKER
    )
    return _encode(record).decode()


async def _run(conn: asyncpg.Connection, statement: Statement, **values: Any) -> asyncpg.Record:
    row = await conn.fetchrow(statement.text, *statement.args(values))
    assert row is not None
    return row


@dataclass(frozen=True)
class Cost:
    """What a step cost: wall seconds, server CPU seconds (None: unknown, a server given by
    URL), WAL bytes and commits."""

    seconds: float
    cpu: float | None
    wal: int
    commits: int

    def __add__(self, other: Cost) -> Cost:
        cpu = None if self.cpu is None or other.cpu is None else self.cpu + other.cpu
        return Cost(
            self.seconds + other.seconds, cpu, self.wal + other.wal, self.commits + other.commits
        )


NOTHING = Cost(0.0, 0.0, 0, 0)


class Meter:
    """Measures a step on the experiment's database: before and after it, every connection of
    the harness reports its transaction counts (``pg_stat_force_next_flush()``, PostgreSQL 15+;
    else the harness waits for the counts as pg_counters does), then the WAL position and the
    database's commits are read from the admin database; the flushes' own commits are taken
    out."""

    def __init__(
        self, server: cluster.Server, database: str, conns: Sequence[asyncpg.Connection]
    ) -> None:
        self.server = server
        self.database = database
        self.conns = conns
        self.force = True

    async def _flush(self) -> int:
        """Have every connection's counts reported; how many commits that took."""
        if not self.force:
            await asyncio.sleep(pg_counters.STATS_FLUSH_SECONDS)
            return 0
        for conn in self.conns:
            await conn.execute(FLUSH)
        return len(self.conns)

    async def measure(self, work: Callable[[], Awaitable[T]]) -> tuple[T, Cost]:
        await self._flush()
        before = await pg_counters.read_counters(self.server.url, self.database)
        cpu_before = self.server.cpu_seconds()
        started = time.perf_counter()
        result = await work()
        elapsed = time.perf_counter() - started
        cpu_after = self.server.cpu_seconds()
        own = await self._flush()
        after = await pg_counters.read_counters(self.server.url, self.database, since=before)
        wal = after.wal_since
        if wal is None:
            wal = pg_counters.lsn_bytes(after.lsn) - pg_counters.lsn_bytes(before.lsn)
        cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        return result, Cost(elapsed, cpu, wal, after.commits - before.commits - own)


class Layout:
    """The statements of one layout, and how it is set up, filled, purged and vacuumed."""

    name = ""
    table = ""
    """Where its SUCCEEDED tasks are."""
    vacuum_first = False
    """Whether the round's VACUUM comes before its purge (the partitions it vacuums are gone
    after it) rather than after it."""
    claim: Statement
    complete: Statement
    verify: Statement
    fill_statement: Statement

    async def setup(self, conn: asyncpg.Connection) -> None:
        """What the layout needs besides rdq's migrated schema."""

    async def before_round(self, conn: asyncpg.Connection) -> None:
        """Unmeasured preparation of an e2e round."""

    async def enqueue(self, conn: asyncpg.Connection, batch: Admission) -> None:
        raise NotImplementedError

    async def round_tables(self, conn: asyncpg.Connection) -> list[str]:
        """Unmeasured: where the round's completed tasks are (what its VACUUM and purge take)."""
        return []

    async def vacuum_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        """The VACUUM the round's work calls for, once (``tables``: ``round_tables``)."""
        raise NotImplementedError

    async def purge_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        """The TTL purge of the round's tasks, all treated as expired."""
        raise NotImplementedError

    async def vacuum_kept(self, conn: asyncpg.Connection) -> bool:
        """The VACUUM a purge of kept tasks calls for; False if it calls for none."""
        raise NotImplementedError

    async def make_room(self, conn: asyncpg.Connection, lo: datetime, hi: datetime) -> None:
        """Unmeasured: a place for kept tasks completed in [lo, hi)."""

    async def fill(
        self, conn: asyncpg.Connection, first: int, count: int, start: datetime, step_us: int
    ) -> None:
        """Kept tasks ``first`` … ``first + count - 1``, completed ``step_us`` apart from
        ``start`` on."""
        values = {
            "queue": KEPT,
            "first": first,
            "count": count,
            "start": start,
            "step_us": step_us,
            "attempt": _attempt(),
        }
        statement = self.fill_statement
        await conn.execute(statement.text, *statement.args(values))

    async def kept(self, conn: asyncpg.Connection, before: datetime | None = None) -> int:
        """How many kept tasks there are (completed before ``before``, if given)."""
        query = f"SELECT count(*) FROM {self.table} WHERE queue = $1"
        if before is None:
            return int(await conn.fetchval(query, KEPT))
        return int(await conn.fetchval(query + " AND completed_at < $2", KEPT, before))

    async def kept_plan(
        self, conn: asyncpg.Connection, lo: datetime, hi: datetime, cutoffs: list[datetime]
    ) -> list[Any]:
        """Unmeasured: what ``purge_kept`` takes to purge the tasks completed in [lo, hi) (the
        oldest kept), in statements up to each of ``cutoffs`` if the layout deletes rows."""
        raise NotImplementedError

    async def purge_kept(self, conn: asyncpg.Connection, plan: list[Any]) -> None:
        raise NotImplementedError


class Today(Layout):
    """rdq's schema and statements as shipped."""

    name = "today"
    table = "rdq.task"

    def __init__(self) -> None:
        self.sql = Queries("rdq", "rdq")
        self.claim = self.sql.claim
        self.complete = self.sql.complete_many
        self.purge = self.sql.purge_succeeded
        self.verify = _statement("verify_today")
        self.fill_statement = _statement("fill_today")

    async def setup(self, conn: asyncpg.Connection) -> None:
        await conn.execute("ALTER TABLE rdq.task SET (autovacuum_enabled = off)")

    async def enqueue(self, conn: asyncpg.Connection, batch: Admission) -> None:
        row = await _run(conn, batch.statement, **batch.values)
        if row["present"]:
            raise RuntimeError(f"{len(row['present'])} ids of the batch already stored")

    async def vacuum_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        """After the purge: the versions the claims and completions left, and the rows the
        purge deleted, in one pass (as an autovacuum after that much churn would)."""
        await conn.execute("VACUUM rdq.task")

    async def purge_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        ahead = datetime.now(UTC) + timedelta(days=1)
        await _run(conn, self.purge, queue=QUEUE, older_than=ahead)

    async def vacuum_kept(self, conn: asyncpg.Connection) -> bool:
        await conn.execute("VACUUM rdq.task")
        return True

    async def kept_plan(
        self, conn: asyncpg.Connection, lo: datetime, hi: datetime, cutoffs: list[datetime]
    ) -> list[Any]:
        return list(cutoffs)

    async def purge_kept(self, conn: asyncpg.Connection, plan: list[Any]) -> None:
        for cutoff in plan:
            await _run(conn, self.purge, queue=KEPT, older_than=cutoff)


class Split(Layout):
    """The prototype of ``sql/split/``."""

    name = "split"
    table = "split.succeeded"
    vacuum_first = True

    def __init__(self, partition: timedelta) -> None:
        self.partition = partition
        self.claim = _statement("claim")
        self.complete = _statement("complete_many")
        self.admit = _statement("enqueue_batch")
        self.partitions = _statement("partitions")
        self.verify = _statement("verify_split")
        self.fill_statement = _statement("fill_split")

    async def setup(self, conn: asyncpg.Connection) -> None:
        for name in ("schema", "floor", "claim_due"):
            await conn.execute(_text(name))

    def start_of(self, at: datetime) -> datetime:
        """The start of the partition holding ``at`` (partitions are aligned on the epoch)."""
        return EPOCH + (at - EPOCH) // self.partition * self.partition

    async def _create(self, conn: asyncpg.Connection, lo: datetime) -> None:
        await conn.execute("SELECT split.create_partition($1, $2)", lo, lo + self.partition)

    async def before_round(self, conn: asyncpg.Connection) -> None:
        """The partitions of now and of the next period, made ahead as a real layout would."""
        now: datetime = await conn.fetchval("SELECT now()")
        await self.make_room(conn, now, now + self.partition)

    async def enqueue(self, conn: asyncpg.Connection, batch: Admission) -> None:
        row = await _run(conn, self.admit, **batch.values)
        if row["present"]:
            raise RuntimeError(f"{len(row['present'])} ids of the batch already stored")

    async def round_tables(self, conn: asyncpg.Connection) -> list[str]:
        statement = self.partitions
        rows = await conn.fetch(statement.text, *statement.args({"queue": QUEUE}))
        return [str(row["partition"]) for row in rows]

    async def vacuum_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        """Before the purge: split.live (the rows the claims updated and the completions
        deleted) and the partitions the tasks were inserted into (an autovacuum of an
        insert-only table: its pages set all-visible), which the purge then drops."""
        await conn.execute("VACUUM " + ", ".join(["split.live", *tables]))

    async def _drop(self, conn: asyncpg.Connection, partition: str) -> None:
        for name in ("detach_partition", "drop_partition"):
            await conn.execute(_statement(name, partition=partition).text)

    async def purge_round(self, conn: asyncpg.Connection, tables: list[str]) -> None:
        for partition in tables:
            await self._drop(conn, partition)

    async def vacuum_kept(self, conn: asyncpg.Connection) -> bool:
        return False

    async def make_room(self, conn: asyncpg.Connection, lo: datetime, hi: datetime) -> None:
        start = self.start_of(lo)
        while start < hi:
            await self._create(conn, start)
            start += self.partition

    async def kept_plan(
        self, conn: asyncpg.Connection, lo: datetime, hi: datetime, cutoffs: list[datetime]
    ) -> list[Any]:
        if self.start_of(lo) != lo or lo + self.partition != hi:
            raise ValueError(f"[{lo}, {hi}) is not one partition")
        return [await conn.fetchval("SELECT split.partition_name($1)", lo)]

    async def purge_kept(self, conn: asyncpg.Connection, plan: list[Any]) -> None:
        for partition in plan:
            await self._drop(conn, partition)


@dataclass
class Context:
    """The cluster, the harness's connections and the experiment's settings."""

    args: argparse.Namespace
    server: cluster.Server
    url: str
    conn: asyncpg.Connection
    """The harness's own: setup, verification, purges and VACUUMs."""
    enqueuer: asyncpg.Connection
    claimers: list[asyncpg.Connection]
    completers: list[asyncpg.Connection]
    meter: Meter
    layouts: dict[str, Layout]
    partition: timedelta
    now_start: datetime
    """The start of the partition of the time the run began: kept tasks completed before."""

    @property
    def ttl_start(self) -> datetime:
        """Kept tasks are completed in [ttl_start, now_start)."""
        return self.now_start - self.ttl_partitions * self.partition

    @property
    def ttl_partitions(self) -> int:
        return -(-TTL // self.partition)


def _batches(tasks: int, size: int) -> list[Admission]:
    """rdq's admission statements (``Client.submit_many``'s, ``enqueue_batch_fresh``) for
    ``tasks`` new tasks of QUEUE, ``size`` a batch."""
    sql = Queries("rdq", "rdq")
    batches = []
    for start in range(0, tasks, size):
        count = min(size, tasks - start)
        envelopes = [
            Envelope(id=task_id, queue=QUEUE, handler_ref=HANDLER, payload=payload(start + i))
            for i, task_id in enumerate(new_task_ids(count))
        ]
        batch = admission(sql, envelopes, None)
        if batch.statement.name != "enqueue_batch_fresh":
            raise RuntimeError(f"rdq would admit them by {batch.statement.name}")
        batches.append(batch)
    return batches


async def _enqueue(ctx: Context, layout: Layout, batches: list[Admission]) -> None:
    for batch in batches:
        await layout.enqueue(ctx.enqueuer, batch)


async def _drain_loop(
    layout: Layout, claimer: asyncpg.Connection, completer: asyncpg.Connection, limit: int
) -> int:
    """Claim ``limit`` and complete the previous claim's tasks in one statement, the two sent
    at once on two connections (narrow_row_experiment's loop), until nothing is left."""
    claim, complete = layout.claim, layout.complete

    async def claim_some() -> list[asyncpg.Record]:
        values = {"queue": QUEUE, "limit": limit, "lease_us": LEASE_US, "worker_id": WORKER}
        rows: list[asyncpg.Record] = await claimer.fetch(claim.text, *claim.args(values))
        return rows

    async def complete_all(rows: list[asyncpg.Record]) -> int:
        attempt = _attempt()
        values = {
            "ids": [r["id"] for r in rows],
            "tokens": [r["token"] for r in rows],
            "attempts": [attempt] * len(rows),
            "error_types": [None] * len(rows),
        }
        row = await _run(completer, complete, **values)
        return len(row["done"] or ())

    completed = 0
    previous: list[asyncpg.Record] = []
    while True:
        if previous:
            claims, done = await asyncio.gather(claim_some(), complete_all(previous))
            if done != len(previous):
                raise RuntimeError(f"{done} of {len(previous)} completed")
        else:
            claims = await claim_some()
        completed += len(previous)
        if not claims and not previous:
            return completed
        previous = claims


async def _drain(ctx: Context, layout: Layout) -> int:
    loops = [
        _drain_loop(layout, claimer, completer, ctx.args.limit)
        for claimer, completer in zip(ctx.claimers, ctx.completers, strict=True)
    ]
    return sum(await asyncio.gather(*loops))


async def _check(
    ctx: Context, layout: Layout, ids: list[str], *, completed: bool, when: str
) -> None:
    """Every task of the round completed exactly once (``completed``), or none of them left."""
    row = await _run(ctx.conn, layout.verify, queue=QUEUE, ids=ids)
    want = len(ids) if completed else 0
    if (row["rows"], row["ids"], row["completed"]) != (want, want, want):
        raise RuntimeError(
            f"{layout.name} {when}: {row['rows']} rows, {row['ids']} ids,"
            f" {row['completed']} completed once, of {len(ids)} tasks"
        )


async def _e2e_round(ctx: Context, layout: Layout, tasks: int) -> dict[str, Cost]:
    """One round of phase 1: admission, drain, the TTL purge, the VACUUM."""
    meter, conn = ctx.meter, ctx.conn
    await layout.before_round(conn)
    batches = _batches(tasks, ctx.args.batch)
    ids = [task.id for batch in batches for task in batch.tasks]
    await cluster.quiesce(ctx.server.url, ctx.url)
    costs: dict[str, Cost] = {}
    _, costs["enqueue"] = await meter.measure(lambda: _enqueue(ctx, layout, batches))
    done, costs["drain"] = await meter.measure(lambda: _drain(ctx, layout))
    if done != tasks:
        raise RuntimeError(f"{layout.name}: {done} of {tasks} drained")
    await _check(ctx, layout, ids, completed=True, when="after the drain")
    tables = await layout.round_tables(conn)
    if layout.vacuum_first:
        _, costs["vacuum"] = await meter.measure(lambda: layout.vacuum_round(conn, tables))
    _, costs["purge"] = await meter.measure(lambda: layout.purge_round(conn, tables))
    await _check(ctx, layout, ids, completed=False, when="after the purge")
    if not layout.vacuum_first:
        _, costs["vacuum"] = await meter.measure(lambda: layout.vacuum_round(conn, tables))
    costs[TOTAL] = costs["enqueue"] + costs["drain"] + costs["purge"]
    costs[TOTAL_VACUUM] = costs[TOTAL] + costs["vacuum"]
    return costs


async def _fill(
    ctx: Context, layout: Layout, first: int, count: int, lo: datetime, hi: datetime
) -> None:
    """``count`` kept tasks completed evenly over [lo, hi), numbered from ``first``."""
    await layout.make_room(ctx.conn, lo, hi)
    step_us = (hi - lo) // timedelta(microseconds=1) // count
    for offset in range(0, count, FILL_ROWS):
        n = min(FILL_ROWS, count - offset)
        start = lo + timedelta(microseconds=offset * step_us)
        await layout.fill(ctx.conn, first + offset, n, start, step_us)


def _expired(ctx: Context, r: int) -> tuple[datetime, datetime]:
    """The period of the tasks round ``r`` of phase 2 purges: one partition, before the TTL's
    (round 0 the oldest)."""
    lo = ctx.ttl_start - (ctx.args.repeat - r) * ctx.partition
    return lo, lo + ctx.partition


async def _purge_round(ctx: Context, layout: Layout, r: int) -> dict[str, Cost]:
    """One round of phase 2: the purge of the ``--purge-rows`` oldest kept tasks."""
    args, conn = ctx.args, ctx.conn
    lo, hi = _expired(ctx, r)
    rows = args.purge_rows
    chunk = args.purge_chunk or rows
    step = (hi - lo) // rows  # as _fill spaced them: task k of the period at lo + k x step
    cutoffs = [lo + min(k + chunk, rows) * step for k in range(0, rows, chunk)]
    cutoffs[-1] = hi
    before = await layout.kept(conn)
    if await layout.kept(conn, hi) != rows:
        raise RuntimeError(f"{layout.name}: not {rows} tasks to purge before {hi}")
    plan = await layout.kept_plan(conn, lo, hi, cutoffs)
    await cluster.quiesce(ctx.server.url, ctx.url)
    costs: dict[str, Cost] = {}
    _, costs["purge"] = await ctx.meter.measure(lambda: layout.purge_kept(conn, plan))
    left = await layout.kept(conn)
    if left != before - rows or await layout.kept(conn, hi):
        raise RuntimeError(f"{layout.name}: {before} kept tasks, {left} after purging {rows}")
    vacuumed, cost = await ctx.meter.measure(lambda: layout.vacuum_kept(conn))
    costs["its vacuum"] = cost if vacuumed else NOTHING
    return costs


def _median(costs: list[Cost]) -> Cost:
    cpus = [c.cpu for c in costs]
    return Cost(
        statistics.median(c.seconds for c in costs),
        None if None in cpus else statistics.median(c for c in cpus if c is not None),
        round(statistics.median(c.wal for c in costs)),
        round(statistics.median(c.commits for c in costs)),
    )


def _us(cpu: float | None, n: int) -> str:
    return "?" if cpu is None else f"{cpu / n * 1e6:,.1f} µs"


def _rate(cost: Cost, n: int) -> float:
    return n / cost.seconds if cost.seconds > 0 else float("inf")


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def _cell(cost: Cost, n: int) -> str:
    """tasks/s · server CPU per task · WAL per task · commits per task."""
    if cost == NOTHING:
        return "none"
    return (
        f"{_rate(cost, n):,.0f}/s · {_us(cost.cpu, n)} · {cost.wal / n:,.0f} B"
        f" · {cost.commits / n:.4f}"
    )


def _print_e2e(ctx: Context, results: dict[str, list[dict[str, Cost]]]) -> dict[str, Cost]:
    """The table of phase 1; returns each layout's median handling cost (enqueue + drain)."""
    n, args = ctx.args.tasks, ctx.args
    names = list(results)
    medians = {
        name: {step: _median([r[step] for r in runs]) for step in runs[0]}
        for name, runs in results.items()
    }
    print(
        f"\nphase 1: {n:,} tasks a round, batches of {args.batch:,}, claims of {args.limit},"
        f" {args.loops} loop(s), {ctx.args.kept:,} kept tasks beside them, medians of"
        f" {args.repeat} (tasks/s · PostgreSQL CPU per task · WAL per task · commits per task):\n"
    )
    both = "today" in medians and "split" in medians
    header = "| step | " + " | ".join(names) + " |"
    rule = "|---|" + "--:|" * len(names)
    if both:
        header += " split ÷ today (rate · CPU · WAL) |"
        rule += "--:|"
    print(header)
    print(rule)
    for step in (*E2E_STEPS, TOTAL, TOTAL_VACUUM):
        cells = [_cell(medians[name][step], n) for name in names]
        line = f"| {step} | " + " | ".join(cells) + " |"
        if both:
            s, t = medians["split"][step], medians["today"][step]
            rate = _ratio(_rate(s, n), _rate(t, n)) if NOTHING not in (s, t) else "–"
            line += f" {rate} · {_ratio(s.cpu, t.cpu)} · {_ratio(s.wal, t.wal)} |"
        print(line)
    return {name: m["enqueue"] + m["drain"] for name, m in medians.items()}


def _print_purge(
    ctx: Context, results: dict[str, list[dict[str, Cost]]], handling: dict[str, Cost]
) -> None:
    args = ctx.args
    rows, e2e_tasks = args.purge_rows, args.tasks
    chunk = args.purge_chunk or rows
    print(
        f"\nphase 2: the purge of {rows:,} expired tasks (one minute at {rows / 60:,.0f}"
        f" tasks/s) beside {args.kept:,} kept ones, `today` in statements of {chunk:,} rows,"
        f" `split` one partition of {ctx.partition / timedelta(hours=1):g} h dropped; medians of"
        f" {args.repeat} (time · PostgreSQL CPU per purged task · WAL per purged task ·"
        f" commits):\n"
    )
    print("| | " + " | ".join(results) + " |")
    print("|---|" + "--:|" * len(results))
    medians = {
        name: {step: _median([r[step] for r in runs]) for step in runs[0]}
        for name, runs in results.items()
    }
    for step in ("purge", "its vacuum"):
        cells = []
        for name in results:
            c = medians[name][step]
            cells.append(
                "none"
                if c == NOTHING
                else f"{c.seconds:.3f} s · {_us(c.cpu, rows)} · {c.wal / rows:,.1f} B · {c.commits}"
            )
        print(f"| {step} | " + " | ".join(cells) + " |")
    if not handling:
        print("\n(no phase 1 in this run: no share of the handling's cost)")
        return
    print(
        f"\nThe purge set against the server's cost of handling those tasks at a sustained"
        f" {rows / 60:,.0f} tasks/s (enqueue + drain per task, phase 1, {e2e_tasks:,} tasks a"
        " round):\n"
    )
    for name in results:
        if name not in handling:
            continue
        h, m = handling[name], medians[name]
        both = m["purge"] + m["its vacuum"]
        if not h.cpu or not h.wal or m["purge"].cpu is None or both.cpu is None:
            print(f"- {name}: server CPU unknown")
            continue
        per_task = h.cpu / e2e_tasks
        share = m["purge"].cpu / rows / per_task
        share_v = both.cpu / rows / per_task
        wal_share = m["purge"].wal / rows / (h.wal / e2e_tasks)
        wal_share_v = both.wal / rows / (h.wal / e2e_tasks)
        print(
            f"- {name}: handling {per_task * 1e6:,.1f} µs and {h.wal / e2e_tasks:,.0f} B of WAL"
            f" per task; the purge adds {share:.1%} to the server CPU ({share_v:.1%} with its"
            f" VACUUM) and {wal_share:.1%} to the WAL ({wal_share_v:.1%}); it takes"
            f" {m['purge'].cpu:.3f} s of server CPU a minute ({both.cpu:.3f} s with its"
            f" VACUUM), {m['purge'].cpu / 60:.2%} of a core"
        )


def _line(name: str, costs: dict[str, Cost], n: int, steps: Sequence[str]) -> str:
    parts = []
    for step in steps:
        c = costs[step]
        parts.append(f"{step} {'none' if c == NOTHING else _cell(c, n)}")
    return f"{name:6} " + "; ".join(parts)


async def main(args: argparse.Namespace) -> None:
    """Fill, then run each phase ``--repeat`` rounds, the layouts interleaved, and print the
    medians."""
    partition = timedelta(hours=args.partition_hours)
    async with cluster.experiment_store(args.url) as (server, url, _storage):
        conn = await asyncpg.connect(url)
        others = [await asyncpg.connect(url) for _ in range(1 + 2 * args.loops)]
        enqueuer, claimers, completers = others[0], others[1::2], others[2::2]
        try:
            meter = Meter(server, "bench_experiment", [conn, *others])
            meter.force = int(await conn.fetchval("SHOW server_version_num")) >= 150000
            split = Split(partition)
            layouts: dict[str, Layout] = {}
            for name in args.layouts:
                layouts[name] = Today() if name == "today" else split
                await layouts[name].setup(conn)
            now: datetime = await conn.fetchval("SELECT now()")
            ctx = Context(
                args,
                server,
                url,
                conn,
                enqueuer,
                claimers,
                completers,
                meter,
                layouts,
                partition,
                split.start_of(now),
            )
            await _run_phases(ctx)
        finally:
            for c in (conn, *others):
                await c.close()


async def _run_phases(ctx: Context) -> None:
    args, conn = ctx.args, ctx.conn
    if args.kept:
        for layout in ctx.layouts.values():
            started = time.perf_counter()
            await _fill(ctx, layout, 1, args.kept, ctx.ttl_start, ctx.now_start)
            print(
                f"{layout.name}: {args.kept:,} kept tasks, completed over"
                f" [{ctx.ttl_start:%Y-%m-%d %H:%M}, {ctx.now_start:%Y-%m-%d %H:%M}) UTC"
                f" ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
        await conn.execute("VACUUM ANALYZE")
    handling: dict[str, Cost] = {}
    if "e2e" in args.phases:
        e2e: dict[str, list[dict[str, Cost]]] = {name: [] for name in ctx.layouts}
        for layout in ctx.layouts.values():  # statements prepared, functions compiled
            warm_up = min(args.tasks, 3 * args.limit)
            await _e2e_round(ctx, layout, warm_up)
            print(f"{layout.name}: a warm-up round of {warm_up:,} tasks (verified)", flush=True)
        for r in range(args.repeat):
            order = list(ctx.layouts.values())
            for layout in order if r % 2 == 0 else reversed(order):
                costs = await _e2e_round(ctx, layout, args.tasks)
                e2e[layout.name].append(costs)
                print(
                    f"e2e round {r + 1}, "
                    + _line(layout.name, costs, args.tasks, (*E2E_STEPS, TOTAL))
                    + " (verified)",
                    flush=True,
                )
        handling = _print_e2e(ctx, e2e)
    if "purge" in args.phases:
        for layout in ctx.layouts.values():
            started = time.perf_counter()
            for r in range(args.repeat):
                lo, hi = _expired(ctx, r)
                first = args.kept + 1 + r * args.purge_rows
                await _fill(ctx, layout, first, args.purge_rows, lo, hi)
            print(
                f"{layout.name}: {args.repeat} x {args.purge_rows:,} expired tasks to purge"
                f" ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
        await conn.execute("VACUUM ANALYZE")
        purges: dict[str, list[dict[str, Cost]]] = {name: [] for name in ctx.layouts}
        for r in range(args.repeat):
            order = list(ctx.layouts.values())
            for layout in order if r % 2 == 0 else reversed(order):
                costs = await _purge_round(ctx, layout, r)
                purges[layout.name].append(costs)
                print(
                    f"purge round {r + 1}, "
                    + _line(layout.name, costs, args.purge_rows, ("purge", "its vacuum"))
                    + " per purged task (verified)",
                    flush=True,
                )
        _print_purge(ctx, purges, handling)


def _names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [name for name in text.split(",") if name]
        unknown = set(names) - set(choices)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(sorted(unknown))}")
        return names

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.split_layout_experiment")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per e2e round")
    parser.add_argument("--batch", type=int, default=1000, help="tasks per admission")
    parser.add_argument("--limit", type=int, default=100, help="tasks per claim")
    parser.add_argument("--loops", type=int, default=1, help="concurrent drain loops")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of each phase")
    parser.add_argument(
        "--kept", type=int, default=1_000_000, help="SUCCEEDED tasks kept beside (7 days' worth)"
    )
    parser.add_argument(
        "--purge-rows", type=int, default=60_000, help="expired tasks a purge round removes"
    )
    parser.add_argument(
        "--purge-chunk",
        type=int,
        default=0,
        help="rows per DELETE of today's purge (default: all in one, as the maintenance loop)",
    )
    parser.add_argument(
        "--partition-hours", type=float, default=24.0, help="the period of a split partition"
    )
    parser.add_argument(
        "--layouts",
        type=_names(LAYOUTS),
        default=list(LAYOUTS),
        help=f"comma-separated, of {', '.join(LAYOUTS)}",
    )
    parser.add_argument(
        "--phases",
        type=_names(PHASES),
        default=list(PHASES),
        help=f"comma-separated, of {', '.join(PHASES)}",
    )
    parser.add_argument("--url", default=None)
    return parser


if __name__ == "__main__":
    asyncio.run(main(_parser().parse_args()))
