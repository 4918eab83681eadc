"""A worker process of the benchmark: ``python -m bench.e2e._worker SYSTEM URL [options]``.

It speaks a line protocol with the harness. On its protocol output (the original stdout; the
systems' own prints and logs go to stderr) it writes ``READY`` once the system's worker is set
up, ``S <i> <monotonic_ns>`` when the handler of task ``i`` starts (only with
``--report-starts``), and ``DONE <peak RSS in KiB> <CPU seconds since GO>`` when the worker has
stopped. On stdin it
reads ``GO`` (start the worker) and ``STOP`` (stop it gracefully).

``time.monotonic_ns`` is CLOCK_MONOTONIC, one clock for every process of the machine, so the
harness can subtract its own submit times from the start times reported here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from bench.e2e.systems import load


def _protocol_stream() -> TextIO:
    """A private handle on stdout for the protocol; fd 1 is pointed at stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def _read_commands(loop: asyncio.AbstractEventLoop, go: asyncio.Event, stop: asyncio.Event) -> None:
    for line in sys.stdin:
        command = line.strip()
        if command == "GO":
            loop.call_soon_threadsafe(go.set)
        elif command == "STOP":
            break
    loop.call_soon_threadsafe(go.set)
    loop.call_soon_threadsafe(stop.set)


async def _main(args: argparse.Namespace, out: TextIO) -> None:
    def on_start(body: dict[str, Any]) -> None:
        if args.report_starts:
            out.write(f"S {body['i']} {time.monotonic_ns()}\n")

    _, worker_class = load(args.system)
    worker = worker_class(
        args.url, notify=args.notify, concurrency=args.concurrency, on_start=on_start
    )
    go, stop = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=_read_commands, args=(loop, go, stop), daemon=True).start()
    await worker.open()
    cpu_at_go = _cpu_seconds()
    try:
        out.write("READY\n")
        await go.wait()
        cpu_at_go = _cpu_seconds()
        if not stop.is_set():
            await worker.run(stop)
    finally:
        await worker.close()
    out.write(f"DONE {_peak_rss_kib()} {_cpu_seconds() - cpu_at_go:.6f}\n")


def _peak_rss_kib() -> int:
    """This process's peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries that over from the
    image before ``exec``, i.e. from the forked harness, whose RSS it would report."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    """Parse the command line and run one worker until STOP."""
    parser = argparse.ArgumentParser(prog="python -m bench.e2e._worker")
    parser.add_argument("system")
    parser.add_argument("url")
    parser.add_argument("--notify", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--report-starts", action="store_true")
    args = parser.parse_args()
    out = _protocol_stream()
    _, worker_class = load(args.system)
    if worker_class.event_loop == "uvloop":
        import uvloop

        uvloop.run(_main(args, out))
    else:
        asyncio.run(_main(args, out))
    out.flush()


if __name__ == "__main__":
    main()
