"""Fair shares behind a deep backlog, on PostgreSQL, SQLite and Redis: how fast a fair queue
drains beside the same queue without fairness, how soon a small tenant is served, and (Redis)
how long another client of the same server waits meanwhile.

    python -m bench.fair_backlog                                  # every backend, 10k/50k/500k
    python -m bench.fair_backlog --backends redis --depths 50000 --rounds 3

For each backend, depth and round, two fresh queues (``plain``, then ``fair`` with
``fair = "tenant:"`` on its control before its tasks are stored, as a worker writes it
before its first claim) hold ``depth`` tasks of ``tenant:big`` due a minute ago and then
``--shallow`` tasks of ``tenant:small`` due a second ago (behind every big task in strict
order). ``--claimants`` claim loops drain ``--drain`` tasks with ``claim_due(queue,
--batch)`` and ``complete_many`` (no handler: the store's own cost), and the run records the
drain rate, in which claim the small tenant's last task came, and on Redis the latency of a
``PING`` sent every 5 ms by another client during the drain (p50, p99, max), the server's mean
time per script and its longest command of the drain (its SLOWLOG: the most another client can
have waited for the server, whatever the machine's load did to the pinging process). The order
of the two modes alternates by round; medians are printed at the end.

Two clients PING during a Redis drain: one at the default scheduling priority, and one that,
like the ``redis-server`` process the benchmark started (not a ``--url`` one), runs at
``--priority`` (nice −10 by default, which needs root or CAP_SYS_NICE; without, both run at
the default and the run says so; 0 turns it off). On a small machine the claim loops, the
server and the pinger share the cores, so the first pinger's figures are mostly its own wait
for a core, and the server's wait for one; the second pair stands for a Redis on a host of
its own and a client on another, where what another client waits for is the server's own
work, which a long script would show.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import rdq
from bench._servers import postgres
from bench._tenants import fill_big_and_small
from rdq.spi import QUEUE_KEY, Attempt, Completion, Control, Outcome, Storage

LEASE = timedelta(minutes=30)


@dataclass
class Drain:
    rate: float
    small_claim: int | None
    """the claim (1-based, counted over every claimant) that took the small tenant's last task"""
    claim_ms: float
    pings_ms: list[float] = field(default_factory=list)
    prio_pings_ms: list[float] = field(default_factory=list)
    """Redis: the PINGs of the client that runs at ``--priority``, as the server does"""
    script_ms: float | None = None
    """Redis: the server's mean time per script (claims and completions) during the drain"""
    slowest_ms: float | None = None
    """Redis: the longest command the server ran during the drain (its SLOWLOG, every
    command of 1 ms or more logged): what another client waited at most for the server"""
    over_5ms: int = 0
    """Redis: commands of the drain that took the server more than 5 ms"""
    over_5ms_scripts: str = ""
    """Redis: which scripts those were (rdq's script names)"""


async def drain(
    store: Storage, queue: str, total: int, batch: int, claimants: int, shallow: int
) -> Drain:
    taken = 0
    claims = 0
    small_left = shallow
    small_claim: int | None = None
    times: list[float] = []

    async def loop() -> None:
        nonlocal taken, claims, small_left, small_claim
        while taken < total:
            before = time.perf_counter()
            claimed = await store.claim_due(queue, batch, LEASE)
            times.append(time.perf_counter() - before)
            claims += 1
            if not claimed:
                return
            taken += len(claimed)
            for c in claimed:
                if "tenant:small" in c.task.keys:
                    small_left -= 1
                    if small_left == 0:
                        small_claim = claims
            await store.complete_many(
                [
                    Completion(c.task.id, c.token, Attempt(number=1, outcome=Outcome.SUCCEEDED))
                    for c in claimed
                ]
            )

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(claimants)))
    seconds = time.perf_counter() - started
    return Drain(taken / seconds, small_claim, statistics.median(times) * 1e3)


_PINGER = """
import json, sys, time, redis
client = redis.Redis.from_url(sys.argv[1])
client.ping()  # connected before the first PING that counts
out = []
while not sys.stdin.closed:
    before = time.perf_counter()
    client.ping()
    out.append((time.perf_counter() - before) * 1e3)
    time.sleep(0.005)
    if len(out) % 20 == 0 and __import__("select").select([sys.stdin], [], [], 0)[0]:
        break
print(json.dumps(out))
"""
"""Another client of the Redis: a process of its own (not this one's event loop, which the
claim loops keep busy), sending a PING every 5 ms until its stdin is written to."""


