"""The benchmark's workloads, run by client *processes* like pgbench's threads (``-j``).

A single Python process spends much of its time in socket system calls once many clients
share it, so :func:`run_parts` splits the concurrent clients of a workload over a few
processes (by default as many as CPUs, never more than clients). Every process opens its own
store, reports ready, then all start at the same instant; each returns a :class:`Part` that
the parent merges. The workloads:

- ``enqueue``: producers admit tasks one per call (``limit=1``) or in batches
  (``enqueue_batch``, ``limit`` tasks a call), each process on a queue of its own;
- ``claim_due``: claimants share one resident pool of 256 due tasks. As in the pgbench
  ceiling, claimed tasks stay due: they are claimed with a 1 ms lease, so a claim of a task
  that was claimed before reclaims a lapsed lease (appending its LEASE_EXPIRED record). To
  bound the growth of those records the pool moves every ``period`` seconds to a fresh
  256-task queue, prepared beforehand. Leases are returned so the parent can check that no
  claim started before the previous lease on the same task ended (storage clock);
- ``cycles``: claim one task with a long lease, complete it, repeat; every process refills
  the shared 256-task queue with as many tasks as it completed, off the clock, and returns
  the ids it claimed (a task handed out twice is a double claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import resource
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Event as EventType
from typing import Any

from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome, Storage

__all__ = ["POOL", "Part", "Spec", "pool_queue", "run_parts", "task"]

POOL = 256
LONG_LEASE = timedelta(hours=1)
SHORT_LEASE = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Spec:
    """What one client process runs (picklable)."""

    kind: str
    url: str
    clients: int
    limit: int
    warmup: float
    seconds: float
    queue: str
    period: float = 0.1


@dataclass
class Part:
    """What one client process measured."""

    ops: int = 0
    items: int = 0
    empty: int = 0
    cpu: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    leases: list[tuple[str, int, int]] = field(default_factory=list)
    claimed_ids: list[str] = field(default_factory=list)
    error: str | None = None


def task(queue: str, n: int) -> Envelope:
    """A benchmark task: a small JSON payload, a fresh id."""
    return Envelope(
        id=f"{queue}-{n}-{secrets.token_hex(4)}",
        queue=queue,
        handler_ref="bench:noop",
        payload={"n": n, "body": "x" * 64},
    )


def pool_queue(base: str, epoch: int) -> str:
    return f"{base}-{epoch}"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


class _Clock:
    def __init__(self, begin: float, spec: Spec) -> None:
        self.begin = begin
        self.start = begin + spec.warmup
        self.end = self.start + spec.seconds

    def running(self) -> bool:
        return time.time() < self.end

    def counts(self, at: float) -> bool:
        return self.start <= at < self.end


async def _enqueue(storage: Storage, spec: Spec, clock: _Clock, part: Part) -> None:
    queue = f"{spec.queue}-{os.getpid()}-{secrets.token_hex(2)}"
    n = 0
    while clock.running():
        started = time.perf_counter()
        if spec.limit == 1:
            await storage.enqueue(task(queue, n))
        else:
            await storage.enqueue_batch([task(queue, n + i) for i in range(spec.limit)])
        elapsed = time.perf_counter() - started
        n += spec.limit
        if clock.counts(time.time()):
            part.ops += 1
            part.items += spec.limit
            part.latencies_ms.append(elapsed * 1000)


async def _claim_due(storage: Storage, spec: Spec, clock: _Clock, part: Part) -> None:
    while clock.running():
        epoch = max(0, int((time.time() - clock.begin) / spec.period))
        started = time.perf_counter()
        claimed = await storage.claim_due(pool_queue(spec.queue, epoch), spec.limit, SHORT_LEASE)
        elapsed = time.perf_counter() - started
        for claim in claimed:
            end = claim.task.lease_expires_at
            assert end is not None
            part.leases.append((claim.task.id, _micros(end - SHORT_LEASE), _micros(end)))
        if not claimed:
            part.empty += 1
            await asyncio.sleep(0.001)
        if clock.counts(time.time()):
            part.ops += 1
            part.items += len(claimed)
            part.latencies_ms.append(elapsed * 1000)


class _Refill:
    """Enqueues as many tasks as were completed, off the claimants' clock (4 at once)."""

    def __init__(self, storage: Storage, queue: str) -> None:
        self.storage = storage
        self.queue = queue
        self.owed = 0
        self.wanted = asyncio.Event()
        self.done = asyncio.Event()
        self.n = 0

    def add(self, count: int) -> None:
        self.owed += count
        self.wanted.set()

    async def _fill(self, count: int) -> None:
        first, self.n = self.n, self.n + count
        await self.storage.enqueue_batch([task(self.queue, first + i) for i in range(count)])
        self.done.set()

    async def run(self, clock: _Clock) -> None:
        running: set[asyncio.Task[None]] = set()
        while clock.running():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wanted.wait(), 0.05)
            if not self.owed:
                continue
            self.wanted.clear()
            if len(running) >= 4:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            owed, self.owed = min(self.owed, 500), max(0, self.owed - 500)
            job = asyncio.create_task(self._fill(owed))
            running.add(job)
            job.add_done_callback(running.discard)
        await asyncio.gather(*running)


