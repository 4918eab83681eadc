"""The contention benchmark: ``python -m rdq_compliance.bench STORAGE_URL [options]``.

It drives a store through the storage SPI only, in the seed's shape:

- ``enqueue``: 4 producers (by default), one task per call; and ``enqueue_batch`` (100 a call);
- ``claim_due``: 1, 4, 8 and 16 concurrent claimants over a resident pool of 256 due tasks,
  with ``limit=1`` and ``limit=10``. As in the pgbench ceiling, claimed tasks stay due: they
  are claimed with a 1 ms lease, so most claims reclaim a lapsed lease (appending its
  LEASE_EXPIRED record); after ~8 claims per task a fresh pool replaces it (off the clock).
  A claim that starts before the previous lease on its task ended (storage clock) is a
  double claim (must be 0);
- claim+complete cycles: claim one task (long lease), complete it, repeat; a refiller enqueues
  replacements off the clock. A task handed out twice is a double claim.

It prints throughput, p50/p99 latency of the measured call and the double-claim count. For a
``postgresql://`` URL it also runs the ceiling with ``pgbench`` in the same invocation
(:mod:`rdq_compliance.bench_pgbench`) and prints our figures beside it as a fraction.
Figures are printed, never asserted: a benchmark is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import resource
import secrets
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome, Storage

__all__ = ["Result", "main", "run_benchmark"]

POOL = 256
LONG_LEASE = timedelta(hours=1)
SHORT_LEASE = timedelta(milliseconds=1)
RETIRE_AFTER = 8


@dataclass
class Result:
    """One measured workload."""

    workload: str
    limit: int
    concurrency: int
    ops: int = 0
    items: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    double_claims: int = 0
    empty_claims: int = 0
    client_cpu: float = 0.0
    ceiling: float | None = None
    fraction: float | None = None

    @property
    def rate(self) -> float:
        """Items (tasks enqueued or claimed) per second."""
        return self.items / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0]
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[int(q) - 1]

    def row(self) -> dict[str, object]:
        data = asdict(self)
        del data["latencies_ms"]
        data.update(rate=round(self.rate), p50_ms=self.percentile(50), p99_ms=self.percentile(99))
        return data


class _Window:
    """Counts only what completes between ``start`` and ``end`` (after the warm-up)."""

    def __init__(self, warmup: float, seconds: float) -> None:
        now = time.perf_counter()
        self.start = now + warmup
        self.end = self.start + seconds
        self.cpu_start = 0.0

    def running(self) -> bool:
        return time.perf_counter() < self.end

    def counts(self, at: float) -> bool:
        return self.start <= at < self.end


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    result: Result,
    workers: Sequence[Callable[[_Window, Result], Awaitable[None]]],
    warmup: float,
    seconds: float,
) -> Result:
    window = _Window(warmup, seconds)
    cpu_at_start: list[float] = []

    async def cpu_probe() -> None:
        await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
        cpu_at_start.append(_cpu())

    probe = asyncio.create_task(cpu_probe())
    await asyncio.gather(*(worker(window, result) for worker in workers))
    await probe
    result.seconds = seconds
    result.client_cpu = (_cpu() - cpu_at_start[0]) / seconds if cpu_at_start else 0.0
    return result


def _task(queue: str, n: int) -> Envelope:
    return Envelope(
        id=f"{queue}-{n}-{secrets.token_hex(4)}",
        queue=queue,
        handler_ref="bench:noop",
        payload={"n": n, "body": "x" * 64},
    )


async def bench_enqueue(
    storage: Storage, producers: int, batch: int, warmup: float, seconds: float
) -> Result:
    queue = f"bench-enq-{secrets.token_hex(3)}"
    workload = "enqueue" if batch == 1 else "enqueue_batch"
    result = Result(workload, batch, producers)

    async def producer(window: _Window, out: Result) -> None:
        n = 0
        while window.running():
            started = time.perf_counter()
            if batch == 1:
                await storage.enqueue(_task(queue, n))
            else:
                await storage.enqueue_batch([_task(queue, n + i) for i in range(batch)])
            done = time.perf_counter()
            n += batch
            if window.counts(done):
                out.ops += 1
                out.items += batch
                out.latencies_ms.append((done - started) * 1000)

    return await _measure(result, [producer] * producers, warmup, seconds)


class _Refiller:
    """Keeps the queue's pool at ``POOL`` due tasks, off the claimants' clock: ``claimed(n)``
    says n tasks left the pool for good; as many are enqueued. Up to four refills run at once,
    so the pool keeps up with many claimants."""

    def __init__(self, storage: Storage, queue: str) -> None:
        self.storage = storage
        self.queue = queue
        self.owed = 0
        self.wanted = asyncio.Event()
        self.refilled = asyncio.Event()
        self.n = 0

    async def fill(self, count: int) -> None:
        for start in range(0, count, 500):
            size = min(500, count - start)
            self.n += size
            await self.storage.enqueue_batch(
                [_task(self.queue, self.n - size + i) for i in range(size)]
            )

    def claimed(self, count: int) -> None:
        self.owed += count
        self.wanted.set()

    async def _refill(self, owed: int) -> None:
        await self.fill(owed)
        self.refilled.set()

    async def run(self, window: _Window) -> None:
        running: set[asyncio.Task[None]] = set()
        while window.running():
            try:
                await asyncio.wait_for(self.wanted.wait(), 0.05)
            except TimeoutError:
                continue
            self.wanted.clear()
            if len(running) >= 4:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            owed, self.owed = self.owed, 0
            task = asyncio.create_task(self._refill(owed))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)


class _RotatingPool:
    """256 due tasks that stay due: claimed with a 1 ms lease, so each claim of a task after
    the first reclaims a lapsed lease (and appends its LEASE_EXPIRED record). After about
    ``RETIRE_AFTER`` claims per task a fresh pool is enqueued on a new queue (one batch, off
    the clock) and claimants move to it, which bounds the growth of the record lists."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.queue = ""
        self.claims = 0
        self.swap: asyncio.Task[None] | None = None

    async def _new_queue(self) -> str:
        queue = f"bench-claim-{secrets.token_hex(4)}"
        await self.storage.enqueue_batch([_task(queue, n) for n in range(POOL)])
        return queue

    async def start(self) -> None:
        self.queue = await self._new_queue()

    def claimed(self, count: int) -> None:
        self.claims += count
        if self.claims >= POOL * RETIRE_AFTER and (self.swap is None or self.swap.done()):
            self.swap = asyncio.create_task(self._rotate())

    async def _rotate(self) -> None:
        self.queue = await self._new_queue()
        self.claims = 0

    async def aclose(self) -> None:
        if self.swap is not None:
            await self.swap