@contextlib.asynccontextmanager
async def pinging(url: str, out: list[float], priority: int = 0) -> AsyncIterator[None]:
    """PING the Redis at ``url`` every 5 ms from another process while the block runs, that
    process at nice ``priority``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PINGER,
        url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    if priority:
        renice(proc.pid, priority, "the second pinging client")
    try:
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.write(b"stop\n")
        await proc.stdin.drain()
        stdout, _ = await proc.communicate()
        out.extend(json.loads(stdout))


def renice(pid: int, priority: int, what: str) -> None:
    """Run process ``pid`` at nice ``priority``; without the right to (a nice below 0 needs
    root or CAP_SYS_NICE), say so once and go on at the default priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, priority)
    except PermissionError:
        print(
            f"could not run {what} at nice {priority} (needs root or CAP_SYS_NICE): it runs "
            "at the default priority; --priority 0 turns this off",
            file=sys.stderr,
        )


async def prioritise_server(url: str, priority: int) -> None:
    """Run the Redis at ``url``, the throwaway server this benchmark started on this
    machine, at nice ``priority``: its main thread, the one that runs every command."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        pid = int((await client.info("server"))["process_id"])
    finally:
        await client.aclose()
    renice(pid, priority, "redis-server")


async def script_ms(url: str, reset: bool) -> float:
    """The server's mean time per script call (claims and completions) since the last reset,
    from INFO commandstats."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        if reset:
            await client.config_resetstat()
            await client.config_set("slowlog-log-slower-than", 1000)
            await client.config_set("slowlog-max-len", 100_000)
            await client.slowlog_reset()
            return 0.0
        stats = await client.info("commandstats")
        calls = sum(
            v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
        )
        usec = sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
        return usec / calls / 1e3 if calls else float("nan")
    finally:
        await client.aclose()


async def slowest(url: str) -> tuple[float, int, str]:
    """The longest command of the server's SLOWLOG since :func:`script_ms` reset it (ms), how
    many took more than 5 ms, and the scripts (rdq's, by name) of those over 5 ms."""
    import hashlib
    from collections import Counter

    import redis.asyncio as aioredis

    from rdq_redis._queries import SCRIPT_NAMES, script_source

    by_sha = {hashlib.sha1(script_source(name).encode()).hexdigest(): name for name in SCRIPT_NAMES}
    client = aioredis.from_url(url)
    try:
        logged = await client.slowlog_get(100_000)
    finally:
        await client.aclose()
    took = [entry["duration"] / 1e3 for entry in logged]
    over = Counter(
        _command_name(entry["command"], by_sha) for entry in logged if entry["duration"] > 5_000
    )
    return (
        max(took, default=0.0),
        sum(over.values()),
        ", ".join(f"{name} ×{count}" for name, count in over.most_common()),
    )


def _command_name(command: bytes | str, by_sha: dict[str, str]) -> str:
    words = (command.decode() if isinstance(command, bytes) else command).split()
    if len(words) > 1 and words[0].upper() == "EVALSHA":
        return by_sha.get(words[1], words[1][:8])
    return words[0] if words else "?"


async def one(url: str, backend: str, fair: bool, args: argparse.Namespace, depth: int) -> Drain:
    queue = f"{'fair' if fair else 'plain'}-{uuid.uuid4().hex[:8]}"
    async with rdq.open_storage(url) as store:
        await store.migrate()
        if fair:
            await store.put_control(
                Control(queue=queue, key=QUEUE_KEY, fair="tenant:"), expected_version=0
            )
        await fill_big_and_small(store, queue, depth, args.shallow)
        pings: list[float] = []
        prio_pings: list[float] = []
        if backend == "redis":
            await script_ms(url, reset=True)
            async with pinging(url, pings), pinging(url, prio_pings, args.priority):
                found = await drain(
                    store, queue, min(args.drain, depth), args.batch, args.claimants, args.shallow
                )
            found.script_ms = await script_ms(url, reset=False)
            found.slowest_ms, found.over_5ms, found.over_5ms_scripts = await slowest(url)
        else:
            found = await drain(
                store, queue, min(args.drain, depth), args.batch, args.claimants, args.shallow
            )
        found.pings_ms = pings
        found.prio_pings_ms = prio_pings
        with contextlib.suppress(Exception):
            await store.purge_queue(queue)  # type: ignore[attr-defined]
        return found


