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
import itertools
import json
import math
import os
import platform
import secrets
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq import open_storage
from rdq.spi import Envelope, Storage
from rdq_compliance.bench_workloads import POOL, Spec, pool_queue, run_parts, task

__all__ = ["Result", "main", "run_benchmark"]


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
    processes: int = 1
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


def _overlaps(leases: list[tuple[str, int, int]]) -> int:
    """Claims that began while another claimant's lease on the same task was still valid
    (``(task id, start, end)`` in microseconds of the storage clock)."""
    by_task: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task_id, start, end in leases:
        by_task[task_id].append((start, end))
    count = 0
    for intervals in by_task.values():
        intervals.sort()
        count += sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    return count


async def _prefill(storage: Storage, tasks: list[Envelope]) -> None:
    for start in range(0, len(tasks), 500):
        await storage.enqueue_batch(tasks[start : start + 500])


async def bench(
    storage: Storage,
    store_url: str,
    workload: str,
    clients: int,
    limit: int,
    *,
    warmup: float,
    seconds: float,
    processes: int,
) -> Result:
    """Run one workload (``enqueue``, ``claim_due`` or ``cycles``; see
    :mod:`rdq_compliance.bench_workloads`) with ``clients`` concurrent clients."""
    queue = f"bench-{workload.replace('_', '')}-{secrets.token_hex(3)}"
    spec = Spec(workload, store_url, clients, limit, warmup, seconds, queue)
    if workload == "claim_due":
        epochs = math.ceil((warmup + seconds + 2) / spec.period) + 1
        await _prefill(
            storage,
            [task(pool_queue(queue, e), n) for e in range(epochs) for n in range(POOL)],
        )
    elif workload == "cycles":
        await _prefill(storage, [task(queue, n) for n in range(POOL)])
    parts = await asyncio.to_thread(run_parts, spec, processes)
    name = {"cycles": "claim+complete"}.get(workload, workload)
    if workload == "enqueue" and limit > 1:
        name = "enqueue_batch"
    result = Result(name, limit, clients, seconds=seconds, processes=min(processes, clients))
    for part in parts:
        result.ops += part.ops
        result.items += part.items
        result.empty_claims += part.empty
        result.latencies_ms.extend(part.latencies_ms)
        result.client_cpu += part.cpu / seconds
    if workload == "claim_due":
        result.double_claims = _overlaps([lease for part in parts for lease in part.leases])
    elif workload == "cycles":
        ids = [task_id for part in parts for task_id in part.claimed_ids]
        result.double_claims = len(ids) - len(set(ids))
    return result


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
    processes: int | None = None,
    ceiling: Callable[[Result], float | None] | None = None,
) -> list[Result]:
    """Run every SPI workload against the store at ``url``; return the results. Clients are
    spread over ``processes`` client processes (default: the number of CPUs). ``ceiling``, if
    given, measures the same shape without rdq right after each workload (so both see the same
    machine load) and the result keeps it with the fraction."""
    processes = processes or os.cpu_count() or 1
    results: list[Result] = []
    pool_max = max([*claimants, *cycles, producers]) + 2
    store_url = url
    schema = None
    if _is_postgres(url):
        schema = f"rdq_bench_{secrets.token_hex(3)}"
        store_url = _with_query(url, schema=schema, pool_min="1", pool_max=str(pool_max))
    async with open_storage(store_url) as storage:
        await storage.migrate()
        try:
            plan = [("enqueue", producers, 1)]
            if storage.capabilities().batch_enqueue:
                plan.append(("enqueue", producers, 100))
            plan += [("claim_due", count, limit) for limit in limits for count in claimants]
            plan += [("cycles", count, 1) for count in cycles]
            for workload, clients, limit in plan:
                result = await bench(
                    storage,
                    store_url,
                    workload,
                    clients,
                    limit,
                    warmup=warmup,
                    seconds=seconds,
                    processes=processes,
                )
                if ceiling is not None:
                    result.ceiling = await asyncio.to_thread(ceiling, result)
                    if result.ceiling:
                        result.fraction = result.rate / result.ceiling
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
        f"  client CPU {result.client_cpu:4.0%} in {result.processes} process(es)"
        + (f"  pgbench {result.ceiling:,.0f}/s" if result.ceiling else ""),
        file=sys.stderr,
        flush=True,
    )


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
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="client processes the clients are spread over (default: number of CPUs)",
    )
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


def _pgbench_ceiling(args: argparse.Namespace) -> Callable[[Result], float | None] | None:
    """The pgbench measurement matching a result's shape, for postgres URLs (else None)."""
    if not _is_postgres(args.url) or args.no_pgbench:
        return None
    from rdq_compliance.bench_pgbench import find_pgbench, pgbench_ceiling

    pgbench = find_pgbench()
    if pgbench is None:
        print("pgbench not found: no ceiling", file=sys.stderr)
        return None

    def measure(result: Result) -> float | None:
        if result.workload == "claim_due":
            shape = {"claimants": [result.concurrency], "limits": [result.limit], "producers": []}
            key = ("claim", result.limit, result.concurrency)
        elif result.workload == "enqueue":
            shape = {"claimants": [], "limits": [], "producers": [result.concurrency]}
            key = ("insert", 1, result.concurrency)
        else:
            return None
        rates = pgbench_ceiling(args.url, seconds=args.seconds, pgbench=pgbench, **shape)
        return rates.get(key)

    return measure


def _one_round(args: argparse.Namespace) -> list[Result]:
    return asyncio.run(
        run_benchmark(
            args.url,
            claimants=args.claimants,
            limits=args.limits,
            cycles=args.cycles,
            producers=args.producers,
            warmup=args.warmup,
            seconds=args.seconds,
            processes=args.processes,
            ceiling=_pgbench_ceiling(args),
        )
    )


def _median_of(rounds: list[list[Result]]) -> list[Result]:
    """Per workload: the median rate, ceiling and fraction over the rounds; latencies pooled;
    double claims summed (any is a failure)."""
    merged = []
    for runs in zip(*rounds, strict=True):
        first = runs[0]
        out = Result(
            first.workload,
            first.limit,
            first.concurrency,
            seconds=first.seconds,
            processes=first.processes,
        )
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