def _overlaps(leases: dict[str, list[tuple[datetime, datetime]]]) -> int:
    """Claims that began while another claimant's lease on the same task was still valid."""
    count = 0
    for intervals in leases.values():
        intervals.sort()
        count += sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    return count


async def bench_claim_due(
    storage: Storage, claimants: int, limit: int, warmup: float, seconds: float
) -> Result:
    """``claim_due`` alone over a resident pool of 256 due tasks.

    Like the pgbench ceiling, claimed tasks stay in the pool: they are claimed with a 1 ms
    lease, so the next claim of a task is a reclaim of a lapsed lease (the heavier path,
    which appends a LEASE_EXPIRED record); see :class:`_RotatingPool`. Double
    claims are checked on the storage clock: no claim of a task may start before the previous
    lease on it ended."""
    pool = _RotatingPool(storage)
    await pool.start()
    result = Result("claim_due", limit, claimants)
    leases: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)

    async def claimant(window: _Window, out: Result) -> None:
        while window.running():
            started = time.perf_counter()
            claimed = await storage.claim_due(pool.queue, limit, SHORT_LEASE)
            done = time.perf_counter()
            for claim in claimed:
                end = claim.task.lease_expires_at
                assert end is not None
                leases[claim.task.id].append((end - SHORT_LEASE, end))
            pool.claimed(len(claimed))
            if not claimed:
                out.empty_claims += 1
                await asyncio.sleep(0.001)
            if window.counts(done):
                out.ops += 1
                out.items += len(claimed)
                out.latencies_ms.append((done - started) * 1000)

    await _measure(result, [claimant] * claimants, warmup, seconds)
    await pool.aclose()
    result.double_claims = _overlaps(leases)
    return result


