"""End-to-end benchmark: rdq beside PgQueuer and procrastinate on one durable PostgreSQL (and
beside graphile-worker and BullMQ, with ``--systems``).

    python -m bench.e2e                                  # the full run (see BENCHMARKS.md)
    python -m bench.e2e --tasks 2000 --repeat 1          # a quick smoke run (< 1 minute)

For each repetition, each system in turn (back to back, same cluster, same payload):
enqueue ``--tasks`` tasks one at a time, drain them with the first ``--processes`` count of
worker processes; enqueue them again in batches of ``--batch``, drain them with the second
count; then measure the idle-queue submit → handler-start latency with notify (and, for the
``--poll-systems``, with polling). Every phase verifies each task completed exactly once.
A drain on the PostgreSQL cluster also gives its WAL bytes and commits per task
(``pg_counters``; ``--no-pg-counters`` leaves them out) and the rows the system leaves.
Progress goes to stderr; JSON lines (one per measurement, then one summary per system and
metric) and the table of medians go to stdout, then the server's durability settings and the
rows left after each drain of the last repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO, Any, TextIO

from bench.e2e import cluster, pg_counters
from bench.e2e._node import installed_versions
from bench.e2e._redis_server import FSYNC_POLICIES, SETTINGS
from bench.e2e.harness import (
    PROFILING,
    PgWindow,
    measure_drain,
    measure_enqueue,
    measure_latency,
)
from bench.e2e.report import Results, durability_line, emit, percentile, rows_lines
from bench.e2e.systems import (
    DEFAULT_SYSTEMS,
    SYSTEMS,
    BenchSystem,
    SystemUnavailable,
    load,
    unavailable,
)

_DISTRIBUTIONS = [
    "rdq-core",
    "rdq-postgres",
    "rdq-sqlite",
    "pgqueuer",
    "procrastinate",
    "asyncpg",
    "psycopg",
]


def _csv(kind: type, choices: Any = None) -> Any:
    def parse(text: str) -> list[Any]:
        values = [kind(v.strip()) for v in text.split(",") if v.strip()]
        if choices is not None:
            unknown = [v for v in values if v not in choices]
            if unknown:
                raise argparse.ArgumentTypeError(f"unknown: {', '.join(map(str, unknown))}")
        return values

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e",
        description="rdq beside PgQueuer, procrastinate, graphile-worker and BullMQ, end to "
        "end, on a durable PostgreSQL (and a durable Redis for the Redis systems).",
    )
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per enqueue/drain")
    parser.add_argument(
        "--tasks-for",
        action="append",
        default=[],
        metavar="SYSTEM=N",
        help="a different task count for one system (its rates stay comparable: each is "
        "tasks/s); shown in the table",
    )
    parser.add_argument("--batch", type=int, default=1_000, help="tasks per batch enqueue call")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument(
        "--systems",
        type=_csv(str, SYSTEMS),
        default=list(DEFAULT_SYSTEMS),
        help="comma-separated, from: " + ", ".join(SYSTEMS),
    )
    parser.add_argument(
        "--processes",
        type=_csv(int),
        default=[1, 8],
        help="worker process counts for the drains (default 1,8)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=10,
        help="in-flight tasks per worker process (rdq queue concurrency, procrastinate "
        "concurrency, graphile-worker concurrentJobs, BullMQ Worker concurrency; PgQueuer "
        "keeps its default batch_size=10)",
    )
    parser.add_argument(
        "--latency-tasks",
        type=int,
        default=None,
        help="tasks for the notify latency (default: tasks/20, between 20 and 1000)",
    )
    parser.add_argument(
        "--poll-latency-tasks",
        type=int,
        default=None,
        help="tasks for the polling latency (default: latency tasks / 20, at least 10)",
    )
    parser.add_argument(
        "--poll-systems",
        type=_csv(str, SYSTEMS),
        default=["rdq"],
        help="systems whose polling (no-notify) latency is measured (default rdq; "
        "PgQueuer, graphile-worker and BullMQ cannot turn their wake-ups off)",
    )
    parser.add_argument(
        "--latency-gap",
        type=float,
        default=0.025,
        help="seconds between a task's completion and the next submit (notify)",
    )
    parser.add_argument(
        "--poll-latency-gap",
        type=float,
        default=0.25,
        help="seconds between a task's completion and the next submit (polling)",
    )
    parser.add_argument(
        "--phases",
        type=_csv(str, ["throughput", "latency", "memory"]),
        default=["throughput", "latency"],
        help="throughput (enqueue + drain), latency, memory (a 1-process drain of "
        "--memory-tasks tasks: its peak RSS)",
    )
    parser.add_argument(
        "--memory-tasks",
        type=int,
        default=1_000_000,
        help="tasks queued for the memory phase (default 1,000,000)",
    )
    parser.add_argument(
        "--url", default=None, help="an existing server (admin URL) instead of a throwaway one"
    )
    parser.add_argument(
        "--pg-stat-statements",
        action="store_true",
        help="load pg_stat_statements in the throwaway cluster and print the top statements",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run worker processes under py-spy; collapsed stacks go to this directory",
    )
    parser.add_argument(
        "--redis-fsync",
        choices=FSYNC_POLICIES,
        default="always",
        help="appendfsync of the redis-servers of rdq_redis and bullmq: always (an fsync "
        "before every reply, the default) or everysec (an fsync a second)",
    )
    parser.add_argument(
        "--stats-wait",
        type=float,
        default=pg_counters.STATS_FLUSH_SECONDS,
        help="seconds the system's connections stay idle before each reading of a drain's "
        "commit count, so PostgreSQL has counted their transactions (default 11: its "
        "PGSTAT_IDLE_INTERVAL of 10 s and a margin; 0 makes the count approximate)",
    )
    parser.add_argument(
        "--no-pg-counters",
        dest="pg_counters",
        action="store_false",
        help="leave out the WAL and commits per task of the PostgreSQL drains (and the "
        "--stats-wait before and after each)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON lines here")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.tasks_for:
        system, _, count = item.partition("=")
        if system not in SYSTEMS or not count.isdigit():
            parser.error(f"--tasks-for wants SYSTEM=N with SYSTEM in {', '.join(SYSTEMS)}")
        overrides[system] = int(count)
    args.tasks_for = overrides
    for name in args.poll_systems:
        if not load(name)[1].polls:
            parser.error(f"--poll-systems: {name} cannot turn its wake-ups off")
    if args.latency_tasks is None:
        args.latency_tasks = max(20, min(1000, args.tasks // 20))
    if args.poll_latency_tasks is None:
        args.poll_latency_tasks = max(10, args.latency_tasks // 20)
    return args


def _say(message: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def _versions() -> dict[str, str]:
    found = {}
    for name in _DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found | installed_versions()


def _micros(seconds: float | None, tasks: int) -> str:
    return "?" if seconds is None else f"{seconds / tasks * 1e6:.0f} µs"


async def _one_system(
    args: argparse.Namespace,
    system: BenchSystem,
    url: str,
    results: Results,
    rep: int,
    log: IO[bytes],
    out: list[TextIO | None],
    server_cpu: Callable[[], float | None],
    admin_url: str,
    rows: dict[str, dict[str, dict[str, int]]],
) -> None:
    name = system.name
    tag = f"[{rep}/{args.repeat}] {name}"
    tasks = args.tasks_for.get(name, args.tasks)

    on_postgres = url.startswith(("postgresql:", "postgres:"))
    server_label = "PostgreSQL"
    if not on_postgres:
        # a redis-server of the system's own, or none: the store runs inside the workers
        server_cpu = system.server_cpu
        server_label = "redis-server"

    async def settle() -> None:
        await cluster.quiesce(admin_url, url if on_postgres else None)
        await system.settle()

    def record(key: str, value: float) -> None:
        emit(results.add(name, key, value), *out)

    if "throughput" in args.phases:
        plan: list[tuple[int | None, int | None]] = [(None, args.processes[0])]
        plan += [(args.batch, p) for p in args.processes[1:]]
        if len(args.processes) == 1:
            plan.append((args.batch, None))
        for n, (batch, processes) in enumerate(plan):
            await settle()
            rate = await measure_enqueue(system, tasks, batch)
            if n < 2:
                key = "enqueue_single" if batch is None else "enqueue_batch"
                record(key, rate)
                how = "one at a time" if batch is None else f"in batches of {batch}"
                _say(f"{tag}: enqueued {tasks} {how}: {rate:,.0f}/s")
            if processes is None:
                continue
            await settle()
            window = None
            if on_postgres and args.pg_counters:
                window = PgWindow(admin_url, f"bench_{name}", args.stats_wait)
            drain = await measure_drain(
                system,
                url,
                tasks,
                processes=processes,
                concurrency=args.concurrency,
                log=log,
                server_cpu=server_cpu,
                pg=window,
            )
            record(f"drain_{processes}", drain.rate)
            if drain.worker_cpu is not None:
                record(f"cpu_worker_{processes}", drain.worker_cpu / tasks * 1e6)
            if drain.database_cpu is not None:
                record(f"cpu_db_{processes}", drain.database_cpu / tasks * 1e6)
            if processes == 1 and drain.rss_kib:
                record("worker_rss", max(drain.rss_kib) / 1024)
            costs = ""
            if drain.cost is not None:
                record(f"wal_per_task_{processes}", drain.cost.wal_per_task)
                record(f"commits_per_task_{processes}", drain.cost.commits_per_task)
                costs = (
                    f"; per task: WAL {drain.cost.wal_per_task:,.0f} B, "
                    f"{drain.cost.commits_per_task:.3f} commits"
                    + (" (with the harness's reads)" if drain.commits_include_harness else "")
                )
                emit(
                    {
                        "kind": "drain_cost",
                        "system": name,
                        "repetition": rep,
                        "processes": processes,
                        "tasks": tasks,
                        "wal_bytes": drain.cost.wal_bytes,
                        "commits": drain.cost.commits,
                        "harness_reads": (
                            None if drain.commits_include_harness else drain.cost.harness_reads
                        ),
                    },
                    *out,
                )
            _say(
                f"{tag}: drained {tasks} with {processes} process(es) in "
                f"{drain.seconds:.2f} s: {drain.rate:,.0f}/s, verified "
                f"(peak RSS {max(drain.rss_kib or [0]) / 1024:.0f} MiB; CPU per task: "
                f"workers {_micros(drain.worker_cpu, tasks)}, "
                f"{server_label} {_micros(drain.database_cpu, tasks)}{costs})"
            )
            if on_postgres:
                left = await pg_counters.rows_left(url)
                rows.setdefault(name, {})[f"drain_{processes}"] = left
                emit(
                    {
                        "kind": "rows_left",
                        "system": name,
                        "repetition": rep,
                        "after": f"drain_{processes}",
                        "rows": left,
                    },
                    *out,
                )
    if "memory" in args.phases:
        await settle()
        rate = await measure_enqueue(system, args.memory_tasks, args.batch)
        _say(f"{tag}: enqueued {args.memory_tasks} in batches of {args.batch}: {rate:,.0f}/s")
        drain = await measure_drain(
            system,
            url,
            args.memory_tasks,
            processes=1,
            concurrency=args.concurrency,
            log=log,
            server_cpu=server_cpu,
        )
        rss = max(drain.rss_kib or [0]) / 1024
        record("memory_rss", rss)
        record("memory_drain", drain.rate)
        _say(
            f"{tag}: drained {args.memory_tasks} with 1 process in {drain.seconds:.1f} s: "
            f"{drain.rate:,.0f}/s, verified; peak RSS {rss:.0f} MiB"
        )
    if "latency" in args.phases:
        modes = [(True, args.latency_tasks, args.latency_gap)]
        if name in args.poll_systems:
            modes.append((False, args.poll_latency_tasks, args.poll_latency_gap))
        for notify, count, gap in modes:
            await settle()
            latency = await measure_latency(
                system, url, count, notify=notify, concurrency=args.concurrency, gap=gap, log=log
            )
            mode = "notify" if notify else "poll"
            p50, p99 = percentile(latency.millis, 50), percentile(latency.millis, 99)
            record(f"latency_{mode}_p50", p50)
            record(f"latency_{mode}_p99", p99)
            _say(
                f"{tag}: {count} idle submits ({mode}): p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                f"max {max(latency.millis):.2f} ms, verified"
            )


async def _top_statements(url: str, out: list[TextIO | None]) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = await conn.fetch(
            """
            SELECT d.datname, s.calls, round(s.total_exec_time::numeric, 1) AS total_ms,
                   round(s.mean_exec_time::numeric, 3) AS mean_ms, s.rows,
                   s.plans, round(s.total_plan_time::numeric, 1) AS plan_ms,
                   s.shared_blks_hit, s.shared_blks_read, s.wal_records, s.wal_bytes,
                   left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160) AS query
            FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname LIKE 'bench_%'
            ORDER BY s.total_exec_time DESC LIMIT 40
            """
        )
    finally:
        await conn.close()
    for row in rows:
        emit({"kind": "statement", **dict(row)}, *out)


async def _open_systems(
    names: list[str], urls: dict[str, str], skipped: dict[str, str]
) -> dict[str, tuple[BenchSystem, str]]:
    """Open each system on its store (refusing one with UNLOGGED tables). A system that finds
    its store without what it needs (``SystemUnavailable``) is left out with the reason in
    ``skipped``. If one fails, the ones opened so far and what the failing one started (a
    server of its own) are closed."""
    systems: dict[str, tuple[BenchSystem, str]] = {}
    try:
        for name in names:
            system_class, _ = load(name)
            system = system_class()
            try:
                url = system.store_url(urls[f"bench_{name}"])
                await system.open(url)
                unlogged = await system.unlogged_tables()
                if unlogged:
                    raise RuntimeError(f"{name} uses UNLOGGED tables: {unlogged}")
            except SystemUnavailable as exc:
                with contextlib.suppress(Exception):
                    await system.close()
                skipped[name] = str(exc)
                _say(f"{name}: unavailable, skipped: {exc}")
                continue
            except BaseException:
                with contextlib.suppress(Exception):
                    await system.close()
                raise
            systems[name] = (system, url)
    except BaseException:
        for system, _ in systems.values():
            await system.close()
        raise
    return systems


async def run(args: argparse.Namespace) -> int:
    """Run the benchmark described by ``args``; return the exit status."""
    out: list[TextIO | None] = [sys.stdout]
    json_file = args.json.open("w") if args.json else None
    out.append(json_file)
    skipped = {name: why for name in args.systems if (why := unavailable(name)) is not None}
    for name, why in skipped.items():
        _say(f"{name}: unavailable, skipped: {why}")
    args.systems = [name for name in args.systems if name not in skipped]
    if not args.systems:
        print("no system to run", file=sys.stderr)
        return 1
    results = Results(args.systems)
    rows: dict[str, dict[str, dict[str, int]]] = {}
    SETTINGS.appendfsync = args.redis_fsync
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILING.directory = args.profile
    load_before = os.getloadavg()
    log_dir = Path(tempfile.mkdtemp(prefix="rdq-bench-e2e-"))
    _say(f"worker logs in {log_dir}")
    started = time.monotonic()
    try:
        with cluster.server(args.url, stat_statements=args.pg_stat_statements) as server:
            urls = await cluster.prepare(server, [f"bench_{s}" for s in args.systems])
            systems = await _open_systems(args.systems, urls, skipped)
            args.systems = [name for name in args.systems if name in systems]
            results.systems = list(args.systems)
            emit(
                {
                    "kind": "run",
                    "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "tasks": args.tasks,
                    "tasks_for": args.tasks_for,
                    "batch": args.batch,
                    "repeat": args.repeat,
                    "processes": args.processes,
                    "concurrency": args.concurrency,
                    "latency_tasks": args.latency_tasks,
                    "poll_latency_tasks": args.poll_latency_tasks,
                    "systems": args.systems,
                    "skipped": skipped,
                    "server": server.settings,
                    "pg_counters": args.pg_counters,
                    "stats_wait": args.stats_wait,
                    "redis_appendfsync": args.redis_fsync,
                    "throwaway_cluster": server.throwaway,
                    "versions": _versions(),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_before": [round(x, 2) for x in load_before],
                },
                *out,
            )
            try:
                with (log_dir / "workers.log").open("ab") as log:
                    for rep in range(1, args.repeat + 1):
                        for name in args.systems:
                            system, url = systems[name]
                            await _one_system(
                                args,
                                system,
                                url,
                                results,
                                rep,
                                log,
                                out,
                                server.cpu_seconds,
                                server.url,
                                rows,
                            )
            finally:
                for system, _ in systems.values():
                    await system.close()
            if args.pg_stat_statements and server.throwaway:
                await _top_statements(server.url, out)
        for record in results.summary():
            emit(record, *out)
        load_after = os.getloadavg()
        emit(
            {
                "kind": "end",
                "seconds": round(time.monotonic() - started, 1),
                "load_after": [round(x, 2) for x in load_after],
            },
            *out,
        )
        print()
        print(results.table())
        for name, count in args.tasks_for.items():
            print(f"{name}: {count} tasks per enqueue/drain phase (others: {args.tasks})")
        print()
        print(durability_line(server.settings))
        for line in rows_lines(rows):
            print(line)
        for name, why in skipped.items():
            print(f"{name}: unavailable, skipped: {why}")
        print(
            f"\nload average before {load_before[0]:.2f} {load_before[1]:.2f} "
            f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
            f"{load_after[2]:.2f} ({os.cpu_count()} CPUs); "
            f"{time.monotonic() - started:.0f} s"
        )
    finally:
        if json_file is not None:
            json_file.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.e2e``."""
    sys.exit(asyncio.run(run(parse_args(argv))))


if __name__ == "__main__":
    main()
