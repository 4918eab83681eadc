"""The scene of docs/operations.md, "A dependency goes down" and "A worker stops": a store in
which the payment provider's outage has tripped a breaker, a worker was killed with twenty tasks
in flight, one queue is paused and another has no worker at all.

    python examples/triage/fleet.py --storage sqlite:///fleet.db --serve
    python examples/triage/fleet.py --storage postgresql://rdq@localhost/rdq --serve

What is real and what is staged:

* real: the charges, refunds and receipts that died while the gateway was down (outage.py's
  build, at a fifth of its size, run by the node's worker); an ``rdq worker`` process working
  ``exports`` that claims twenty long exports and is killed with SIGKILL (the registry and the
  leases say the rest: the console flags it within its heartbeats); a pause of ``emails`` by
  hand, through the admin layer, audited;
* staged: the breaker of ``handler:payments.charge_card``, written as its trip would write it
  (tripped four minutes ago by one of the dead charges, a cool-down of fifteen minutes, so it
  stays open while you look), the charges it holds since, the hour of per-minute counts behind the
  sparklines, and the invoices of a billing service whose workers were never deployed.

The killed worker needs a store another process can open (not ``memory://``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from outage import QUEUE, build, serving
from shop import GATEWAY, app

import rdq
from rdq import flow
from rdq.admin import TaskAdmin
from rdq.config import Breaker
from rdq.spi import Control, Counts, DLQFilter, Page, Storage

HERE = Path(__file__).parent
KEY = "handler:payments.charge_card"
STUCK = 20
"""Exports in flight on the worker that is killed."""
HELD = 40
"""Charges submitted since the breaker tripped: it holds them."""


@dataclass
class Scene:
    """What the walkthrough points at."""

    killed: str
    """The id of the killed worker."""
    flagged_after: float
    """Seconds from its SIGKILL to the console's first ``silent`` for it."""
    heartbeat: float


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting: {what}")
        await asyncio.sleep(0.1)


async def kill_a_worker(storage: Storage, url: str) -> Scene:
    """Start ``rdq worker shop:app --queue exports``, let it claim :data:`STUCK` exports, kill
    it with SIGKILL, and time how long until the registry calls it silent."""
    client = rdq.Client(storage, app)
    stamp = secrets.token_hex(2)
    await client.submit_many(
        [
            rdq.Submission(
                "exports.csv",
                {"report": "orders", "day": n, "seconds": 3600},
                id=f"export-{stamp}-{n:02d}",
            )
            for n in range(1, STUCK + 1)
        ]
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RDQ_STORAGE", "RDQ_STORAGE_URL")}
    worker = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "rdq", "worker", "shop:app", "--queue", "exports"],
        *["--storage", url, "--log-level", "WARNING"],
        cwd=HERE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    admin = TaskAdmin(storage)

    async def claimed() -> bool:
        return (await storage.stats("exports")).in_flight >= STUCK

    await _until("the worker claims its exports", claimed)
    _, views = await admin.workers()
    (mine,) = [w for w in views if w.pid == worker.pid]
    worker.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await worker.wait()

    async def silent() -> bool:
        _, views = await admin.workers()
        return any(w.id == mine.id and w.status == "silent" for w in views)

    await _until("the registry calls the killed worker silent", silent)
    return Scene(mine.id, time.monotonic() - killed_at, mine.heartbeat)


async def trip_the_breaker(storage: Storage) -> None:
    """The breaker of :data:`KEY`, open as a trip four minutes ago writes it, the charges it
    holds since, and an hour of per-minute counts: healthy, then the outage."""
    now = await storage.now()
    charges = DLQFilter(handler_ref="payments.charge_card")
    dead, _ = await storage.dlq_list(QUEUE, charges, Page(limit=1))
    sample = dead[0].id if dead else None
    tripped = flow.trip(
        Control(queue=QUEUE, key=KEY),
        now - timedelta(minutes=4),
        Breaker(cooldown=900),
        started=now - timedelta(minutes=4, seconds=40),
        error_types=["shop.GatewayDown"],
        error_type="shop.GatewayDown",
        error_message="502 Bad Gateway from api.psp.example (charging order 17)",
        sample_task=sample,
    )
    await storage.put_control(tripped, expected_version=0)
    client = rdq.Client(storage, app)
    stamp = secrets.token_hex(2)
    await client.submit_many(
        [
            rdq.Submission(
                "payments.charge_card",
                {"order_id": 9000 + n, "amount_cents": 4200},
                id=f"held-{stamp}-{n:02d}",
            )
            for n in range(1, HELD + 1)
        ]
    )
    minute = now.replace(second=0, microsecond=0)
    await storage.add_counts(
        [
            Counts(
                queue=QUEUE,
                minute=minute - timedelta(minutes=m),
                succeeded=38 + (m * 7) % 9 if m > 5 else (2 if m == 5 else 0),
                failed=(m * 5) % 3 if m > 5 else (24 if m == 5 else 0),
                deferred=0 if m > 4 else 30,
            )
            for m in range(1, 60)
        ]
        + [
            Counts(queue="emails", minute=minute - timedelta(minutes=m), succeeded=12)
            for m in range(1, 60)
        ]
    )


async def pause_and_strand(storage: Storage) -> None:
    """``emails`` paused by hand with newsletters waiting; ``invoices`` with due tasks that no
    worker serves."""
    await TaskAdmin(storage).pause(
        "emails", actor="alice", reason="mail provider migration, CHG-2291"
    )
    stamp = secrets.token_hex(2)
    client = rdq.Client(storage, app)
    await client.submit_many(
        [
            rdq.Submission(
                "emails.newsletter",
                {"issue": 13, "seconds": 1},
                id=f"newsletter-13-{stamp}-{n:03d}",
            )
            for n in range(1, 31)
        ]
    )
    billing = rdq.Client(storage)  # another service's producer: its handlers are not ours
    await billing.submit_many(
        [
            rdq.Submission(
                "billing.send_invoice",
                {"invoice": f"INV-{n:05d}"},
                queue="invoices",
                id=f"inv-{stamp}-{n:03d}",
            )
            for n in range(1, 26)
        ]
    )


async def stage(storage: Storage, url: str) -> Scene:
    """The whole scene on ``storage`` (``url`` opens it from another process); a node must
    be working ``payments`` and ``emails`` on it (outage.serving)."""
    await build(storage, scale=0.2)  # real: what died while the gateway was down
    GATEWAY.up = True
    await trip_the_breaker(storage)
    await pause_and_strand(storage)
    return await kill_a_worker(storage, url)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=rdq.storage_url())
    parser.add_argument("--serve", action="store_true", help="keep serving the console")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    if args.storage.startswith("memory:"):
        raise SystemExit("the killed worker is another process: name a file or server store")
    token = os.environ.get("RDQ_TOKEN") or secrets.token_urlsafe(24)
    async with rdq.open_storage(args.storage) as storage:
        await storage.migrate()
        async with serving(storage, token, port=args.port if args.serve else 0) as url:
            scene = await stage(storage, args.storage)
            print(
                f"worker {scene.killed} killed with {STUCK} exports in flight: flagged silent "
                f"{scene.flagged_after:.1f} s later (heartbeat {scene.heartbeat:.0f} s)"
            )
            if args.serve:
                print(f"\nconsole: {url}/ui  (token: {token})\nCtrl-C stops the node.")
                await asyncio.Event().wait()


if __name__ == "__main__":
    with suppress(KeyboardInterrupt):
        asyncio.run(main())
