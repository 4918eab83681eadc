"""The kill -9 chaos test: real worker processes SIGKILLed mid-handler, again and again.

:func:`run_chaos` enqueues ``tasks`` tasks on a fresh queue, starts ``workers`` worker
processes (:mod:`rdq_compliance._chaos_worker`) that claim with a short lease straight through
the storage SPI, and SIGKILLs a worker that is inside its handler ``kills`` times at random
moments, starting a replacement each time, while the others keep working (it never kills the
last worker that is up, so the queue keeps moving while replacements start). When every task
has succeeded it stops the workers and checks, from the store and the workers' fsync'd logs:

- every task is SUCCEEDED, completed once (by the worker its SUCCEEDED record names);
- every reclaimed task carries its LEASE_EXPIRED records (one per lost lease: every attempt
  but the last is LEASE_EXPIRED, and no claim is missing from the count), the claim each
  killed worker held among them (unless it completed the task just before it died);
- no two workers ever held a valid lease on the same task at the same moment: sorted by claim
  time (storage clock), each claim starts no earlier than the previous lease's end.

The run takes as long as it needs, as long as it moves: it fails when nothing happens for
``stall`` seconds (no worker came up, claimed or finished a task, no task succeeded), or
when it outlasts ``cap``. Workers are forked from one spawner process that imported rdq and
the store's driver once (see :mod:`rdq_compliance._chaos_worker`), so a replacement is up in
well under a second; on a quiet machine a run takes a few seconds.

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
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rdq import open_storage
from rdq.spi import Envelope, Outcome, Status, Storage, TaskFilter
from rdq_compliance._support import list_all_tasks

__all__ = ["CAP", "STALL", "ChaosReport", "run_chaos"]

STALL = 60.0
"""Seconds a run may go without progress before it is declared stuck (a worker process
starts in a few seconds even on a loaded machine; a task takes well under one)."""
CAP = 600.0
"""Seconds a run may take at most, progress or not (a quiet machine needs about 5)."""


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
    first_up: float = 0.0
    """Seconds from the run's first launch until a worker was up (storage open)."""
    slowest_start: float = 0.0
    """The longest a worker took from its launch until it was up."""
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
            f"{self.stale_completions} stale completions, {self.seconds:.1f}s (first worker "
            f"up after {self.first_up:.1f}s, the slowest after {self.slowest_start:.1f}s)"
        )


@dataclass
class _Claim:
    task_id: str
    token: str
    start: datetime
    end: datetime
    pid: str


class _Forked:
    """A worker the spawner forked (its child, not ours), handled like a ``Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        """None while the process exists (the spawner reaps it as soon as it exits)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return -1
        return None

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code


