"""A chaos-test worker process: claims through the storage SPI, logs every claim, completes.

Run by :func:`rdq_compliance.chaos.run_chaos` as
``python -m rdq_compliance._chaos_worker URL QUEUE LOGFILE --lease SECONDS``. It loops until
it receives SIGTERM (or is SIGKILLed, which is the point): claim one task with a short lease,
append a ``claim`` line to its log (fsync'd before the handler starts), "handle" the task for a
random few tens of milliseconds, complete it, and append ``done`` (or ``stale`` when the lease
was lost). Times in the log are the storage's clock, as returned by ``claim_due``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
from datetime import UTC, datetime, timedelta
from typing import IO

from rdq import open_storage
from rdq.errors import StaleClaim, StorageUnavailable
from rdq.spi import Attempt, Outcome, Storage


def _log(out: IO[str], *fields: str) -> None:
    out.write(" ".join(fields) + "\n")
    out.flush()
    os.fsync(out.fileno())


async def _idle(storage: Storage, queue: str) -> None:
    if storage.capabilities().notify:
        await storage.wait_due(queue, 0.2)
    else:
        await asyncio.sleep(0.05)


async def _work(url: str, queue: str, out: IO[str], lease: timedelta, handler_ms: float) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    pid = str(os.getpid())
    async with open_storage(url) as storage:
        _log(out, "start", pid)
        while not stop.is_set():
            try:
                claimed = await storage.claim_due(queue, 1, lease)
            except StorageUnavailable:
                await asyncio.sleep(0.1)
                continue
            if not claimed:
                await _idle(storage, queue)
                continue
            claim = claimed[0]
            expires = claim.task.lease_expires_at
            assert expires is not None
            started = expires - lease
            _log(
                out,
                "claim",
                claim.task.id,
                claim.token,
                started.isoformat(),
                expires.isoformat(),
                pid,
            )
            await asyncio.sleep(random.uniform(0.3, 1.7) * handler_ms / 1000)
            attempt = Attempt(
                number=claim.task.attempt_count + 1,
                outcome=Outcome.SUCCEEDED,
                started_at=started,
                finished_at=datetime.now(UTC),
                worker_id=f"chaos-{pid}",
            )
            try:
                await storage.complete(claim.task.id, claim.token, attempt)
            except StaleClaim:
                _log(out, "stale", claim.task.id, claim.token, pid)
                continue
            _log(out, "done", claim.task.id, claim.token, pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("logfile")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--handler-ms", type=float, default=60.0)
    args = parser.parse_args()
    with open(args.logfile, "a", encoding="utf-8") as out:
        asyncio.run(
            _work(args.url, args.queue, out, timedelta(seconds=args.lease), args.handler_ms)
        )


if __name__ == "__main__":
    main()
