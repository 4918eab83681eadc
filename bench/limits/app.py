"""The application the limits benchmark's ``rdq worker`` processes run.

Queue ``LIMITS_QUEUE`` (concurrency ``LIMITS_CONCURRENCY`` per worker) with the limits of
``LIMITS_MODE``:

- ``none``: no limit;
- ``loose-concurrency``: ``Concurrency(1000, key="psp")`` — a limit that never binds (the
  workers have fewer slots);
- ``loose-concurrency-queue``: ``Concurrency(1000)`` on the queue (its key ``*``);
- ``loose-rate``: ``Rate(1_000_000, burst=1_000_000, key="psp")`` — the same for a rate;
- ``loose-rate-queue``: that rate on the queue;
- ``concurrency``: ``Concurrency(LIMITS_N, key="psp")``;
- ``rate``: ``Rate(LIMITS_N, per=1.0, key="psp")`` (its burst at the default, a tenth).

``LIMITS_LEASE``: the queue's lease (default 30 s). Handler ``run`` sleeps
``payload["sleep"]`` seconds and appends the monotonic times it began and ended
(``CLOCK_MONOTONIC``, one clock for every process of the machine), and when the store claimed
the task (its clock), to a file of its process's own in ``LIMITS_STAMPS``: what the handlers
saw, read by the benchmark afterwards.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import rdq

QUEUE = os.environ.get("LIMITS_QUEUE", "limits")
MODE = os.environ.get("LIMITS_MODE", "none")
N = int(os.environ.get("LIMITS_N", "20"))
LOOSE = 1_000_000
LOOSE_CONCURRENCY = 1000


def limits_of(mode: str, n: int) -> list[rdq.Concurrency | rdq.Rate]:
    """The limits a mode declares (see the module's docstring)."""
    limits: dict[str, list[rdq.Concurrency | rdq.Rate]] = {
        "none": [],
        "loose-concurrency": [rdq.Concurrency(LOOSE_CONCURRENCY, key="psp")],
        "loose-concurrency-queue": [rdq.Concurrency(LOOSE_CONCURRENCY)],
        "loose-rate": [rdq.Rate(LOOSE, burst=LOOSE, key="psp")],
        "loose-rate-queue": [rdq.Rate(LOOSE, burst=LOOSE)],
        "concurrency": [rdq.Concurrency(n, key="psp")],
        "rate": [rdq.Rate(n, per=1.0, key="psp")],
    }
    return limits[mode]


def build_app(queue: str, mode: str, n: int, concurrency: int, lease: float = 30.0) -> rdq.App:
    """The app of one run; the benchmark's submitting client uses the same, so its tasks get
    the limits' keys."""
    built = rdq.App()
    built.queue(
        queue, concurrency=concurrency, lease=lease, timeout=3600, limits=limits_of(mode, n)
    )
    built.register("run", run, queue=queue)
    return built


_stamps: Any = None


def _out() -> Any:
    global _stamps
    if _stamps is None:
        folder = Path(os.environ.get("LIMITS_STAMPS", "/tmp/limits-stamps"))
        _stamps = (folder / f"{os.getpid()}.txt").open("a", buffering=1)
    return _stamps


async def run(payload: dict[str, float], ctx: rdq.TaskContext) -> None:
    began = time.monotonic()
    pause = payload.get("sleep", 0.0)
    if pause:
        await asyncio.sleep(pause)
    claimed = ctx.task.claimed_at.timestamp() if ctx.task.claimed_at is not None else 0.0
    _out().write(f"{began:.6f} {time.monotonic():.6f} {claimed:.6f}\n")


app = build_app(
    QUEUE,
    MODE,
    N,
    int(os.environ.get("LIMITS_CONCURRENCY", "10")),
    float(os.environ.get("LIMITS_LEASE", "30")),
)
