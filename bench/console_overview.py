"""How long the console's overview and the API's queue listing take on a big store, through a
real ``rdq server`` node, as an operator's browser and a script reach them.

    python -m bench.console_overview                                  # PostgreSQL, 10M tasks
    python -m bench.console_overview --backend postgresql --url URL   # a server of yours
    python -m bench.console_overview --backend sqlite --rows 1000000
    python -m bench.console_overview --backend redis --rows 1000000
    python -m bench.console_overview --backend mongodb --rows 100000

It loads ``--rows`` tasks over ``--queues`` queues (default 20) in the statuses of
``bench.pg_overview`` (queue ``q00``: 10 % of the rows SUCCEEDED and 1 % DEAD; the others
share the rest, about 90 % SUCCEEDED, 5 % DEAD in three error groups, 3 % PENDING, half of
them delayed, 1 % CANCELLED, 1 % IN_FLIGHT). PostgreSQL is loaded with one ``INSERT …
SELECT … generate_series`` per queue and status straight into the rdq schema (see
docs/postgres-schema.md; ``bench.pg_overview`` does the load, reused per schema), the other
stores through ``import_tasks`` in batches. Then what an operator's store holds besides:
four workers (one of them silent), an open breaker and a paused queue, an hour of per-minute
counts for every queue.

It starts ``rdq server --no-work`` on the store, logs in, and times ``--repeat`` requests each
of ``GET /ui`` (the overview page, every part of it) and ``GET /v1/queues`` (the API's
overview), after two of each to warm up; it prints the median, the 90th percentile and the
worst, and ``uptime`` before and after; ``--parts`` then times each of the overview's reads
alone. Figures: BENCHMARKS.md, "The console's overview on a big store".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

import rdq
from rdq import flow
from rdq.admin import TaskAdmin
from rdq.config import Breaker
from rdq.spi import Attempt, Control, Counts, Envelope, Outcome, Status, Storage, WorkerInfo

ROOT = Path(__file__).resolve().parents[1]
_MIX = [
    (Status.SUCCEEDED, 0.90),
    (Status.DEAD, 0.05),
    (Status.PENDING, 0.03),
    (Status.CANCELLED, 0.01),
    (Status.IN_FLIGHT, 0.01),
]
_BATCH = 1000


def plan(rows: int, queues: int) -> list[tuple[str, Status, int]]:
    """(queue, status, how many) for ``rows`` tasks: ``bench.pg_overview``'s shape at any
    size (at 10M rows, the same counts)."""
    big = [
        (Status.SUCCEEDED, rows // 10),
        (Status.DEAD, rows // 100),
        (Status.PENDING, max(rows // 10_000, 1)),
    ]
    chosen = [("q00", status, n) for status, n in big]
    per_queue = (rows - sum(n for _, n in big)) // (queues - 1)
    for q in range(1, queues):
        chosen += [(f"q{q:02d}", status, int(per_queue * share)) for status, share in _MIX]
    return chosen


def task(queue: str, status: Status, n: int, now: datetime) -> Envelope:
    """Task ``n`` of ``queue`` in ``status``, with the times its status needs."""
    day = now - timedelta(days=1)
    fields: dict[str, Any] = {}
    if status is Status.PENDING:
        fields["next_attempt_at"] = now + timedelta(days=30) if n % 2 else day
    elif status is Status.IN_FLIGHT:
        fields.update(
            lease_expires_at=now + timedelta(minutes=5),
            claimed_at=now - timedelta(seconds=20),
            claimed_by="bench-host:1:w",
            next_attempt_at=day,
        )
    elif status is Status.SUCCEEDED:
        fields["completed_at"] = now - timedelta(hours=1)
    elif status is Status.CANCELLED:
        fields["cancelled_at"] = now - timedelta(hours=3)
    else:
        at = now - timedelta(hours=2) + timedelta(milliseconds=n)
        error = f"Boom{n % 3}"
        fields.update(
            dead_lettered_at=at,
            attempt_count=1,
            attempts=[
                Attempt(
                    number=1,
                    outcome=Outcome.FAILED,
                    error_type=error,
                    error_message=f"{error}: the dependency said no",
                    started_at=at - timedelta(milliseconds=80),
                    finished_at=at,
                    worker_id="bench-host:1:w",
                )
            ],
        )
    return Envelope(
        id=f"{queue}-{status.value.lower()}-{n}",
        queue=queue,
        handler_ref="app.tasks:send",
        payload={"to": "someone@example.com", "n": n},
        status=status,
        created_at=day,
        priority=(n % 3) - 1,
        **fields,
    )


async def load_by_import(url: str, rows: int, queues: int) -> None:
    async with rdq.open_storage(url) as store:
        await store.migrate()
        if await store.list_queues():
            print("the store already holds tasks; reusing them", flush=True)
            return
        started = time.perf_counter()
        now = await store.now()
        for queue, status, count in plan(rows, queues):
            for first in range(0, count, _BATCH):
                batch = [
                    task(queue, status, n, now) for n in range(first, min(count, first + _BATCH))
                ]
                await store.import_tasks(batch)
            print(f"  {queue} {status.value:<9} {count:>9,}", flush=True)
        print(f"loaded in {time.perf_counter() - started:.0f} s", flush=True)


async def load_postgres(url: str, rows: int, queues: int) -> None:
    from bench import pg_overview

    await pg_overview._load(url, rows, queues)


async def surroundings(store: Storage) -> None:
    """Workers (one silent), an open breaker, a paused queue and an hour of counts (tasks
    died in two queues in the last 20 minutes)."""
    silent = WorkerInfo(
        id="bench-host:9:gone", host="bench-host", pid=9, queues=["q01"], heartbeat=1
    )
    await store.heartbeat_worker(silent)
    for i in range(3):
        await store.heartbeat_worker(
            WorkerInfo(
                id=f"bench-host:{i}:w",
                host="bench-host",
                pid=i,
                queues=[f"q{q:02d}" for q in range(20) if q % 3 == i],
                concurrency=20,
                heartbeat=3600,
            )
        )
    now = await store.now()
    for control in await store.list_controls():
        await store.delete_control(control.queue, control.key, expected_version=control.version)
    tripped = flow.trip(
        Control(queue="q02", key="handler:app.tasks:send"),
        now,
        Breaker(cooldown=600),
        started=now - timedelta(minutes=4),
        error_types=["Boom1"],
        error_type="Boom1",
        error_message="Boom1: the dependency said no",
        sample_task="q02-dead-1",
    )
    await store.put_control(tripped, expected_version=0)
    await TaskAdmin(store).pause("q03", actor="bench", reason="maintenance")
    minute = now.replace(second=0, microsecond=0)
    incident = ("q00", "q05")  # tasks died there in the last hour: the overview groups them
    counts = [
        Counts(
            queue=f"q{q:02d}",
            minute=minute - timedelta(minutes=m),
            succeeded=40,
            failed=2,
            dead=3 if f"q{q:02d}" in incident and m < 20 else 0,
        )
        for q in range(20)
        for m in range(60)
    ]
    for first in range(0, len(counts), 500):
        await store.add_counts(counts[first : first + 500])
    await asyncio.sleep(2.5)  # the first worker is silent from now on


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def node(url: str, token: str) -> Iterator[str]:
    """``rdq server --no-work`` on ``url``; yields its base URL."""
    port = _free_port()
    env = {**os.environ, "RDQ_SERVER_TOKENS": f"bench:read+admin:{token}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdq", "server", "--storage", url, "--no-work", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"rdq server exited: {proc.stderr.read() if proc.stderr else ''}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _log_in(client: httpx.Client, token: str) -> None:
    form = client.get("/ui/login")
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
    if nonce is None:
        raise SystemExit("no login form")
    done = client.post("/ui/login", data={"token": token, "login_csrf": nonce.group(1)})
    if done.status_code != 303:
        raise SystemExit(f"login refused: {done.status_code}")


def _time(client: httpx.Client, path: str, repeat: int, **headers: str) -> list[float]:
    for _ in range(2):
        client.get(path, headers=headers).raise_for_status()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(path, headers=headers).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _figures(samples: list[float]) -> str:
    p90 = (
        statistics.quantiles(samples, n=10, method="inclusive")[-1]
        if len(samples) >= 2
        else samples[0]
    )
    return (
        f"median {statistics.median(samples):7.1f} ms, p90 {p90:7.1f} ms, "
        f"worst {max(samples):7.1f} ms"
    )


async def parts(url: str, repeat: int) -> None:
    """Each read of the overview alone, through a node's own objects in this process (where
    the page's time goes; the page runs them two groups at a time)."""
    from rdq.server import ServerSettings, TokenSpec
    from rdq.server._node import Node
    from rdq.server._ui import _fleet, _pages

    async with rdq.open_storage(url) as store:
        token = TokenSpec(owner="bench", rights=["read"], token=secrets.token_urlsafe(24))
        node = Node(ServerSettings(tokens=[token]), store)
        fleet = await _fleet.fleet_of(node)
        series, _ = await _fleet.rates_of(node)
        reads: dict[str, Any] = {
            "breakers and pauses, held counted": lambda: _fleet.flow_of(node),
            "workers": lambda: _fleet.fleet_of(node),
            "per-minute counts, 60 min": lambda: _fleet.rates_of(node),
            "every queue's stats": node.queues,
            "a silent worker's tasks": lambda: _fleet.silent_holdings(node, fleet),
            "top error groups": lambda: _pages._top_groups(node, series, fleet.now),
        }
        print()
        for name, read in reads.items():
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                await read()
                samples.append((time.perf_counter() - started) * 1000)
            print(f"{name:<36} median {statistics.median(samples):7.1f} ms")


