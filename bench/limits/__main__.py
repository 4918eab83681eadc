"""Limits across the fleet, run as a user would: ``rdq worker`` processes on PostgreSQL.

    python -m bench.limits                         # every phase, a throwaway durable cluster
    python -m bench.limits --phases cost --repeat 5 --tasks 20000
    python -m bench.limits --url postgresql://…    # a server of your own

Phases (``--phases``, default all):

- ``cost``: drain ``--tasks`` no-op tasks with ``--processes`` workers, without limits and with
  a limit that never binds (a concurrency limit, a rate limit), the modes interleaved in each of
  ``--repeat`` rounds; the drain's steady rate (between the 10th and the 90th percentile of the
  completions, so the workers' start and the last ones running dry do not count), and over the
  last 9,000 tasks claimed the rate and the CPU per task of the worker processes and of the
  PostgreSQL server's processes (from /proc: a figure the machine's other load disturbs
  less than a rate), and the time the server spent in the claim functions (``claim_due``,
  ``claim_controlled``: ``pg_stat_user_functions``, on with ``track_functions``; set on the
  throwaway cluster) per claim and per task, waits for locks included;
- ``concurrency``: ``Concurrency(20, key="psp")`` with 8 workers of concurrency 10 each (80
  slots, 20 allowed) and tasks of 50 ms (``--task-seconds``): the most handlers that ran at
  once, as they saw it (each handler writes when it began and ended), their mean, and the most
  ``in_use`` the store's control reported when polled every 50 ms;
- ``rate``: ``Rate(50, per=1.0, key="psp")`` (burst 5, the default) with 8 workers: the most
  handler starts in any one second window, and the rate over the run;
- ``kill``: ``Concurrency(10)``, a worker holding all ten slots with tasks that run for an
  hour, a second worker beside it; the first is ``kill -9``'d: how long until the second holds
  the ten (within one ``--lease``, default 5 s, plus a poll), and never more than ten.

Each run has a queue of its own and checks every task was handled exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

import rdq
from bench._servers import postgres
from bench.e2e.cluster import process_tree_cpu
from bench.limits._measure import (
    busiest_window,
    mean_at_once,
    median,
    most_at_once,
    quantile,
    steady_rate,
)
from bench.limits.app import build_app
from rdq.spi import Page, Status, Storage, TaskFilter

ROOT = Path(__file__).resolve().parents[2]
COST_MODES = (
    "none",
    "loose-concurrency",
    "loose-concurrency-queue",
    "loose-rate",
    "loose-rate-queue",
)


@dataclass
class Run:
    """What one run's handlers saw, and the most ``in_use`` the store reported."""

    intervals: list[tuple[float, float]]
    claimed: list[float] = field(default_factory=list)
    """When the store claimed each task, by its clock (seconds since the epoch)."""
    store_in_use: int = 0
    seconds: float = 0.0
    window: tuple[int, float, float, float] | None = None
    """Over the drain's middle — from when at most ``--cpu-from`` tasks were left pending to
    when none was — (tasks claimed, seconds, CPU seconds of the worker processes, CPU
    seconds of the PostgreSQL server's processes; ``nan`` when not known)."""
    notes: list[str] = field(default_factory=list)
    queue: str = ""


def _pythonpath() -> str:
    """The workers' PYTHONPATH: the repository (for ``bench.limits.app``) before what this
    process was given (so a run of other code, ``PYTHONPATH=…/src``, is that code's)."""
    given = os.environ.get("PYTHONPATH")
    return f"{ROOT}{os.pathsep}{given}" if given else str(ROOT)


