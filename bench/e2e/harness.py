"""The measurements: enqueue rates, drain rates through real worker processes, and the
idle-queue submit → handler-start latency. Each phase verifies every task it ran."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bench.e2e import pg_counters
from bench.e2e.systems import BenchSystem, VerificationError, load, payload

__all__ = [
    "PROFILING",
    "DrainResult",
    "LatencyResult",
    "PgWindow",
    "WorkerProcess",
    "measure_drain",
    "measure_enqueue",
    "measure_latency",
]

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 120.0
STALL_TIMEOUT = 120.0
"""A drain fails when no task completes for this long."""


@dataclass
class Profiling:
    """When ``directory`` is set, worker processes run under ``py-spy record`` and leave
    their collapsed stacks (``--format raw``) there, one file per process."""

    directory: Path | None = None
    rate: int = 250
    started: int = 0


PROFILING = Profiling()


class WorkerProcess:
    """One ``bench.e2e._worker`` process and its line protocol (see that module)."""

    def __init__(self, process: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.process = process
        self.log = log
        self.rss_kib: int | None = None
        self.cpu_seconds: float | None = None

    @classmethod
    async def start(
        cls,
        system: str,
        url: str,
        *,
        notify: bool,
        concurrency: int,
        report_starts: bool,
        log: IO[bytes],
    ) -> WorkerProcess:
        """Start the process (it connects and sets up, then waits for ``go``)."""
        _, worker_class = load(system)
        command = worker_class.command(
            system, url, notify=notify, concurrency=concurrency, report_starts=report_starts
        )
        # the caller's PYTHONPATH after the repository's: a worktree's packages stay first
        paths = [str(REPO), sys.path[0], *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        if PROFILING.directory is not None and worker_class.python:
            PROFILING.started += 1
            output = PROFILING.directory / f"{system}-{PROFILING.started:03d}.txt"
            spy = str(Path(sys.executable).with_name("py-spy"))
            command = [
                spy,
                "record",
                "--format",
                "raw",
                "--rate",
                str(PROFILING.rate),
                "--output",
                str(output),
                "--",
                *command,
            ]
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            cwd=REPO,
            env=env,
        )
        return cls(process, log)

    async def _line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not raw:
            code = await self.process.wait()
            raise RuntimeError(f"worker process exited ({code}); see {self.log.name}")
        return raw.decode().strip()

    async def ready(self) -> None:
        """Wait until the worker is set up."""
        line = await self._line(READY_TIMEOUT)
        while not line or line.startswith("py-spy"):  # the profiler's own banner
            line = await self._line(READY_TIMEOUT)
        if line != "READY":
            raise RuntimeError(f"worker said {line!r} instead of READY; see {self.log.name}")

    def send(self, command: str) -> None:
        """Send ``GO`` or ``STOP``."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command}\n".encode())

    async def next_start(self, timeout: float) -> tuple[int, int]:
        """The next handler start: (task number, monotonic ns)."""
        while True:
            line = await self._line(timeout)
            kind, *rest = line.split()
            if kind == "S":
                return int(rest[0]), int(rest[1])

    async def stop(self, timeout: float = 60.0) -> None:
        """Stop gracefully and read the peak RSS; kill the process if it does not stop."""
        try:
            if self.process.returncode is None:
                self.send("STOP")
                deadline = time.monotonic() + timeout
                while True:
                    line = await self._line(max(0.1, deadline - time.monotonic()))
                    if line.startswith("DONE"):
                        _, rss, cpu = line.split()
                        self.rss_kib, self.cpu_seconds = int(rss), float(cpu)
                        break
            await asyncio.wait_for(self.process.wait(), timeout)
        except (TimeoutError, RuntimeError):
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


@dataclass
class DrainResult:
    """A drain: tasks, seconds from worker start to the last completion, and the peak RSS
    of each worker process."""

    tasks: int
    seconds: float
    rss_kib: list[int] = field(default_factory=list)
    clock: str = "database"
    worker_cpu: float | None = None
    """CPU seconds of the worker processes from GO to their exit (all processes)."""
    database_cpu: float | None = None
    """CPU seconds of the PostgreSQL server's processes during the drain (local server)."""
    cost: pg_counters.DrainCost | None = None
    """WAL bytes and commits of the drain (a system on PostgreSQL, with a ``PgWindow``)."""
    commits_include_harness: bool = False
    """Whether ``cost.commits`` still holds the harness's own reads (their count unknown)."""

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds


@dataclass
class PgWindow:
    """Where a drain on PostgreSQL reads its WAL and commit counters (``pg_counters``): the
    admin URL and the system's database; how long its connections stay idle before each
    reading of the commits."""

    admin_url: str
    database: str
    stats_wait: float = pg_counters.STATS_FLUSH_SECONDS


@dataclass
class LatencyResult:
    """Submit → handler-start latencies in milliseconds, in submission order."""

    millis: list[float]


async def measure_enqueue(system: BenchSystem, tasks: int, batch: int | None) -> float:
    """Empty the system, then submit ``tasks`` tasks from one client, one at a time
    (``batch=None``) or ``batch`` per call; return tasks per second. A system with a producer
    process of its own submits and times them there (``BenchSystem.enqueue_timed``)."""
    await system.reset()
    bodies = [payload(i) for i in range(tasks)]
    seconds = await system.enqueue_timed(bodies, batch)
    if seconds is not None:
        return tasks / seconds
    started = time.perf_counter()
    if batch is None:
        for body in bodies:
            await system.enqueue_one(body)
    else:
        for start in range(0, tasks, batch):
            await system.enqueue_many(bodies[start : start + batch])
    return tasks / (time.perf_counter() - started)