async def bench_cycles(storage: Storage, claimants: int, warmup: float, seconds: float) -> Result:
    """Claim one task (long lease), complete it, repeat; the pool is refilled off the clock.
    Every task is completed once, so a task handed out twice is a double claim."""
    queue = f"bench-cycle-{secrets.token_hex(3)}"
    refiller = _Refiller(storage, queue)
    await refiller.fill(POOL)
    result = Result("claim+complete", 1, claimants)
    seen: set[str] = set()
    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED, finished_at=datetime.now(UTC))

    async def claimant(window: _Window, out: Result) -> None:
        while window.running():
            started = time.perf_counter()
            claimed = await storage.claim_due(queue, 1, LONG_LEASE)
            for claim in claimed:
                await storage.complete(claim.task.id, claim.token, attempt)
            done = time.perf_counter()
            for claim in claimed:
                if claim.task.id in seen:
                    out.double_claims += 1
                seen.add(claim.task.id)
            refiller.claimed(len(claimed))
            if not claimed:
                out.empty_claims += 1
                refiller.refilled.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(refiller.refilled.wait(), 0.05)
            if window.counts(done):
                out.ops += 1
                out.items += len(claimed)
                out.latencies_ms.append((done - started) * 1000)

    async def refill(window: _Window, out: Result) -> None:
        await refiller.run(window)

    return await _measure(result, [claimant] * claimants + [refill], warmup, seconds)


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    for key, value in params.items():
        query.setdefault(key, value)
    return urlunsplit(parts._replace(query=urlencode(query)))


def _is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in ("postgresql", "postgres")


async def run_benchmark(
    url: str,
    *,
    claimants: Sequence[int] = (1, 4, 8, 16),
    limits: Sequence[int] = (1, 10),
    cycles: Sequence[int] = (1, 4, 16),
    producers: int = 4,
    warmup: float = 1.0,
    seconds: float = 5.0,
) -> list[Result]:
    """Run every SPI workload against the store at ``url``; return the results."""
    results: list[Result] = []
    pool_max = max([*claimants, *cycles, producers]) + 2
    store_url = url
    schema = None
    if _is_postgres(url):
        schema = f"rdq_bench_{secrets.token_hex(3)}"
        store_url = _with_query(url, schema=schema, pool_min="4", pool_max=str(pool_max))
    async with open_storage(store_url) as storage:
        await storage.migrate()
        try:
            results.append(await bench_enqueue(storage, producers, 1, warmup, seconds))
            _report_progress(results[-1])
            if storage.capabilities().batch_enqueue:
                results.append(await bench_enqueue(storage, producers, 100, warmup, seconds))
                _report_progress(results[-1])
            for limit in limits:
                for count in claimants:
                    result = await bench_claim_due(storage, count, limit, warmup, seconds)
                    results.append(result)
                    _report_progress(result)
            for count in cycles:
                result = await bench_cycles(storage, count, warmup, seconds)
                results.append(result)
                _report_progress(result)
        finally:
            if schema is not None:
                await _drop_schema(url, schema)
    return results


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg

    from rdq_compliance.bench_pgbench import libpq_url

    conn = await asyncpg.connect(libpq_url(url))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _report_progress(result: Result) -> None:
    print(
        f"  {result.workload:<15} limit={result.limit:<3} x{result.concurrency:<3}"
        f" {result.rate:>9,.0f}/s  p50 {result.percentile(50):6.2f} ms"
        f"  p99 {result.percentile(99):6.2f} ms  double claims {result.double_claims}"
        f"  client CPU {result.client_cpu:4.0%}",
        file=sys.stderr,
        flush=True,
    )


def _attach_ceiling(results: list[Result], ceiling: dict[tuple[str, int, int], float]) -> None:
    for result in results:
        if result.workload == "claim_due":
            result.ceiling = ceiling.get(("claim", result.limit, result.concurrency))
        elif result.workload == "enqueue":
            result.ceiling = ceiling.get(("insert", 1, result.concurrency))


