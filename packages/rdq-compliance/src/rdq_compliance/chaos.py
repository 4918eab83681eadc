"""The kill -9 chaos test: real worker processes SIGKILLed mid-handler, again and again.

:func:`run_chaos` enqueues ``tasks`` tasks on a fresh queue, starts ``workers`` worker
processes (:mod:`rdq_compliance._chaos_worker`) that claim with a short lease straight through
the storage SPI, and SIGKILLs a worker that is inside its handler ``kills`` times at random
moments, starting a replacement each time, while the others keep working. When every task has
succeeded it stops the workers and checks, from the store and the workers' fsync'd logs:

- every task is SUCCEEDED, completed once (by the worker its SUCCEEDED record names);
- every reclaimed task carries its LEASE_EXPIRED records (one per lost lease: every attempt
  but the last is LEASE_EXPIRED, and no claim is missing from the count);
- no two workers ever held a valid lease on the same task at the same moment: sorted by claim
  time (storage clock), each claim starts no earlier than the previous lease's end.

Usage (the kit's ``StorageSuite`` does this against ``storage_url``)::

    report = await run_chaos("postgresql://...")
    report.assert_ok()
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rdq import open_storage
from rdq.spi import Envelope, Outcome, Status, Storage

__all__ = ["ChaosReport", "run_chaos"]


@dataclass
class ChaosReport:
    """What a chaos run did and every violation it found (empty ``problems`` = pass)."""

    queue: str
    tasks: int
    workers_started: int = 0
    kills: int = 0
    claims: int = 0
    reclaims: int = 0
    stale_completions: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` listing the violations, if any (and if no kill landed)."""
        problems = list(self.problems)
        if self.kills == 0:
            problems.append("no worker was killed: the run proved nothing")
        if problems:
            shown = "\n  ".join(problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise AssertionError(f"chaos run failed ({self.summary()}):\n  {shown}{more}")

    def summary(self) -> str:
        return (
            f"{self.tasks} tasks, {self.workers_started} workers started, {self.kills} kills, "
            f"{self.claims} claims, {self.reclaims} lease-expired reclaims, "
            f"{self.stale_completions} stale completions, {self.seconds:.1f}s"
        )


@dataclass
class _Claim:
    task_id: str
    token: str
    start: datetime
    end: datetime
    pid: str


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    log: Path


def _spawn(url: str, queue: str, log: Path, lease: float) -> _Worker:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rdq_compliance._chaos_worker",
            url,
            queue,
            str(log),
            "--lease",
            str(lease),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return _Worker(process, log)


def _lines(log: Path) -> list[list[str]]:
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    # A SIGKILL can cut the last line short: only complete lines count.
    return [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _in_handler(worker: _Worker) -> bool:
    lines = _lines(worker.log)
    return bool(lines) and lines[-1][0] == "claim"


async def _enqueue(storage: Storage, queue: str, count: int) -> None:
    tasks = [
        Envelope(id=f"{queue}-{n:05d}", queue=queue, handler_ref="chaos:task", payload={"n": n})
        for n in range(count)
    ]
    if storage.capabilities().batch_enqueue:
        for i in range(0, count, 500):
            await storage.enqueue_batch(tasks[i : i + 500])
    else:
        for task in tasks:
            await storage.enqueue(task)


async def _wait_all_succeeded(storage: Storage, queue: str, count: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if (await storage.stats(queue)).succeeded >= count:
            return True
        await asyncio.sleep(0.2)
    return False


def _stop(workers: list[_Worker]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


async def run_chaos(
    storage_url: str,
    *,
    workers: int = 4,
    tasks: int = 200,
    kills: int = 8,
    lease: float = 1.0,
    timeout: float = 55.0,
) -> ChaosReport:
    """Run the chaos test against the store at ``storage_url`` (reachable from other
    processes) and return the report; call :meth:`ChaosReport.assert_ok` on it."""
    started = time.monotonic()
    deadline = started + timeout
    queue = f"chaos-{secrets.token_hex(4)}"
    report = ChaosReport(queue=queue, tasks=tasks)
    rng = random.Random()
    with tempfile.TemporaryDirectory(prefix="rdq-chaos-") as tmp:
        logs = Path(tmp)
        running: list[_Worker] = []
        everyone: list[_Worker] = []

        def spawn() -> None:
            worker = _spawn(storage_url, queue, logs / f"w{len(everyone):03d}.log", lease)
            running.append(worker)
            everyone.append(worker)

        async with open_storage(storage_url) as storage:
            await storage.migrate()
            await _enqueue(storage, queue, tasks)
            try:
                for _ in range(workers):
                    spawn()
                while report.kills < kills and time.monotonic() < deadline:
                    await asyncio.sleep(rng.uniform(0.1, 0.4))
                    stats = await storage.stats(queue)
                    if stats.succeeded >= tasks:
                        break
                    busy = [w for w in running if _in_handler(w)]
                    if not busy:
                        continue
                    victim = rng.choice(busy)
                    victim.process.send_signal(signal.SIGKILL)
                    victim.process.wait()
                    running.remove(victim)
                    report.kills += 1
                    spawn()
                finished = await _wait_all_succeeded(storage, queue, tasks, deadline)
            finally:
                _stop(everyone)
            report.workers_started = len(everyone)
            if not finished:
                report.problems.append(
                    f"not every task succeeded within {timeout:.0f}s "
                    f"({(await storage.stats(queue)).succeeded}/{tasks})"
                )
            stored = {}
            for n in range(tasks):
                task = await storage.get(f"{queue}-{n:05d}")
                stored[task.id] = task
        _check(report, stored, [line for w in everyone for line in _lines(w.log)])
    report.seconds = time.monotonic() - started
    return report


def _check(report: ChaosReport, stored: dict[str, Envelope], lines: list[list[str]]) -> None:
    claims: dict[str, list[_Claim]] = defaultdict(list)
    done: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        kind = line[0]
        if kind == "claim" and len(line) == 6:
            _, task_id, token, start, end, pid = line
            claims[task_id].append(
                _Claim(
                    task_id,
                    token,
                    datetime.fromisoformat(start),
                    datetime.fromisoformat(end),
                    pid,
                )
            )
        elif kind == "done" and len(line) == 4:
            done[line[1]].append(line[3])
        elif kind == "stale":
            report.stale_completions += 1
    report.claims = sum(len(c) for c in claims.values())
    for task_id, task in stored.items():
        if task.status != Status.SUCCEEDED:
            report.problems.append(f"{task_id}: status {task.status}, not SUCCEEDED")
            continue
        # A worker killed right after its completion committed leaves no "done" line, so a
        # task is logged done at most once, by the worker the SUCCEEDED record names.
        finisher = task.attempts[-1].worker_id if task.attempts else None
        if len(done[task_id]) > 1:
            report.problems.append(f"{task_id}: completed {len(done[task_id])} times")
        elif done[task_id] and finisher != f"chaos-{done[task_id][0]}":
            report.problems.append(
                f"{task_id}: pid {done[task_id][0]} completed it, the record says {finisher}"
            )
        outcomes = [attempt.outcome for attempt in task.attempts]
        expired = outcomes.count(Outcome.LEASE_EXPIRED)
        report.reclaims += expired
        if outcomes[-1:] != [Outcome.SUCCEEDED] or expired != len(outcomes) - 1:
            report.problems.append(f"{task_id}: attempts {[str(o) for o in outcomes]}")
        if task.attempt_count != len(outcomes):
            report.problems.append(
                f"{task_id}: attempt_count {task.attempt_count} != {len(outcomes)} records"
            )
        logged = claims.get(task_id, [])
        # A worker killed between its claim and its log line leaves a claim unlogged, so the
        # records may exceed the logged claims, never the other way round.
        if len(logged) > len(outcomes):
            report.problems.append(
                f"{task_id}: {len(logged)} claims logged but only {len(outcomes)} attempts"
            )
        if len({c.token for c in logged}) != len(logged):
            report.problems.append(f"{task_id}: a claim token was handed out twice")
        ordered = sorted(logged, key=lambda c: c.start)
        for before, after in itertools.pairwise(ordered):
            if after.start < before.end:
                report.problems.append(
                    f"{task_id}: double claim: pid {before.pid} held a lease until "
                    f"{before.end.isoformat()} but pid {after.pid} claimed it at "
                    f"{after.start.isoformat()}"
                )


def main() -> None:
    """``python -m rdq_compliance.chaos URL``: run once and print the report."""
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m rdq_compliance.chaos STORAGE_URL")
    report = asyncio.run(run_chaos(sys.argv[1]))
    print(report.summary())
    with contextlib.suppress(AssertionError):
        report.assert_ok()
        print("OK")
        return
    for problem in report.problems:
        print(problem)
    raise SystemExit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
