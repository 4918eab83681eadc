"""A chaos-test worker process: claims through the storage SPI, logs every claim, completes.

``python -m rdq_compliance._chaos_worker URL QUEUE LOGFILE --lease SECONDS`` runs one worker.
It loops until it receives SIGTERM (or is SIGKILLed, which is the point): claim one task with
a short lease, append a ``claim`` line to its log (fsync'd before the handler starts), "handle"
the task for a random few tens of milliseconds, complete it, and append ``done`` (or ``stale``
when the lease was lost). Times in the log are the storage's clock, as returned by
``claim_due``.

``python -m rdq_compliance._chaos_worker URL QUEUE --spawner --lease SECONDS`` is how
:func:`rdq_compliance.chaos.run_chaos` starts its workers: a spawner that imports rdq and the
store's driver once, then, for each log path it reads on stdin, forks a worker writing that
log and answers with the worker's pid. A fresh interpreter per worker spends most of a second
of CPU importing (several seconds of wall time on a loaded machine, for each of a dozen
workers); a fork starts at once, and runs the same code as a worker started on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import IO, NoReturn

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


def _run(url: str, queue: str, logfile: str, lease: float, handler_ms: float) -> None:
    with open(logfile, "a", encoding="utf-8") as out:
        asyncio.run(_work(url, queue, out, timedelta(seconds=lease), handler_ms))


def _forked(url: str, queue: str, logfile: str, lease: float, handler_ms: float) -> NoReturn:
    """The body of a forked worker: it never returns into the spawner's loop."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the spawner's pipes are not the worker's
        os.dup2(devnull, 1)
        random.seed()  # not the spawner's sequence, which every sibling would share
        _run(url, queue, logfile, lease, handler_ms)
        code = 0
    finally:
        os._exit(code)


def _spawner(url: str, queue: str, lease: float, handler_ms: float) -> None:
    """Fork a worker for each log path read on stdin; answer each with the worker's pid."""
    open_storage(url)  # imports the plugin and its driver here, once (it connects nothing)
    # fork only a single-threaded process; a plugin that started a thread gets interpreters
    forkable = threading.active_count() == 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    for line in sys.stdin:
        logfile = line.rstrip("\n")
        if not logfile:
            continue
        if forkable:
            pid = os.fork()
            if pid == 0:
                _forked(url, queue, logfile, lease, handler_ms)
        else:
            command = [sys.executable, "-m", "rdq_compliance._chaos_worker", url, queue, logfile]
            options = ["--lease", str(lease), "--handler-ms", str(handler_ms)]
            pid = subprocess.Popen([*command, *options], stdin=subprocess.DEVNULL).pid
        print(pid, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("logfile", nargs="?")
    parser.add_argument("--spawner", action="store_true", help="fork workers on request")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--handler-ms", type=float, default=60.0)
    args = parser.parse_args()
    if args.spawner:
        _spawner(args.url, args.queue, args.lease, args.handler_ms)
    elif args.logfile:
        _run(args.url, args.queue, args.logfile, args.lease, args.handler_ms)
    else:
        parser.error("give a LOGFILE, or --spawner")


if __name__ == "__main__":
    main()
