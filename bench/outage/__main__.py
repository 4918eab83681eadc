"""The outage scenario, run as a user would: ``rdq worker`` processes on a real store, a
dependency over HTTP that refuses connections for the first ``--outage`` seconds, then answers.

    python -m bench.outage --storage sqlite:////tmp/outage.db --outage 60
    python -m bench.outage --storage postgresql --outage 10 --healthy 2000

``--storage postgresql`` (no URL) runs on the test suite's durable throwaway cluster.

It prints: tasks dead-lettered, calls that reached the dead service (refused connections are
counted by the service's accept loop, which is closed during the outage: so it counts
connection attempts the workers made), when the last task succeeded after the service came
back, attempts used beyond the first (what the outage cost the tasks), and, with
``--healthy``, the healthy handler's rate during the outage against its rate alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from collections import Counter
from pathlib import Path

import rdq
from bench._servers import postgres
from rdq import flow, retry
from rdq.spi import Envelope, Page, Status, TaskFilter

ROOT = Path(__file__).resolve().parents[2]


class Service:
    """An HTTP endpoint that refuses connections until ``up_at`` (``time.monotonic``), then
    answers 200; counts the connections it refused (a listening socket that accepts and
    resets them) and the requests it served."""

    def __init__(self, port: int, up_at: float) -> None:
        self.port = port
        self.up_at = up_at
        self.refused = 0
        self.served = 0
        self.served_at: list[float] = []
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self.up_at:
            self.refused += 1
            sock = writer.get_extra_info("socket")
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            writer.close()  # RST: the client sees "connection reset"/"refused"
            return
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                self.served += 1
                self.served_at.append(time.monotonic())
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


def _interleaved(first: list[rdq.Submission], second: list[rdq.Submission]) -> list[rdq.Submission]:
    """Both lists in one, evenly mixed (each keeps its order)."""
    keyed = [(i / len(first), s) for i, s in enumerate(first)] if first else []
    keyed += [((i + 0.5) / len(second), s) for i, s in enumerate(second)] if second else []
    return [s for _, s in sorted(keyed, key=lambda pair: pair[0])]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _spawn_worker(n: int, storage: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """One ``rdq worker`` process of the scenario's app; its log goes to a file of its own."""
    log = Path(f"/tmp/outage-worker-{n}.log")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rdq",
        "worker",
        "bench.outage.app:app",
        "--storage",
        storage,
        "--log-level",
        "WARNING",
        "--log-format",
        "json",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("w"),  # noqa: ASYNC230 - opening a local log file is immediate
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--healthy", type=int, default=0, help="tasks of the healthy handler")
    parser.add_argument("--breaker", choices=["on", "off"], default="on")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.storage == "postgresql":
        with postgres(None) as url:
            args.storage = url
            await scenario(args)
    else:
        await scenario(args)


async def scenario(args: argparse.Namespace) -> None:

    down_port, up_port = _free_port(), _free_port()
    start = time.monotonic()
    service = Service(down_port, start + 1e9)  # down until the workers are up
    healthy = Service(up_port, 0.0)
    await service.start()
    await healthy.start()
    env = dict(
        os.environ,
        OUTAGE_SERVICE=f"http://127.0.0.1:{down_port}/",
        OUTAGE_HEALTHY=f"http://127.0.0.1:{up_port}/",
        OUTAGE_BREAKER=args.breaker,
        PYTHONPATH=str(ROOT),
    )
    async with rdq.open_storage(args.storage) as storage:
        await storage.migrate()
        client = rdq.Client(storage)
        calls = [rdq.Submission("call", {"n": i}, queue="q") for i in range(args.tasks)]
        healthy_ones = [rdq.Submission("healthy", {"n": i}, queue="q") for i in range(args.healthy)]
        await client.submit_many(_interleaved(calls, healthy_ones))
        workers = [await _spawn_worker(n, args.storage, env) for n in range(args.workers)]
        began = time.monotonic()
        service.up_at = began + args.outage
        last = None
        try:
            while time.monotonic() - began < args.timeout:
                stats = await storage.stats("q")
                if stats.pending == 0 and stats.in_flight == 0:
                    last = time.monotonic() - began
                    break
                await asyncio.sleep(0.5)
        finally:
            for proc in workers:
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(asyncio.gather(*(proc.wait() for proc in workers)), 60)
        stats = await storage.stats("q")
        controls = await storage.list_controls("q") if storage.capabilities().control else []
        outages = [o for c in controls for o in flow.breaker_of(c).outages]
        used: Counter[int] = Counter()
        charged: list[Envelope] = []
        cursor = None
        while True:
            tasks, cursor = await storage.list_tasks(
                "q",
                TaskFilter(status=Status.SUCCEEDED, handler_ref="call"),
                Page(limit=1000, cursor=cursor, include_attempts=True),
            )
            for task in tasks:
                n = retry.attempts_used(task, task.attempt_count, outages)
                used[n] += 1
                if n > 1 and len(charged) < 5:
                    charged.append(task)
            if cursor is None:
                break
    await service.stop()
    await healthy.stop()
    scheme = args.storage.split("://")[0]
    print(f"storage            {scheme}, {args.workers} workers x 10, breaker {args.breaker}")
    print(f"tasks              {args.tasks} (outage {args.outage:g} s)")
    print(f"dead-lettered      {stats.dlq_depth}")
    print(f"succeeded          {stats.succeeded}")
    print(f"calls refused      {service.refused} (reached the dead service)")
    print(f"calls served       {service.served}")
    if last is not None:
        print(f"last task done     {last - args.outage:.1f} s after the service came back")
    print(f"attempts used      {dict(sorted(used.items()))} (per task, the outage not counted)")
    for task in charged:  # why a task was charged: its attempts beside the outages
        print(f"charged            {task.id}:")
        for a in task.attempts:
            print(f"                   {a.outcome.value} {a.error_type} at {a.finished_at}")
    if charged:
        for o in outages:
            print(f"outage             {o.start} .. {o.end} {list(o.error_types)}")
    if healthy.served_at:
        first = healthy.served_at[0]
        end = healthy.served_at[-1]
        if args.outage:
            end = min(end, began + args.outage)
        done = sum(1 for t in healthy.served_at if t <= end)
        during = "during the outage" if args.outage else "(no outage)"
        print(f"healthy handler    {done / (end - first):.0f} tasks/s {during}, {done} tasks")


if __name__ == "__main__":
    asyncio.run(main())