@contextlib.asynccontextmanager
async def server(backend: str, given: str | None) -> AsyncIterator[str]:
    if backend == "postgres":
        with postgres(given) as url:
            yield url
    elif backend == "redis":
        if given:
            yield given
            return
        from rdq_compliance.servers.redis import server_url

        with server_url() as url:
            yield url
    elif backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="fair-backlog-")
        yield given or f"sqlite:///{folder}/bench.db"
    else:
        raise SystemExit(f"unknown backend {backend}")


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def p99(drains: list[Drain], prioritised: bool = False) -> float:
    """The median over rounds of each drain's PING p99 (of the pinger at ``--priority``)."""
    return statistics.median(
        p(d.prio_pings_ms if prioritised else d.pings_ms, 0.99) for d in drains
    )


async def main(args: argparse.Namespace) -> None:
    print(f"load average before: {os.getloadavg()}")
    for backend in args.backends.split(","):
        async with server(backend, args.url) as url:
            if backend == "redis" and args.priority and args.url is None:
                # a server of the user's own (--url) may be another machine's, its process id
                # not one of this machine's: only the throwaway server is reniced
                await prioritise_server(url, args.priority)
            for depth in (int(d) for d in args.depths.split(",")):
                runs: dict[str, list[Drain]] = {"plain": [], "fair": []}
                for round_ in range(args.rounds):
                    modes = [False, True] if round_ % 2 == 0 else [True, False]
                    for fair in modes:
                        found = await one(url, backend, fair, args, depth)
                        name = "fair" if fair else "plain"
                        runs[name].append(found)
                        ping = (
                            f", PING p50 {p(found.pings_ms, 0.5):.2f} p99 "
                            f"{p(found.pings_ms, 0.99):.2f} max {max(found.pings_ms):.2f} ms"
                            f" (at nice {args.priority}: p50 {p(found.prio_pings_ms, 0.5):.2f}"
                            f" p99 {p(found.prio_pings_ms, 0.99):.2f}"
                            f" max {max(found.prio_pings_ms):.2f} ms)"
                            f", script {found.script_ms:.3f} ms (server, mean), slowest "
                            f"command {found.slowest_ms:.2f} ms, {found.over_5ms} over 5 ms"
                            f" {found.over_5ms_scripts}"
                            if found.pings_ms
                            else ""
                        )
                        print(
                            f"  {backend} {depth} round {round_ + 1} {name:5}: "
                            f"{found.rate:7.0f} tasks/s, claim {found.claim_ms:6.2f} ms, "
                            f"small tenant's last task in claim {found.small_claim}{ping}",
                            flush=True,
                        )
                plain = statistics.median(d.rate for d in runs["plain"])
                fair_rate = statistics.median(d.rate for d in runs["fair"])
                print(
                    f"{backend} {depth:>7} due: plain {plain:7.0f}/s, fair {fair_rate:7.0f}/s "
                    f"({fair_rate / plain:.2f}x); small tenant's last task in claim "
                    f"plain {[d.small_claim for d in runs['plain']]}, "
                    f"fair {[d.small_claim for d in runs['fair']]}"
                    + (
                        f"; PING during the fair drain p99 {p99(runs['fair']):.2f} ms, "
                        f"plain {p99(runs['plain']):.2f} ms; at nice {args.priority}: fair "
                        f"{p99(runs['fair'], True):.2f} ms, plain "
                        f"{p99(runs['plain'], True):.2f} ms"
                        if backend == "redis"
                        else ""
                    )
                    + f" (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backends", default="postgres,sqlite,redis")
    parser.add_argument("--url", help="a server of your own (one backend)")
    parser.add_argument("--depths", default="10000,50000,500000")
    parser.add_argument("--shallow", type=int, default=10)
    parser.add_argument("--drain", type=int, default=5000, help="tasks drained per run")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--claimants", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--priority",
        type=int,
        default=-10,
        help="Redis: the nice value of the second pinging client and of the throwaway server "
        "(not of a --url one); 0: off",
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
