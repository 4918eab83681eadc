"""How soon an idle worker serves a task after its store comes back from an outage.

    python -m bench.recovery --outage 15 --outage 30 --repeats 5
    python -m bench.recovery --store redis --outage 15 --repeats 5

One ``rdq.Worker`` (the defaults a user gets) serves a queue on a throwaway store: a durable
PostgreSQL cluster (``rdq_compliance.servers.postgres.LocalCluster``) or a ``redis-server``.
Each repeat stops the server for ``--outage`` seconds (PostgreSQL ``pg_ctl stop -m immediate``,
redis-server SIGKILL), starts it again and, as soon as it accepts connections, submits one task
from a producer of its own (a second store object, through the outage too). It prints, per
outage length, p50 and max over the repeats of: submit → handler start (from the moment the
submit was made), and submit returned → handler start (the worker's part alone). Every task
must be handled exactly once, else it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import structlog

import rdq
from rdq.spi import Storage

QUEUE = "recovery"


class Postgres:
    """A durable throwaway cluster; ``down`` is an immediate stop (a crash, for clients)."""

    def __init__(self) -> None:
        from rdq_compliance.servers.postgres import LocalCluster, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("PostgreSQL binaries (initdb, pg_ctl) not found")
        self.cluster = LocalCluster(bindir)

    def __enter__(self) -> Postgres:
        self.cluster.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.destroy()

    @property
    def url(self) -> str:
        return self.cluster.url

    def down(self) -> None:
        self.cluster.stop("immediate")

    def up(self) -> None:
        self.cluster.start()  # pg_ctl start -w: returns once the server accepts connections


class Redis:
    """A ``redis-server`` without persistence; ``down`` is SIGKILL."""

    def __init__(self) -> None:
        from rdq_compliance.servers.redis import RedisServer

        self.server = RedisServer()

    def __enter__(self) -> Redis:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()

    @property
    def url(self) -> str:
        return self.server.url

    def down(self) -> None:
        self.server.kill()

    def up(self) -> None:
        self.server.start()  # returns once the server answers PING


@contextlib.contextmanager
def server(kind: str) -> Iterator[Postgres | Redis]:
    with Postgres() if kind == "postgresql" else Redis() as found:
        yield found


@contextlib.asynccontextmanager
async def worker(app: rdq.App, storage: Storage) -> AsyncIterator[rdq.Worker]:
    running = rdq.Worker(app, storage, queues=[QUEUE], logger=structlog.get_logger("quiet"))
    task = asyncio.create_task(running.run())
    try:
        yield running
    finally:
        running.stop()
        await asyncio.wait_for(task, 60)


async def submit_until_stored(producer: Storage, task_id: str) -> float:
    """Submit the task (again, with the same id, until the store takes it); the monotonic
    time at which it was stored."""
    client = rdq.Client(producer)
    while True:
        try:
            await client.submit("mark", {}, queue=QUEUE, id=task_id, check_handler=False)
        except rdq.errors.StorageError:
            await asyncio.sleep(0.01)
            continue
        return time.monotonic()


async def measure(kind: str, outages: list[float], repeats: int) -> dict[float, list[Any]]:
    started: dict[str, float] = {}
    runs: dict[str, int] = {}
    app = rdq.App()
    app.queue(QUEUE, concurrency=4)

    @app.handler("mark", queue=QUEUE)
    async def mark(payload: object, ctx: rdq.TaskContext) -> None:
        started.setdefault(ctx.task_id, time.monotonic())
        runs[ctx.task_id] = runs.get(ctx.task_id, 0) + 1

    figures: dict[float, list[Any]] = {outage: [] for outage in outages}
    with server(kind) as srv:
        async with rdq.open_storage(srv.url) as storage, rdq.open_storage(srv.url) as producer:
            await storage.migrate()
            async with worker(app, storage):
                warm = f"warm-{uuid.uuid4().hex[:8]}"
                await submit_until_stored(producer, warm)
                await wait_for(lambda: warm in started, 30)
                for outage in outages:
                    for _ in range(repeats):
                        await asyncio.sleep(3.0)  # idle: the worker waits for work
                        await asyncio.to_thread(srv.down)
                        await asyncio.sleep(outage)
                        await asyncio.to_thread(srv.up)
                        task_id = f"after-{uuid.uuid4().hex[:8]}"
                        submitted = time.monotonic()
                        stored = await submit_until_stored(producer, task_id)
                        await wait_for(lambda t=task_id: t in started, 120)  # type: ignore[misc]
                        begun = started[task_id]
                        figures[outage].append((begun - submitted, begun - stored))
                        print(
                            f"  outage {outage:g}s: submit→start {begun - submitted:.3f}s, "
                            f"stored→start {begun - stored:.3f}s",
                            flush=True,
                        )
                await asyncio.sleep(1.0)
    twice = {task_id: n for task_id, n in runs.items() if n != 1}
    if twice:
        raise SystemExit(f"tasks handled more than once: {twice}")
    return figures


async def wait_for(done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit("the task was not started in time")
        await asyncio.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["postgresql", "redis"], default="postgresql")
    parser.add_argument("--outage", type=float, action="append", help="seconds (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    # the worker's warnings through the outage (claims refused) would drown the figures
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    outages = args.outage or [15.0, 30.0]
    figures = asyncio.run(measure(args.store, outages, args.repeats))
    print(f"{args.store}: {args.repeats} repeats per outage")
    for outage, pairs in figures.items():
        total = [pair[0] for pair in pairs]
        worker_part = [pair[1] for pair in pairs]
        print(
            f"outage {outage:g}s: submit→handler start p50 {statistics.median(total):.3f}s "
            f"max {max(total):.3f}s; stored→handler start p50 "
            f"{statistics.median(worker_part):.3f}s max {max(worker_part):.3f}s"
        )


if __name__ == "__main__":
    main()