async def _cycles(storage: Storage, spec: Spec, clock: _Clock, part: Part, refill: _Refill) -> None:
    attempt = Attempt(number=1, outcome=Outcome.SUCCEEDED, finished_at=datetime.now(UTC))
    while clock.running():
        started = time.perf_counter()
        claimed = await storage.claim_due(spec.queue, 1, LONG_LEASE)
        for claim in claimed:
            await storage.complete(claim.task.id, claim.token, attempt)
        elapsed = time.perf_counter() - started
        part.claimed_ids.extend(claim.task.id for claim in claimed)
        refill.add(len(claimed))
        if not claimed:
            part.empty += 1
            refill.done.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(refill.done.wait(), 0.05)
        if clock.counts(time.time()):
            part.ops += 1
            part.items += len(claimed)
            part.latencies_ms.append(elapsed * 1000)


async def _part(spec: Spec, ready: Any, go: EventType, begin: Any) -> Part:
    part = Part()
    async with open_storage(spec.url) as storage:
        await storage.claim_due("bench-warm", 1, LONG_LEASE)  # connection and statements
        ready.put(os.getpid())
        await asyncio.to_thread(go.wait, 300)
        clock = _Clock(begin.value, spec)
        await asyncio.sleep(max(0.0, clock.begin - time.time()))
        jobs: list[Any] = []
        if spec.kind == "enqueue":
            jobs = [_enqueue(storage, spec, clock, part) for _ in range(spec.clients)]
        elif spec.kind == "claim_due":
            jobs = [_claim_due(storage, spec, clock, part) for _ in range(spec.clients)]
        else:
            refill = _Refill(storage, spec.queue)
            jobs = [_cycles(storage, spec, clock, part, refill) for _ in range(spec.clients)]
            jobs.append(refill.run(clock))
        gathered = asyncio.gather(*jobs)
        await asyncio.sleep(max(0.0, clock.start - time.time()))
        cpu = _cpu()
        await asyncio.sleep(max(0.0, clock.end - time.time()))
        part.cpu = _cpu() - cpu
        await gathered
    return part


def _child(spec: Spec, ready: Any, go: EventType, begin: Any, results: Any) -> None:
    try:
        part = asyncio.run(_part(spec, ready, go, begin))
    except BaseException as exc:
        ready.put(-1)
        part = Part(error=f"{type(exc).__name__}: {exc}")
    results.put(part)


def run_parts(spec: Spec, processes: int, start_in: float = 0.5) -> list[Part]:
    """Run ``spec.clients`` clients split over ``processes`` processes; return their parts.

    Raises ``RuntimeError`` if a process failed."""
    processes = max(1, min(processes, spec.clients))
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    begin = ctx.Value("d", 0.0)
    shares = [spec.clients // processes + (i < spec.clients % processes) for i in range(processes)]
    children = [
        ctx.Process(
            target=_child,
            args=(
                Spec(**{**spec.__dict__, "clients": share}),
                ready,
                go,
                begin,
                results,
            ),
            daemon=True,
        )
        for share in shares
    ]
    for child in children:
        child.start()
    try:
        waiting = len(children)
        deadline = time.monotonic() + 180
        while waiting:
            try:
                if ready.get(timeout=1) == -1:
                    break
                waiting -= 1
            except queue.Empty:
                dead = [c for c in children if c.exitcode is not None]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError("a benchmark client process did not start") from None
        begin.value = time.time() + start_in
        go.set()
        parts = [results.get(timeout=spec.warmup + spec.seconds + 180) for _ in children]
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    errors = [p.error for p in parts if p.error]
    if errors:
        raise RuntimeError(f"a benchmark client process failed: {errors[0]}")
    return parts