def render_table(results: Sequence[Result]) -> str:
    """A Markdown table of the results (with the pgbench ceiling where measured)."""
    lines = [
        "| workload | limit | concurrency | rate (items/s) | p50 ms | p99 ms | double claims "
        "| pgbench ceiling /s | fraction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ceiling = f"{r.ceiling:,.0f}" if r.ceiling else "-"
        fraction = f"{r.fraction:.0%}" if r.fraction is not None else "-"
        doubles = str(r.double_claims) if r.workload.startswith("claim") else "-"
        lines.append(
            f"| {r.workload} | {r.limit} | {r.concurrency} | {r.rate:,.0f} "
            f"| {r.percentile(50):.2f} | {r.percentile(99):.2f} | {doubles} "
            f"| {ceiling} | {fraction} |"
        )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rdq_compliance.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("url", nargs="?", help="storage URL, e.g. postgresql://user:pw@host/db")
    parser.add_argument(
        "--throwaway-postgres",
        action="store_true",
        help="benchmark a throwaway local PostgreSQL cluster (durable settings) instead of URL",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run")
    parser.add_argument("--claimants", type=_ints, default=[1, 4, 8, 16])
    parser.add_argument("--limits", type=_ints, default=[1, 10])
    parser.add_argument("--cycles", type=_ints, default=[1, 4, 16], help="claim+complete")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--no-pgbench", action="store_true", help="skip the pgbench ceiling")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds (ours, then pgbench); medians are shown"
    )
    args = parser.parse_args(argv)
    if args.throwaway_postgres:
        from rdq_compliance.servers.postgres import server_url

        with server_url() as url:
            args.url = url
            _run(args)
    elif args.url:
        _run(args)
    else:
        parser.error("give a storage URL or --throwaway-postgres")


def _one_round(args: argparse.Namespace) -> list[Result]:
    results = asyncio.run(
        run_benchmark(
            args.url,
            claimants=args.claimants,
            limits=args.limits,
            cycles=args.cycles,
            producers=args.producers,
            warmup=args.warmup,
            seconds=args.seconds,
        )
    )
    if _is_postgres(args.url) and not args.no_pgbench:
        from rdq_compliance.bench_pgbench import find_pgbench, pgbench_ceiling

        pgbench = find_pgbench()
        if pgbench is None:
            print("pgbench not found: no ceiling", file=sys.stderr)
        else:
            print("  pgbench ceiling ...", file=sys.stderr, flush=True)
            ceiling = pgbench_ceiling(
                args.url,
                claimants=args.claimants,
                limits=args.limits,
                producers=[args.producers],
                seconds=args.seconds,
                pgbench=pgbench,
            )
            _attach_ceiling(results, ceiling)
    for result in results:
        if result.ceiling:
            result.fraction = result.rate / result.ceiling
    return results


def _median_of(rounds: list[list[Result]]) -> list[Result]:
    """Per workload: the median rate, ceiling and fraction over the rounds; latencies pooled;
    double claims summed (any is a failure)."""
    merged = []
    for runs in zip(*rounds, strict=True):
        first = runs[0]
        out = Result(first.workload, first.limit, first.concurrency, seconds=first.seconds)
        out.items = round(statistics.median(r.items for r in runs))
        out.ops = round(statistics.median(r.ops for r in runs))
        out.latencies_ms = [ms for r in runs for ms in r.latencies_ms]
        out.double_claims = sum(r.double_claims for r in runs)
        out.empty_claims = sum(r.empty_claims for r in runs)
        out.client_cpu = statistics.median(r.client_cpu for r in runs)
        ceilings = [r.ceiling for r in runs if r.ceiling]
        fractions = [r.fraction for r in runs if r.fraction is not None]
        out.ceiling = statistics.median(ceilings) if ceilings else None
        out.fraction = statistics.median(fractions) if fractions else None
        merged.append(out)
    return merged


def _run(args: argparse.Namespace) -> None:
    started = datetime.now(UTC)
    print(
        f"rdq contention benchmark, {started:%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        file=sys.stderr,
    )
    rounds = []
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"round {n + 1} of {args.repeat}", file=sys.stderr, flush=True)
        rounds.append(_one_round(args))
        if args.repeat > 1:
            print(render_table(rounds[-1]), file=sys.stderr, flush=True)
    results = _median_of(rounds) if len(rounds) > 1 else rounds[0]
    print(render_table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "started": started.isoformat(),
                    "host": platform.node(),
                    "cpus": os.cpu_count(),
                    "results": [r.row() for r in results],
                    "rounds": [[r.row() for r in one] for one in rounds],
                },
                f,
                indent=2,
            )
    doubles = sum(r.double_claims for r in results)
    if doubles:
        print(f"DOUBLE CLAIMS: {doubles}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
