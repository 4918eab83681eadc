"""Moving up, measured: ``python -m bench.copy_up [--tasks 100000] [--url POSTGRES_URL]``.

Fills a fresh SQLite file with ``--tasks`` tasks with histories (a sixth each succeeded,
dead-lettered, cancelled after a failed attempt, rescheduled after one, still in flight and
pending; a quarter of the dead ones redriven), runs ``rdq copy`` from it to a fresh schema of
a PostgreSQL server (``--url``, else a throwaway cluster from the local binaries) as a user
runs it, then reads every task back from both stores and compares them field by field.
Prints the copy's wall time and rate, and the verification's outcome; exits 1 on any
difference. Figures are printed, never asserted: a benchmark is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._servers import postgres
from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome, Selector, Storage, encode_envelope

QUEUES = ("orders", "emails", "reports")
LEASE = timedelta(hours=1)


def _attempt(outcome: Outcome, error: str | None = None) -> Attempt:
    now = datetime.now(UTC)
    return Attempt(
        number=1,
        outcome=outcome,
        error_type=error,
        error_message=f"{error} happened" if error else None,
        started_at=now - timedelta(seconds=1),
        finished_at=now,
        worker_id="bench-w1",
        traceback="Traceback (most recent call last):\n  ...\n" if error else None,
    )


async def fill(store: Storage, tasks: int) -> list[str]:
    """``tasks`` tasks spread over :data:`QUEUES`, in every status; returns their ids."""
    ids = [f"{QUEUES[n % len(QUEUES)]}-{n:07d}" for n in range(tasks)]
    envelopes = [
        Envelope(
            id=task_id,
            queue=task_id.split("-", 1)[0],
            handler_ref=f"app.tasks:handler_{n % 5}",
            payload={"n": n, "customer": f"c-{n % 997}", "lines": [n % 7, n % 11]},
            headers={"trace": f"t-{n}"} if n % 2 else {},
            priority=(n % 5) - 2,
        )
        for n, task_id in enumerate(ids)
    ]
    for start in range(0, tasks, 1000):
        await store.enqueue_batch(envelopes[start : start + 1000])
    for queue in QUEUES:
        claimed = []
        while page := await store.claim_due(queue, 1000, LEASE, worker_id="bench-w1"):
            claimed.extend(page)
        for i, claim in enumerate(claimed):
            kind = i % 6
            if kind == 0:
                await store.complete(claim.task.id, claim.token, _attempt(Outcome.SUCCEEDED))
            elif kind == 1:
                await store.dead_letter(
                    claim.task.id, claim.token, _attempt(Outcome.PERMANENT, "app.Gone")
                )
            elif kind in (2, 3):
                await store.reschedule(
                    claim.task.id,
                    claim.token,
                    _attempt(Outcome.FAILED, "ConnectionError"),
                    datetime.now(UTC) + timedelta(hours=1),
                )
        for start in range(0, len(claimed), 6000):
            chunk = claimed[start : start + 6000]
            await store.cancel(queue, [c.task.id for i, c in enumerate(chunk) if i % 6 == 2])
        dead = [c.task.id for i, c in enumerate(claimed) if i % 6 == 1]
        for start in range(0, len(dead), 4000):
            await store.redrive(queue, Selector.by_ids(*dead[start : start + 4000 : 4]))
    return ids


async def compare(source_url: str, destination_url: str, ids: list[str]) -> int:
    """How many of ``ids`` differ between the two stores (field by field)."""
    differ = 0
    async with open_storage(source_url) as source, open_storage(destination_url) as target:
        for task_id in ids:
            mine, theirs = await source.get(task_id), await target.get(task_id)
            if encode_envelope(mine) != encode_envelope(theirs):
                differ += 1
    return differ


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.copy_up", description=__doc__)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--url", default=None, help="a PostgreSQL server (default: throwaway)")
    parser.add_argument("--batch", type=int, default=500, help="rdq copy --batch")
    args = parser.parse_args(argv)
    rdq = shutil.which("rdq") or str(Path(sys.executable).parent / "rdq")
    with tempfile.TemporaryDirectory(prefix="rdq-copy-up-") as tmp, postgres(args.url) as server:
        source_url = f"sqlite:///{Path(tmp) / 'rdq.db'}"
        schema = f"copy_up_{secrets.token_hex(3)}"
        separator = "&" if "?" in server else "?"
        destination_url = f"{server}{separator}schema={schema}"

        async def prepare() -> list[str]:
            async with open_storage(source_url, synchronous="NORMAL") as store:
                return await fill(store, args.tasks)

        started = time.monotonic()
        ids = asyncio.run(prepare())
        print(f"filled {len(ids):,} tasks in {time.monotonic() - started:.0f} s", file=sys.stderr)
        started = time.perf_counter()
        copied = subprocess.run(
            [
                rdq,
                "copy",
                "--from",
                source_url,
                "--to",
                destination_url,
                "--batch",
                str(args.batch),
            ],
            cwd=tmp,
            check=False,
        )
        seconds = time.perf_counter() - started
        print(
            f"rdq copy of {len(ids):,} tasks: {seconds:.1f} s, {len(ids) / seconds:,.0f} tasks/s, "
            f"exit {copied.returncode}"
        )
        differ = asyncio.run(compare(source_url, destination_url, ids))
        print(f"read back from both stores: {len(ids) - differ:,} identical, {differ:,} differ")
        if copied.returncode or differ:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