def _spawn(url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rdq",
            "worker",
            "bench.limits.app:app",
            "--storage",
            url,
            "--log-level",
            "WARNING",
            "--log-format",
            "json",
            "--grace-period",
            "5",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def _read_stamps(folder: Path) -> tuple[list[tuple[float, float]], list[float]]:
    """Every (start, end) the handlers wrote in ``folder``, and every claim time."""
    runs, claims = [], []
    for path in folder.glob("*.txt"):
        for line in path.read_text().splitlines():
            start, end, claimed = line.split()
            runs.append((float(start), float(end)))
            claims.append(float(claimed))
    return runs, claims


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
    """Poll ``check`` every 50 ms until it holds; exit naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def run_once(
    storage: Storage,
    url: str,
    *,
    mode: str,
    n: int,
    processes: int,
    concurrency: int,
    tasks: int,
    sleep: float,
    timeout: float,
    postmaster: int | None = None,
    cpu_from: int = 0,
) -> Run:
    """Submit ``tasks`` tasks to a fresh queue, drain them with ``processes`` workers of
    ``mode``'s app, and read what the handlers wrote."""
    queue = f"limits_{mode.replace('-', '_')}_{secrets.token_hex(3)}"
    app = build_app(queue, mode, n, concurrency)
    client = rdq.Client(storage, app)
    for first in range(0, tasks, 1000):
        batch = min(1000, tasks - first)
        await client.submit_many([rdq.Submission("run", {"sleep": sleep})] * batch)
    stamps = Path(tempfile.mkdtemp(prefix="limits-stamps-"))
    env = dict(
        os.environ,
        LIMITS_QUEUE=queue,
        LIMITS_MODE=mode,
        LIMITS_N=str(n),
        LIMITS_CONCURRENCY=str(concurrency),
        LIMITS_STAMPS=str(stamps),
        PYTHONPATH=_pythonpath(),
    )
    workers = [_spawn(url, env, stamps / f"worker-{i}.log") for i in range(processes)]
    began = time.monotonic()
    result = Run([], queue=queue)
    mark: tuple[int, float, float, float] | None = None

    def sample(pending: int) -> tuple[int, float, float, float]:
        used = sum(process_tree_cpu(w.pid) for w in workers)
        server = process_tree_cpu(postmaster) if postmaster is not None else math.nan
        return pending, time.monotonic(), used, server

    try:
        while True:
            stats = await storage.stats(queue)  # counts this small are exact (a succeeded
            if mark is None and stats.pending <= cpu_from:  # count above 10,000 is not)
                mark = sample(stats.pending)
            elif mark is not None and stats.pending == 0 and result.window is None:
                _, at, used, server = sample(0)
                result.window = (mark[0], at - mark[1], used - mark[2], server - mark[3])
            if stats.pending == 0 and stats.in_flight == 0:
                break
            if time.monotonic() - began > timeout:
                raise SystemExit(f"{mode}: {stats.pending} still pending after {timeout} s")
            if storage.capabilities().control:
                for control in await storage.list_controls(queue):
                    result.store_in_use = max(result.store_in_use, control.in_use or 0)
            await asyncio.sleep(0.05)
        result.seconds = time.monotonic() - began
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            proc.wait(timeout=60)
    result.intervals, result.claimed = _read_stamps(stamps)
    stats = await storage.stats(queue)
    if len(result.intervals) != tasks or stats.dlq_depth:
        raise SystemExit(
            f"{mode}: {len(result.intervals)} handler runs of {tasks} tasks "
            f"({stats.dlq_depth} dead): not each exactly once"
        )
    return result


async def cost(storage: Storage, url: str, args: argparse.Namespace) -> None:
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    middle: dict[str, list[float]] = {mode: [] for mode in modes}
    workers_cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    server_cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    postmaster = await _postmaster(url)
    cpu_from = min(9_000, int(args.tasks * 0.9))
    claim_ms: dict[str, list[float]] = {mode: [] for mode in modes}
    claim_us: dict[str, list[float]] = {mode: [] for mode in modes}
    if args.url is None:
        await _track_functions(url)
    for round_ in range(args.repeat):
        order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
        for mode in order:
            before = await _claim_times(url)
            run = await run_once(
                storage,
                url,
                mode=mode,
                n=0,
                processes=args.processes,
                concurrency=args.concurrency,
                tasks=args.tasks,
                sleep=0.0,
                timeout=args.timeout,
                postmaster=postmaster,
                cpu_from=cpu_from,
            )
            rate = steady_rate([e for _, e in run.intervals])
            rates[mode].append(rate)
            line = f"  cost round {round_ + 1} {mode:<18} {rate:8.0f} tasks/s"
            after = await _claim_times(url)
            if (
                before is not None
                and after is not None
                and after["claims"][0] > before["claims"][0]
            ):
                claims = after["claims"][0] - before["claims"][0]
                ms = after["claims"][1] - before["claims"][1]
                claim_ms[mode].append(ms / claims)
                claim_us[mode].append(1000 * ms / args.tasks)
                line += (
                    f", claims {claims} of {ms / claims:.2f} ms ("
                    + ", ".join(
                        f"{name} {(after[name][0] - before[name][0]) / claims:.1f}x "
                        f"{(after[name][1] - before[name][1]) / claims:.2f} ms"
                        for name in PARTS
                    )
                    + ")"
                )
            if run.window is not None:
                claimed, seconds, used, server = run.window
                workers_cpu[mode].append(1e6 * used / claimed)
                server_cpu[mode].append(1e6 * server / claimed)
                middle[mode].append(claimed / seconds)
                line += (
                    f", middle {claimed / seconds:6.0f} tasks/s, CPU per task "
                    f"{1e6 * used / claimed:.0f} + {1e6 * server / claimed:.0f} µs"
                )
            print(line, file=sys.stderr)
    print(
        f"\ndrain, {args.tasks} no-op tasks, {args.processes} rdq worker processes x "
        f"concurrency {args.concurrency}, {args.repeat} rounds (median; every round)"
    )
    _compare("steady rate, tasks/s", rates, "{:.0f}")
    if all(middle.values()):
        print(f"over the last {cpu_from} tasks claimed:")
        _compare("rate, tasks/s", middle, "{:.0f}")
        _compare("worker CPU per task, µs", workers_cpu, "{:.1f}")
        _compare("PostgreSQL CPU per task, µs", server_cpu, "{:.1f}")
        both = {
            m: [w + p for w, p in zip(workers_cpu[m], server_cpu[m], strict=True)] for m in modes
        }
        _compare("both, µs", both, "{:.1f}")
    if all(claim_ms.values()):
        print("in the claim functions (waits included), over the whole drain:")
        _compare("ms per claim", claim_ms, "{:.2f}")
        _compare("µs per task", claim_us, "{:.1f}")


def _compare(title: str, values: dict[str, list[float]], form: str) -> None:
    """One line per mode: its median, the change from ``none``'s, every round."""
    print(f"  {title}")
    base = median(values["none"])
    for mode in values:
        m = median(values[mode])
        change = "" if mode == "none" else f"{100 * (m - base) / base:+.1f} %"
        rounds = ", ".join(form.format(v) for v in values[mode])
        print(f"    {mode:<18} {form.format(m):>8} {change:>9}  ({rounds})")


async def _track_functions(url: str) -> None:
    """Count the calls and time of plpgsql functions on the throwaway cluster."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ALTER SYSTEM SET track_functions = 'all'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


CLAIM_FUNCTIONS = ("claim_due", "claim_controlled")
PARTS = ("live_leases", "due_unblocked", "raise_floor")
"""Functions a claim calls, whose share of the claim's time each round prints."""


async def _claim_times(url: str) -> dict[str, tuple[int, float]] | None:
    """Calls so far and milliseconds spent in the claim functions (``claims``) and in each of
    :data:`PARTS` (``None`` when ``track_functions`` does not count them). The workers have
    exited by the second reading of a run, so their backends have reported theirs."""
    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SHOW track_functions") == "none":
            return None
        rows = await conn.fetch(
            "SELECT funcname, sum(calls) AS calls, sum(total_time) AS ms "
            "FROM pg_stat_user_functions WHERE funcname = ANY ($1::text[]) GROUP BY funcname",
            [*CLAIM_FUNCTIONS, *PARTS],
        )
    finally:
        await conn.close()
    found = {r["funcname"]: (int(r["calls"]), float(r["ms"])) for r in rows}
    times = {name: found.get(name, (0, 0.0)) for name in PARTS}
    claims = [found.get(name, (0, 0.0)) for name in CLAIM_FUNCTIONS]
    times["claims"] = (sum(c for c, _ in claims), sum(ms for _, ms in claims))
    return times


async def _postmaster(url: str) -> int | None:
    """The process id of the PostgreSQL server at ``url`` when it runs on this machine and
    the URL's user may read its data directory's name (else ``None``: no server CPU)."""
    try:
        conn = await asyncpg.connect(url)
        try:
            datadir = await conn.fetchval("SHOW data_directory")
        finally:
            await conn.close()
        return int((Path(datadir) / "postmaster.pid").read_text().split()[0])
    except (OSError, asyncpg.PostgresError, ValueError):
        return None


async def concurrency(storage: Storage, url: str, args: argparse.Namespace) -> None:
    limit = args.limit
    run = await run_once(
        storage,
        url,
        mode="concurrency",
        n=limit,
        processes=8,
        concurrency=10,
        tasks=args.concurrency_tasks,
        sleep=args.task_seconds,
        timeout=args.timeout,
    )
    ms = f"{1000 * args.task_seconds:g} ms"
    print(
        f"\nConcurrency({limit}, key='psp'), 8 rdq worker processes x concurrency 10, "
        f"{args.concurrency_tasks} tasks of {ms}"
    )
    print(f"  most handlers running at once     {most_at_once(run.intervals)} (limit {limit})")
    ends = [e for _, e in run.intervals]
    low, high = quantile(ends, 0.1), quantile(ends, 0.9)
    print(
        f"  mean handlers running at once     {mean_at_once(run.intervals, low, high):.1f} "
        "(between the 10th and 90th percentile of the completions)"
    )
    print(f"  most in_use the store reported    {run.store_in_use} (polled every 50 ms)")
    drain = steady_rate(ends)
    print(
        f"  drain, steady                     {drain:.0f} tasks/s "
        f"(limit / {ms}: {limit / args.task_seconds:.0f})"
    )
    held, lag = await _slot_time(url, run)
    handler = sum(e - s for s, e in run.intervals) / len(run.intervals)
    print(
        f"  a slot's time per task (ms)       {1000 * held:.1f} held in the store: "
        f"{1000 * lag:.1f} claim -> handler start, {1000 * handler:.1f} handler, "
        f"{1000 * (held - lag - handler):.1f} handler end -> success recorded"
    )


async def _slot_time(url: str, run: Run) -> tuple[float, float]:
    """Seconds a task of ``run`` held its slot in the store on average (claimed to success
    recorded, both by the store's clock: the mean ``completed_at`` less the mean claim time
    the handlers wrote), and of that from the claim to its handler's start (the handlers'
    monotonic clock moved onto the store's by this machine's offset between the two: one
    machine, one clock underneath)."""
    conn = await asyncpg.connect(url)
    try:
        completed = await conn.fetchval(
            "SELECT avg(extract(epoch FROM completed_at)) FROM rdq.task "
            "WHERE queue = $1 AND status = 'SUCCEEDED'",
            run.queue,
        )
    finally:
        await conn.close()
    offset = time.time() - time.monotonic()
    lags = [s + offset - c for (s, _), c in zip(run.intervals, run.claimed, strict=True)]
    return float(completed) - sum(run.claimed) / len(run.claimed), sum(lags) / len(lags)


def _on_one_clock(run: Run) -> list[float]:
    """The handlers' starts moved onto the store's clock: shifted so that the earliest lag
    from claim to start is zero (the two clocks' offset is not known; this bounds it)."""
    starts = [s for s, _ in run.intervals]
    offset = min(s - c for s, c in zip(starts, run.claimed, strict=True))
    return [s - offset for s in starts]


async def rate(storage: Storage, url: str, args: argparse.Namespace) -> None:
    per_second = args.rate
    burst = max(1, per_second // 10)
    run = await run_once(
        storage,
        url,
        mode="rate",
        n=per_second,
        processes=8,
        concurrency=10,
        tasks=args.rate_tasks,
        sleep=0.0,
        timeout=args.timeout,
    )
    starts = [s for s, _ in run.intervals]
    print(
        f"\nRate({per_second}, per=1.0, key='psp') (burst {burst}), 8 rdq worker processes x "
        f"concurrency 10, {args.rate_tasks} no-op tasks"
    )
    print(
        f"  most claims in any 1 s window     {busiest_window(run.claimed, 1.0)} "
        f"(the store's clock; rate + burst: {per_second + burst})"
    )
    print(
        f"  most handler starts in any 1 s    {busiest_window(starts, 1.0)} "
        "(as the handlers saw them: a claim's start can lag it)"
    )
    lags = sorted(s - c for s, c in zip(_on_one_clock(run), run.claimed, strict=True))
    print(
        f"  handler start behind its claim    p50 {1000 * median(lags):.1f} ms, "
        f"max {1000 * lags[-1]:.1f} ms (beyond the quickest)"
    )
    print(f"  rate, steady                      {steady_rate(starts):.1f} starts/s")


async def _holders(storage: Storage, queue: str) -> Counter[str]:
    """Tasks of ``queue`` with a live lease, by the worker holding them."""
    now = await storage.now()
    tasks, _ = await storage.list_tasks(
        queue, TaskFilter(status=Status.IN_FLIGHT), Page(limit=1000)
    )
    return Counter(
        t.claimed_by or "?"
        for t in tasks
        if t.lease_expires_at is not None and t.lease_expires_at > now
    )


async def kill(storage: Storage, url: str, args: argparse.Namespace) -> None:
    """A worker holding all ten slots of ``Concurrency(10)`` is ``kill -9``'d: how long
    until the worker beside it holds them."""
    queue = f"limits_kill_{secrets.token_hex(3)}"
    lease = args.lease
    app = build_app(queue, "concurrency", 10, 20, lease)
    await rdq.Client(storage, app).submit_many(
        [rdq.Submission("run", {"sleep": 3600.0}) for _ in range(30)]
    )
    stamps = Path(tempfile.mkdtemp(prefix="limits-kill-"))
    env = dict(
        os.environ,
        LIMITS_QUEUE=queue,
        LIMITS_MODE="concurrency",
        LIMITS_N="10",
        LIMITS_CONCURRENCY="20",
        LIMITS_LEASE=str(lease),
        LIMITS_STAMPS=str(stamps),
        PYTHONPATH=_pythonpath(),
    )
    first = _spawn(url, env, stamps / "first.log")
    second: subprocess.Popen[bytes] | None = None
    try:

        async def ten_held() -> bool:
            return sum((await _holders(storage, queue)).values()) == 10

        await until(ten_held, "the first worker holding ten slots", 120)
        (holder,) = await _holders(storage, queue)
        second = _spawn(url, env, stamps / "second.log")
        pid = second.pid

        async def registered() -> bool:
            return any(f":{pid}:" in w.id for w in await storage.list_workers())

        await until(registered, "the second worker", 120)
        await asyncio.sleep(2 * lease)
        before = await _holders(storage, queue)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        killed = time.monotonic()
        killed_at = await storage.now()
        left, _ = await storage.list_tasks(
            queue, TaskFilter(status=Status.IN_FLIGHT), Page(limit=1000)
        )
        lapse = max(t.lease_expires_at for t in left if t.lease_expires_at is not None)
        lapsed_after = (lapse - killed_at).total_seconds()
        most = 0
        while True:
            held = await _holders(storage, queue)
            most = max(most, sum(held.values()))
            if any(f":{second.pid}:" in w and n == 10 for w, n in held.items()):
                break
            if time.monotonic() - killed > 10 * lease + 30:
                raise SystemExit(f"the slots did not come back: {dict(held)}")
            await asyncio.sleep(0.05)
        back = time.monotonic() - killed
        await asyncio.sleep(lease)
        after = await _holders(storage, queue)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    print(f"\nConcurrency(10), a worker holding the ten slots kill -9'd (lease {lease:g} s)")
    print(f"  before the kill                   {dict(before)} (the other worker: nothing)")
    print(f"  the dead worker's leases lapsed   {lapsed_after:.2f} s after the kill (store)")
    print(f"  slots back with the other worker  {back:.2f} s after the kill")
    print(f"  most slots held after the kill    {max(most, sum(after.values()))} (limit 10)")
    assert holder in before


PHASES = {"cost": cost, "concurrency": concurrency, "rate": rate, "kill": kill}


def _load() -> str:
    return os.getloadavg().__repr__()


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="PostgreSQL URL (default: a throwaway durable cluster)")
    parser.add_argument("--phases", default="cost,concurrency,rate,kill")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks of each cost run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the cost phase")
    parser.add_argument("--processes", type=int, default=2, help="workers of the cost phase")
    parser.add_argument("--concurrency", type=int, default=10, help="per worker, cost phase")
    parser.add_argument(
        "--modes", default=",".join(COST_MODES), help="the cost phase's modes, 'none' first"
    )
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--concurrency-tasks", type=int, default=3000)
    parser.add_argument("--task-seconds", type=float, default=0.05, help="concurrency phase")
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--rate-tasks", type=int, default=750)
    parser.add_argument("--lease", type=float, default=5.0, help="lease of the kill phase")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases: {unknown}; choose from {sorted(PHASES)}")
    print(f"load average before: {_load()}; {os.cpu_count()} CPUs", file=sys.stderr)
    with postgres(args.url) as url:
        async with rdq.open_storage(url) as storage:
            await storage.migrate()
            for phase in phases:
                await PHASES[phase](storage, url, args)
    print(f"load average after: {_load()}", file=sys.stderr)


def _stop_on_sigterm() -> None:
    """SIGTERM ends the run as Ctrl-C does: the workers and the throwaway cluster are
    stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":
    _stop_on_sigterm()
    asyncio.run(main())