class _Spawner:
    """The process that forks this run's workers (see :mod:`rdq_compliance._chaos_worker`)."""

    def __init__(self, url: str, queue: str, lease: float, errors: Path) -> None:
        self.errors = errors
        with errors.open("wb") as stderr:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rdq_compliance._chaos_worker",
                    url,
                    queue,
                    "--spawner",
                    "--lease",
                    str(lease),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )

    def fork(self, log: Path) -> _Forked:
        """A new worker writing ``log`` (raises ``RuntimeError`` if the spawner is gone or
        does not answer within :data:`STALL` seconds)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the chaos worker spawner has no pipes")
        try:
            stdin.write(f"{log}\n".encode())
            stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([stdout], [], [], STALL)
        answer = stdout.readline() if ready else b""
        if not answer.strip().isdigit():
            tail = self.errors.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"the chaos worker spawner did not start a worker: {tail}")
        return _Forked(int(answer))

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


_spawners: dict[str, _Spawner] = {}
"""The spawner of each running chaos run, by queue."""


@dataclass
class _Worker:
    process: subprocess.Popen[bytes] | _Forked
    log: Path
    launched: float = field(default_factory=time.monotonic)
    up_at: float | None = None
    """When its log first showed it up (``start``: storage open), by the process clock."""
    lines: list[list[str]] = field(default_factory=list)
    """Its log, as last read."""

    def read(self) -> None:
        self.lines = _lines(self.log)
        if self.up_at is None and self.lines and self.lines[0][0] == "start":
            self.up_at = time.monotonic()

    def in_handler(self) -> bool:
        return bool(self.lines) and self.lines[-1][0] == "claim"


def _spawn(url: str, queue: str, log: Path, lease: float) -> _Worker:
    """Start a worker process for the run on ``queue``, writing ``log`` (the run's one way to
    start workers: a test may replace it to start workers of another kind)."""
    spawner = _spawners.get(queue)
    if spawner is None:
        spawner = _spawners[queue] = _Spawner(url, queue, lease, log.parent / "spawner.err")
    return _Worker(spawner.fork(log), log)


def _lines(log: Path) -> list[list[str]]:
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    # A SIGKILL can cut the last line short: only complete lines count.
    return [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]


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


class _Watch:
    """Decides when a run is stuck: nothing happened for ``stall`` seconds, or the run
    outlasted ``cap``."""

    def __init__(
        self, stall: float, cap: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stall, self.cap, self.clock = stall, cap, clock
        self.started = self.moved = clock()
        self.seen: tuple[int, int] = (0, 0)

    def stuck(self, succeeded: int, lines: int) -> str | None:
        """Why the run is stuck (None while it moves), given the succeeded count and the
        number of log lines of every worker so far."""
        now = self.clock()
        if (succeeded, lines) != self.seen:
            self.seen, self.moved = (succeeded, lines), now
        if now - self.moved > self.stall:
            return f"nothing moved for {self.stall:g}s"
        if now - self.started > self.cap:
            return f"the run outlasted its cap of {self.cap:g}s"
        return None


async def _reread(storage: Storage, queue: str, tasks: int) -> dict[str, Envelope]:
    """Every task of the run as stored, history included: one listing of the SUCCEEDED ones
    where the store has ``list_tasks`` (capability ``task_listing``, contract version 2), then
    ``get`` for every task not listed (each task, from a store of version 1)."""
    stored: dict[str, Envelope] = {}
    if storage.capabilities().task_listing:
        listed = await list_all_tasks(
            storage, queue, TaskFilter(status=Status.SUCCEEDED), include_attempts=True
        )
        stored = {task.id: task for task in listed}
    for n in range(tasks):
        task_id = f"{queue}-{n:05d}"
        if task_id not in stored:
            stored[task_id] = await storage.get(task_id)
    return stored


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
    stall: float = STALL,
    cap: float = CAP,
) -> ChaosReport:
    """Run the chaos test against the store at ``storage_url`` (reachable from other
    processes) and return the report; call :meth:`ChaosReport.assert_ok` on it."""
    started = time.monotonic()
    queue = f"chaos-{secrets.token_hex(4)}"
    report = ChaosReport(queue=queue, tasks=tasks)
    rng = random.Random()
    with tempfile.TemporaryDirectory(prefix="rdq-chaos-") as tmp:
        logs = Path(tmp)
        running: list[_Worker] = []
        everyone: list[_Worker] = []
        killed: list[list[str]] = []

        def spawn() -> None:
            worker = _spawn(storage_url, queue, logs / f"w{len(everyone):03d}.log", lease)
            running.append(worker)
            everyone.append(worker)

        async with open_storage(storage_url) as storage:
            await storage.migrate()
            await _enqueue(storage, queue, tasks)
            launch = time.monotonic()
            try:
                for _ in range(workers):
                    spawn()
                watch = _Watch(stall, cap)
                while True:
                    await asyncio.sleep(rng.uniform(0.1, 0.4))
                    succeeded = (await storage.stats(queue)).succeeded
                    if succeeded >= tasks:
                        break
                    for worker in everyone:
                        worker.read()
                    why = watch.stuck(succeeded, sum(len(w.lines) for w in everyone))
                    if why is not None:
                        up = sum(w.up_at is not None for w in running)
                        report.problems.append(
                            f"not every task succeeded: {why} ({succeeded}/{tasks} "
                            f"succeeded, {up}/{len(running)} running workers up)"
                        )
                        break
                    if report.kills >= kills:
                        continue
                    # never the last worker that is up: the queue keeps moving meanwhile
                    busy = [w for w in running if w.in_handler()]
                    if not busy or sum(w.up_at is not None for w in running) < 2:
                        continue
                    victim = rng.choice(busy)
                    victim.process.send_signal(signal.SIGKILL)
                    victim.process.wait()
                    running.remove(victim)
                    report.kills += 1
                    killed.append(victim.lines[-1])
                    spawn()
            finally:
                _stop(everyone)
                spawner = _spawners.pop(queue, None)
                if spawner is not None:
                    spawner.close()
            report.workers_started = len(everyone)
            ups = [(w.up_at, w.launched) for w in everyone if w.up_at is not None]
            report.first_up = min((up for up, _ in ups), default=launch) - launch
            report.slowest_start = max((up - at for up, at in ups), default=0.0)
            stored = await _reread(storage, queue, tasks)
        _check(report, stored, [line for w in everyone for line in _lines(w.log)], killed)
    report.seconds = time.monotonic() - started
    return report


def _check(
    report: ChaosReport,
    stored: dict[str, Envelope],
    lines: list[list[str]],
    killed: list[list[str]],
) -> None:
    """Add to ``report`` what the stored tasks, every worker's log ``lines`` and the claims
    the killed workers held (``killed``: their last ``claim`` lines) show to be wrong."""
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
    for line in killed:
        _, task_id, _, start, _, pid = line
        held = stored.get(task_id)
        if held is None or held.status != Status.SUCCEEDED:
            continue  # reported above
        at = datetime.fromisoformat(start)
        lost = [a for a in held.attempts if a.outcome == Outcome.LEASE_EXPIRED]
        # unless the worker committed the completion just before it was killed
        if all(a.started_at != at for a in lost) and held.attempts[-1].worker_id != f"chaos-{pid}":
            report.problems.append(
                f"{task_id}: pid {pid} was killed holding it (claimed at {start}) and no "
                "LEASE_EXPIRED record is of that claim"
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
