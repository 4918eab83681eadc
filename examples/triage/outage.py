"""Build the gateway outage of the triage walkthrough on a real store, then serve the console.

    python examples/triage/outage.py                                  # in memory
    python examples/triage/outage.py --storage postgresql://rdq@localhost/rdq
    python examples/triage/outage.py --storage ... --serve            # then open the console

It starts an rdq server node whose worker runs the shop's handlers (examples/triage/shop.py),
submits 150 orders while the gateway is up (they succeed), then takes the gateway down and
submits 310 charges, 140 refunds and 50 receipts for phone orders: after three attempts each,
500 tasks are dead-lettered, in three groups (GatewayDown, GatewayTimeout, KeyError). The
gateway then comes back, so tasks redriven from the console succeed. With ``--serve`` the node
keeps running (Ctrl-C stops it) and prints where to log in.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).parent))

from shop import GATEWAY, app

import rdq
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq.spi import Storage

QUEUE = "payments"
HEALTHY, CHARGES, REFUNDS, RECEIPTS = 150, 310, 140, 50


@asynccontextmanager
async def serving(
    storage: Storage, token: str, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """An rdq node on ``storage`` working the shop's queues with its handlers; yields its base
    URL."""
    settings = ServerSettings(
        tokens=[TokenSpec(owner="alice", rights=["read", "submit", "admin"], token=token)],
        queues=[QUEUE, "emails"],
        host=host,
        port=port or 8080,  # the setting; uvicorn below binds the port asked for
        secure_cookies=False,
    )
    node = create_app(settings, storage=storage, engine_app=app)
    config = uvicorn.Config(node, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        bound = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        await task


async def wait_for(storage: Storage, field: str, expected: int, timeout: float) -> None:
    """Until the queue's stats count ``expected`` tasks in ``field``."""
    deadline = time.monotonic() + timeout
    while (found := getattr(await storage.stats(QUEUE), field)) < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {found} of {expected} tasks are {field}")
        await asyncio.sleep(0.2)


def sizes(scale: float = 1.0) -> dict[str, int]:
    """How many orders go through while the gateway is up, and how many charges, refunds and
    receipts fail during the outage (``scale`` shrinks the walkthrough's numbers)."""
    counts = {"healthy": HEALTHY, "charges": CHARGES, "refunds": REFUNDS, "receipts": RECEIPTS}
    return {name: max(1, round(count * scale)) for name, count in counts.items()}


async def build(storage: Storage, scale: float = 1.0) -> None:
    """Submit the orders through the gateway outage; return once they are dead (500 tasks at
    the default ``scale``, see :func:`sizes`)."""
    size = sizes(scale)
    client = rdq.Client(storage, app)
    stamp = secrets.token_hex(2)

    def order(n: int, **extra: object) -> dict[str, object]:
        return {
            "order_id": n,
            "amount_cents": 1000 + (n * 7919) % 90000,
            "currency": "EUR",
            **extra,
        }

    GATEWAY.up = True
    await client.submit_many(
        [
            rdq.Submission(
                "payments.charge_card",
                order(n),
                id=f"charge-{stamp}-{n}",
                headers={"tenant": "acme"},
            )
            for n in range(1, size["healthy"] + 1)
        ]
    )
    await wait_for(storage, "succeeded", size["healthy"], 300)
    GATEWAY.up = False
    first = size["healthy"] + 1
    submissions = [
        rdq.Submission("payments.charge_card", order(n), id=f"charge-{stamp}-{n}")
        for n in range(first, first + size["charges"])
    ]
    submissions += [
        rdq.Submission("payments.refund", order(n), id=f"refund-{stamp}-{n}")
        for n in range(first, first + size["refunds"])
    ]
    submissions += [
        rdq.Submission(
            "payments.send_receipt",
            order(n, customer={"id": f"c-{n}", "phone": "+49 30 1234567"}),
            id=f"receipt-{stamp}-{n}",
        )
        for n in range(first, first + size["receipts"])
    ]
    for start in range(0, len(submissions), 500):
        await client.submit_many(submissions[start : start + 500])
    dead = size["charges"] + size["refunds"] + size["receipts"]
    await wait_for(storage, "dlq_depth", dead, 600)
    GATEWAY.up = True  # the provider recovers: redriven tasks now succeed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=os.environ.get("RDQ_STORAGE", "memory://"))
    parser.add_argument("--serve", action="store_true", help="keep serving the console")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    token = os.environ.get("RDQ_TOKEN") or secrets.token_urlsafe(24)
    async with rdq.open_storage(args.storage) as storage:
        await storage.migrate()
        async with serving(storage, token, port=args.port if args.serve else 0) as url:
            started = time.monotonic()
            await build(storage)
            groups = await storage.dlq_groups(QUEUE)
            print(f"built in {time.monotonic() - started:.0f}s on {args.storage}:")
            for group in groups:
                print(f"  {group.count:4d} dead  {group.error_type:<16} {group.handler_ref}")
            if not args.serve:
                return
            print(f"\nconsole: {url}/ui  (token: {token})\nCtrl-C stops the node.")
            await asyncio.Event().wait()


if __name__ == "__main__":
    with suppress(KeyboardInterrupt):
        asyncio.run(main())