async def _wait_for_count(
    count: Callable[[], Awaitable[int]], target: int, *, what: str, every: float | None = None
) -> None:
    """Poll ``count()`` until it reaches ``target``: every ``every`` seconds, or by default
    more often as the end nears (so the polling itself costs the database little). Fails
    after STALL_TIMEOUT without progress."""
    started = time.monotonic()
    last_value, last_progress = -1, started
    while True:
        value = await count()
        now = time.monotonic()
        if value >= target:
            return
        if value != last_value:
            last_value, last_progress = value, now
        elif now - last_progress > STALL_TIMEOUT:
            raise VerificationError(f"{what}: stuck at {value} of {target} completions")
        if every is not None:
            await asyncio.sleep(every)
            continue
        rate = value / (now - started) if value else 0.0
        remaining = (target - value) / rate if rate else 0.1
        ceiling = max(0.25, (now - started) / 10)  # long drains: count(*) gets costlier
        await asyncio.sleep(min(ceiling, max(0.005, remaining / 3)))


async def measure_drain(
    system: BenchSystem,
    url: str,
    tasks: int,
    *,
    processes: int,
    concurrency: int,
    log: IO[bytes],
    server_cpu: Callable[[], float | None] = lambda: None,
    pg: PgWindow | None = None,
) -> DrainResult:
    """Drain the ``tasks`` queued tasks with ``processes`` worker processes.

    The clock starts when every process is set up and is told to go, and stops at the last
    completion. Both ends are read on the database clock when the system records completion
    times (``clock_timestamp()`` just before ``GO``; the latest completion time after), so the
    harness's polling granularity does not enter the figure; else on the harness clock.
    Every task is then verified.

    With ``pg``, also the drain's WAL bytes (from just before ``GO`` to the last completion
    seen) and commits (from just before ``GO`` to the workers' exit, less the harness's own
    reads); see ``pg_counters`` for why each reading waits for the statistics to be in."""
    statements = system.harness_statements
    reads = 0
    last_read = time.monotonic()

    def count(op: str) -> None:
        nonlocal reads, last_read
        reads += 0 if statements is None else statements[op]
        last_read = time.monotonic()

    async def completed() -> int:
        value = await system.completed()
        count("completed")
        return value

    before = wal_end = None
    workers = [
        await WorkerProcess.start(
            system.name,
            url,
            notify=True,
            concurrency=concurrency,
            report_starts=False,
            log=log,
        )
        for _ in range(processes)
    ]
    try:
        await asyncio.gather(*(w.ready() for w in workers))
        if pg is not None:
            # the enqueue's connections and the workers' setup (all idle now) report their
            # commits before the first reading
            await pg_counters.wait_for_stats(time.monotonic(), pg.stats_wait)
            before = await pg_counters.read_counters(pg.admin_url, pg.database)
        db_start = await system.db_now()
        count("db_now")
        cpu_start = server_cpu()
        started = time.perf_counter()
        for worker in workers:
            worker.send("GO")
        await _wait_for_count(completed, tasks, what=f"{system.name} drain")
        seen = time.perf_counter() - started
        cpu_end = server_cpu()
        if pg is not None:
            wal_end = await pg_counters.read_counters(pg.admin_url, pg.database, before)
        last = await system.last_completion()
        count("last_completion")
    finally:
        await asyncio.gather(*(w.stop() for w in workers))
    drain_cost = None
    if pg is not None and before is not None and wal_end is not None:
        # the workers' backends reported as they exited; the harness's once idle long enough
        await pg_counters.wait_for_stats(last_read, pg.stats_wait)
        commits_end = await pg_counters.read_counters(pg.admin_url, pg.database)
        drain_cost = pg_counters.cost(before, wal_end, commits_end, tasks, reads)
    await system.verify(tasks)
    rss = [w.rss_kib for w in workers if w.rss_kib is not None]
    cpu = [w.cpu_seconds for w in workers if w.cpu_seconds is not None]
    result = DrainResult(tasks, seen, rss, clock="harness")
    if db_start is not None and last is not None:
        result.seconds, result.clock = (last - db_start).total_seconds(), "database"
    if len(cpu) == len(workers):
        result.worker_cpu = sum(cpu)
    if cpu_start is not None and cpu_end is not None:
        result.database_cpu = cpu_end - cpu_start
    result.cost = drain_cost
    result.commits_include_harness = statements is None
    return result


async def measure_latency(
    system: BenchSystem,
    url: str,
    count: int,
    *,
    notify: bool,
    concurrency: int,
    gap: float,
    log: IO[bytes],
) -> LatencyResult:
    """On an idle queue with one worker process, submit ``count`` tasks one by one; for each,
    measure from ``submit`` returning to its handler starting. After each task the harness
    waits until it is completed, then ``gap`` seconds more, so the next one meets an idle
    queue and an idle worker. Every task is then verified."""
    await system.reset()
    worker = await WorkerProcess.start(
        system.name, url, notify=notify, concurrency=concurrency, report_starts=True, log=log
    )
    millis: list[float] = []
    try:
        await worker.ready()
        worker.send("GO")
        await asyncio.sleep(1.0)
        for i in range(count):
            returned = await system.enqueue_one(payload(i))
            submitted = time.monotonic_ns() if returned is None else returned
            number, started = await worker.next_start(timeout=STALL_TIMEOUT)
            if number != i:
                raise VerificationError(f"{system.name}: handler started task {number}, not {i}")
            millis.append((started - submitted) / 1e6)
            await _wait_for_count(
                system.completed, i + 1, what=f"{system.name} latency", every=0.002
            )
            await asyncio.sleep(gap)
    finally:
        await worker.stop()
    await system.verify(count)
    return LatencyResult(millis)