def measure(url: str, repeat: int) -> None:
    token = secrets.token_urlsafe(24)
    with node(url, token) as base, httpx.Client(base_url=base, timeout=120) as client:
        _log_in(client, token)
        page = _time(client, "/ui", repeat)
        api = _time(client, "/v1/queues", repeat, Authorization=f"Bearer {token}")
        body = client.get("/ui").text
        queues = len(re.findall(r'<tr data-queue="', body))
    print(f"\n{queues} queues on the overview; {repeat} requests each")
    print(f"GET /ui         {_figures(page)}")
    print(f"GET /v1/queues  {_figures(api)}")


@contextlib.contextmanager
def store_url(backend: str, url: str | None, tmp: Path) -> Iterator[str]:
    if url is not None:
        yield url
    elif backend == "postgresql":
        from rdq_compliance.servers.postgres import LocalCluster, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("no --url and no local initdb/pg_ctl")
        settings = {"fsync": "off", "synchronous_commit": "off", "shared_buffers": "512MB"}
        with LocalCluster(bindir, settings=settings) as cluster:
            yield f"{cluster.url}?schema=overview"
    elif backend == "sqlite":
        yield f"sqlite:///{tmp / 'overview.db'}"
    elif backend == "redis":
        from rdq_compliance.servers.redis import server_url

        with server_url() as found:
            yield found
    else:
        from rdq_compliance.servers.mongo import server_url

        with server_url() as found:
            yield found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", choices=["postgresql", "sqlite", "redis", "mongodb"], default="postgresql"
    )
    parser.add_argument("--url", help="a store of yours (default: a throwaway one)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="directory for the SQLite file (kept)")
    parser.add_argument("--parts", action="store_true", help="also time each read alone")
    args = parser.parse_args()
    print(
        "uptime before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    )
    with contextlib.ExitStack() as stack:
        import tempfile

        tmp = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(store_url(args.backend, args.url, tmp))
        if args.backend == "postgresql":
            asyncio.run(load_postgres(url.split("?")[0], args.rows, args.queues))
            if "schema=" not in url:
                url += ("&" if "?" in url else "?") + "schema=overview"
        else:
            asyncio.run(load_by_import(url, args.rows, args.queues))

        async def prepare() -> None:
            async with rdq.open_storage(url) as store:
                await surroundings(store)

        asyncio.run(prepare())
        measure(url, args.repeat)
        if args.parts:
            asyncio.run(parts(url, args.repeat))
    print(
        "uptime after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    )


if __name__ == "__main__":
    main()
