"""The outage scenario, run as a user would: ``rdq worker`` processes on a real store, a
dependency over HTTP that fails for ``--outage`` seconds, then answers.

    python -m bench.outage --storage sqlite:////tmp/outage.db --outage 60
    python -m bench.outage --storage postgresql --outage 10 --healthy 2000
    python -m bench.outage --storage postgresql --mode 503                 # a 503, not a reset
    python -m bench.outage --storage sqlite:////tmp/q.db --spacing 30 --workers 1
    python -m bench.outage --storage postgresql --shared-dependency

``--storage postgresql`` (no URL) runs on the test suite's durable throwaway cluster.

The shapes:

- the backlog (default): ``--tasks`` tasks of ``call`` queued, then the service fails for the
  first ``--outage`` seconds of the run (``--mode reset``: it resets every connection;
  ``--mode 503``: it answers ``503 Service Unavailable``, as a load balancer in front of a
  dead backend does); ``--healthy N`` mixes in N tasks of a handler whose service stays up;
- a quiet queue (``--spacing S``): one task submitted every ``S`` seconds while the service is
  down, none before;
- a flood behind a shared dependency (``--shared-dependency``): two handlers on one named
  dependency, steady traffic (``--steady-healthy`` healthy and ``--steady-dependency``
  dependency tasks a second) from the start, the service failing after ``--before`` seconds,
  and ``--tasks`` dependency tasks becoming due at that very moment.

It prints: tasks dead-lettered, calls that reached the dead service (resets or 503s the
service answered while down), when the last task succeeded after the service came back,
attempts used beyond the first (what the outage cost the tasks), and the healthy handler's
rate during the outage against its rate before it (or alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import signal
import socket
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import rdq
from bench._servers import postgres
from rdq import flow, retry
from rdq.spi import Envelope, Page, Status, Storage, TaskFilter

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "q"
DEPENDENCY_HANDLERS = ("call", "call_b")


class Service:
    """An HTTP endpoint that fails between ``down_from`` and ``up_at`` (``time.monotonic``)
    and answers 200 otherwise. Failing, it resets the connection (``mode="reset"``), answers
    503 (``mode="503"``) or never answers (``mode="hang"``, until the client gives up); only
    a ``share`` of the calls fail (a random one), and with ``flap`` it is down and up by turns
    for that many seconds each. It counts the calls it failed and the requests it served."""

    def __init__(self, port: int, mode: str = "reset", share: float = 1.0, flap: float = 0.0):
        self.port = port
        self.mode = mode
        self.share = share
        self.flap = flap
        self._rng = random.Random(7)
        self.down_from = 0.0
        self.up_at = 0.0
        self.failed = 0
        self.failed_at: list[float] = []
        self.served = 0
        self.served_at: list[float] = []
        self._server: asyncio.base_events.Server | None = None

    def down(self) -> bool:
        now = time.monotonic()
        if not self.down_from <= now < self.up_at:
            return False
        if self.flap and int((now - self.down_from) / self.flap) % 2:
            return False
        return self.share >= 1.0 or self._rng.random() < self.share

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "reset" and self.down():
            self._fail()
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
                if self.down() and self.mode == "hang":
                    self._fail()
                    await asyncio.sleep(max(0.0, self.up_at - time.monotonic()))
                    return
                if self.down():
                    self._fail()
                    writer.write(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 19\r\n\r\n"
                        b"no healthy upstream"
                    )
                else:
                    self.served += 1
                    self.served_at.append(time.monotonic())
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _fail(self) -> None:
        self.failed += 1
        self.failed_at.append(time.monotonic())

    def rate(self, start: float, end: float) -> float:
        """Requests served per second between ``start`` and ``end``."""
        if end <= start:
            return 0.0
        return sum(1 for t in self.served_at if start <= t < end) / (end - start)

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


def _app(env: dict[str, str]) -> rdq.App:
    """The workers' app, as they see it (the client adds the dependency keys it declares)."""
    os.environ.update({k: v for k, v in env.items() if k.startswith("OUTAGE_")})
    from bench.outage import app

    return app.app


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--mode", choices=["reset", "503", "hang"], default="reset")
    parser.add_argument("--fail-share", type=float, default=1.0, help="share of calls failing")
    parser.add_argument("--flap", type=float, default=0.0, help="down and up by turns, seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--healthy", type=int, default=0, help="tasks of the healthy handler")
    parser.add_argument("--breaker", choices=["on", "off"], default="on")
    parser.add_argument(
        "--spacing", type=float, default=0.0, help="a quiet queue: one task every S seconds"
    )
    parser.add_argument(
        "--shared-dependency", action="store_true", help="a flood behind a shared dependency"
    )
    parser.add_argument("--before", type=float, default=20.0, help="shared: seconds up first")
    parser.add_argument("--steady-healthy", type=float, default=150.0, help="shared: tasks/s")
    parser.add_argument("--steady-dependency", type=float, default=10.0, help="shared: tasks/s")
    parser.add_argument(
        "--backoff", default="exponential:1", help="exponential:BASE (cap 10 s) or fixed:DELAY"
    )
    parser.add_argument(
        "--kill-after", type=float, default=0.0, help="kill -9 one worker this long into it"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.storage == "postgresql":
        with postgres(None) as url:
            args.storage = url
            await scenario(args)
    else:
        await scenario(args)


async def _produce(client: rdq.Client, per_second: list[tuple[str, float]], until: float) -> int:
    """Submit each handler's tasks at its rate per second until ``until``; how many."""
    sent = 0
    owed = dict.fromkeys((h for h, _ in per_second), 0.0)
    began = last = time.monotonic()
    while (now := time.monotonic()) < until:
        batch = []
        for handler, rate in per_second:
            owed[handler] += rate * (now - last)
            whole = int(owed[handler])
            owed[handler] -= whole
            batch += [
                rdq.Submission(handler, {"n": sent + i, "t": now - began}, queue=QUEUE)
                for i in range(whole)
            ]
        last = now
        if batch:
            await client.submit_many(batch)
            sent += len(batch)
        await asyncio.sleep(0.05)
    return sent


async def _kill_one(workers: list[asyncio.subprocess.Process], at: float) -> None:
    """``kill -9`` the first worker at ``at`` (monotonic): its claims lapse, another reclaims."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    workers[0].send_signal(signal.SIGKILL)


async def _drained(storage: Storage, deadline: float) -> float | None:
    """Seconds (monotonic) at which the queue held nothing PENDING or IN_FLIGHT."""
    while time.monotonic() < deadline:
        stats = await storage.stats(QUEUE)
        if stats.pending == 0 and stats.in_flight == 0:
            return time.monotonic()
        await asyncio.sleep(0.5)
    return None


async def scenario(args: argparse.Namespace) -> None:
    service = Service(_free_port(), args.mode, args.fail_share, args.flap)
    healthy = Service(_free_port())
    await service.start()
    await healthy.start()
    env = dict(
        os.environ,
        OUTAGE_SERVICE=f"http://127.0.0.1:{service.port}/",
        OUTAGE_HEALTHY=f"http://127.0.0.1:{healthy.port}/",
        OUTAGE_BREAKER=args.breaker,
        OUTAGE_SHARED="1" if args.shared_dependency else "0",
        OUTAGE_BACKOFF=args.backoff,
        PYTHONPATH=str(ROOT),
    )
    service.down_from, service.up_at = 0.0, math.inf  # down until the workers are up
    producer: asyncio.Task[int] | None = None
    async with rdq.open_storage(args.storage) as storage:
        await storage.migrate()
        client = rdq.Client(storage, app=_app(env))
        if args.shared_dependency:
            flood = [
                rdq.Submission(
                    DEPENDENCY_HANDLERS[i % 2],
                    {"n": i},
                    queue=QUEUE,
                    delay=timedelta(seconds=args.before),
                )
                for i in range(args.tasks)
            ]
            service.up_at = 0.0  # up for the steady traffic before the outage
            await client.submit_many(flood)
        elif not args.spacing:
            calls = [rdq.Submission("call", {"n": i}, queue=QUEUE) for i in range(args.tasks)]
            healthy_ones = [
                rdq.Submission("healthy", {"n": i}, queue=QUEUE) for i in range(args.healthy)
            ]
            await client.submit_many(_interleaved(calls, healthy_ones))
        workers = [await _spawn_worker(n, args.storage, env) for n in range(args.workers)]
        began = time.monotonic()
        outage_at = began + (args.before if args.shared_dependency else 0.0)
        service.down_from, service.up_at = outage_at, outage_at + args.outage
        if args.shared_dependency:
            steady = [("healthy", args.steady_healthy)]
            steady += [(h, args.steady_dependency / 2) for h in DEPENDENCY_HANDLERS]
            producer = asyncio.create_task(_produce(client, steady, service.up_at))
        elif args.spacing:
            steps = max(1, math.ceil(args.outage / args.spacing))
            producer = asyncio.create_task(
                _produce(client, [("call", 1 / args.spacing)], began + steps * args.spacing)
            )
            await client.submit("call", {"n": -1}, queue=QUEUE)  # the first one at once
        done_at = None
        killer = None
        if args.kill_after:
            killer = asyncio.create_task(_kill_one(workers, outage_at + args.kill_after))
        try:
            if producer is not None:
                await producer
            done_at = await _drained(storage, began + args.timeout)
        finally:
            if producer is not None and not producer.done():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
            if killer is not None:
                killer.cancel()
            for proc in workers:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(asyncio.gather(*(proc.wait() for proc in workers)), 60)
        await _report(args, storage, service, healthy, began, done_at)
    await service.stop()
    await healthy.stop()


async def _report(
    args: argparse.Namespace,
    storage: Storage,
    service: Service,
    healthy: Service,
    began: float,
    done_at: float | None,
) -> None:
    stats = await storage.stats(QUEUE)
    controls = await storage.list_controls(QUEUE) if storage.capabilities().control else []
    outages = [o for c in controls for o in flow.breaker_of(c).outages]
    used: Counter[int] = Counter()
    charged: list[Envelope] = []
    for handler in ("call", "call_b"):
        cursor = None
        while True:
            tasks, cursor = await storage.list_tasks(
                QUEUE,
                TaskFilter(status=Status.SUCCEEDED, handler_ref=handler),
                Page(limit=1000, cursor=cursor, include_attempts=True),
            )
            for task in tasks:
                n = retry.attempts_used(task, task.attempt_count, outages)
                used[n] += 1
                if n > 1 and len(charged) < 5:
                    charged.append(task)
            if cursor is None:
                break
    scheme = args.storage.split("://")[0]
    shape = (
        "flood behind a shared dependency"
        if args.shared_dependency
        else f"quiet queue, a task every {args.spacing:g} s"
        if args.spacing
        else "backlog"
    )
    print(f"storage            {scheme}, {args.workers} workers x 10, breaker {args.breaker}")
    wall = time.time() - time.monotonic()
    start, end = _clock(service.down_from + wall), _clock(service.up_at + wall)
    print(f"outage             {start} .. {end} UTC")
    how = f"{args.mode}" + (f", {args.fail_share:.0%} of calls" if args.fail_share < 1 else "")
    how += f", flapping every {args.flap:g} s" if args.flap else ""
    print(f"shape              {shape}; the service fails ({how}) for {args.outage:g} s")
    print(f"dead-lettered      {stats.dlq_depth}")
    print(f"succeeded          {stats.succeeded}")
    print(f"calls to the dead service {service.failed}")
    print(f"calls served       {service.served}")
    if service.failed_at:
        seconds = Counter(int(t - service.down_from) for t in service.failed_at)
        first = ", ".join(f"{seconds.get(i, 0)}" for i in range(5))
        print(f"  of which          {first} in the outage's first five seconds, one by one")
    after = [t for t in service.served_at if t >= service.up_at]
    if after:  # a late probe and a slow drain read differently: the first call says which
        print(f"first call served  {after[0] - service.up_at:.1f} s after the service came back")
    if done_at is not None:
        print(f"last task done     {done_at - service.up_at:.1f} s after the service came back")
    else:
        print(f"last task done     not within --timeout {args.timeout:g} s")
    print(f"attempts used      {dict(sorted(used.items()))} (per task, the outage not counted)")
    print(f"breaker outages    {len(outages)} recorded")
    for task in charged:  # why a task was charged: its attempts beside the outages
        print(f"charged            {task.id}:")
        for a in task.attempts:
            print(f"                   {a.outcome.value} {a.error_type} at {a.finished_at}")
    if charged:
        for o in outages:
            print(f"outage             {o.start} .. {o.end} {list(o.error_types)}")
    if healthy.served_at:
        during = healthy.rate(service.down_from, min(service.up_at, healthy.served_at[-1]))
        if args.shared_dependency:
            before = healthy.rate(service.down_from - args.before / 2, service.down_from)
            print(
                f"healthy handler    {during:.0f} tasks/s during the outage, {before:.0f} before "
                f"({during / before if before else 0:.2f})"
            )
        else:
            print(f"healthy handler    {during:.0f} tasks/s during the outage")


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at)) + f"{at % 1:.3f}"[1:]


if __name__ == "__main__":
    asyncio.run(main())
