"""The Node.js peers (graphile-worker, BullMQ): their setup, their producer/admin side and
their worker processes, all in ``bench/e2e/node``.

Setup: ``install()`` runs ``npm ci`` in ``bench/e2e/node`` (the versions pinned in its
``package.json`` and ``package-lock.json``, into its git-ignored ``node_modules``) unless that
install is already current; every Node system calls it when it opens.

The producer and admin side is one ``node main.mjs SYSTEM client URL`` process that answers
JSON lines (``NodeClient``). A round trip over its pipes costs ~0.15 ms on a busy 2-core
machine, so the enqueue phases run their loop inside it and time it there
(``enqueue_timed``), and a single enqueue answers with the CLOCK_MONOTONIC time it returned at,
which the latency phase takes as the submit time. The worker
processes are ``node main.mjs SYSTEM worker URL`` speaking the harness's worker protocol
themselves, so their RSS and CPU are Node's own.

Every worker process writes the task numbers whose handler it ran to a ledger directory
derived from the URL when it stops; ``NodeSystem.verify`` checks that each task ran exactly
once there, beside what the peer's own store says.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from bench.e2e import ledger
from bench.e2e.ledger import ledger_dir
from bench.e2e.systems import BenchSystem, BenchWorker, VerificationError

__all__ = [
    "NODE_DIR",
    "NodeSystem",
    "NodeWorker",
    "install",
    "installed_versions",
    "ledger_dir",
    "missing_tools",
]

NODE_DIR = Path(__file__).resolve().parent / "node"
_MAIN = NODE_DIR / "main.mjs"
_installed = False


def missing_tools() -> list[str]:
    """The tools of ``node`` and ``npm`` that are not on PATH."""
    return [tool for tool in ("node", "npm") if shutil.which(tool) is None]


def install() -> None:
    """``npm ci`` the pinned peers into ``bench/e2e/node/node_modules`` unless they are there
    and no older than the lock file (once per process)."""
    global _installed
    if _installed:
        return
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"the Node.js peers need {' and '.join(missing)} on PATH")
    marker = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            stdout=sys.stderr,  # stdout carries the harness's JSON lines
            check=True,
        )
    _installed = True


def installed_versions() -> dict[str, str]:
    """The installed versions of the packages ``package.json`` pins, and node's own (empty
    before the first install)."""
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    found = {}
    for name in pinned:
        manifest = NODE_DIR / "node_modules" / name / "package.json"
        if manifest.exists():
            found[name] = json.loads(manifest.read_text())["version"]
    if found and shutil.which("node"):
        version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
        found["node"] = version.stdout.strip().lstrip("v")
    return found


class NodeClient:
    """The ``client`` process of one Node system: one JSON request a line, one answer each."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, system: str, url: str) -> NodeClient:
        process = await asyncio.create_subprocess_exec(
            "node",
            str(_MAIN),
            system,
            "client",
            url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 24,
        )
        return cls(process)

    async def request(self, op: str, **arguments: Any) -> Any:
        """Send ``op`` with ``arguments``; return the answer's value or raise its error."""
        assert self._process.stdin is not None and self._process.stdout is not None
        async with self._lock:
            self._process.stdin.write(json.dumps({"op": op, **arguments}).encode() + b"\n")
            await self._process.stdin.drain()
            line = await self._process.stdout.readline()
        if not line:
            code = await self._process.wait()
            raise RuntimeError(f"the Node client exited ({code}) during {op!r}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"Node client, {op!r}: {answer['error']}")
        return answer["value"]

    async def close(self) -> None:
        """Close its stdin (it releases its connections and exits) and wait for it."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), 30)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()


class NodeSystem(BenchSystem):
    """The producer/admin side of a Node peer, through its ``client`` process.

    ``host_clock``: the peer stamps completions with the host's clock (BullMQ's
    ``finishedOn``), so ``db_now`` is the host clock; without it (graphile-worker deletes a
    completed job) both ends of a drain are the harness's."""

    host_clock = False
    harness_statements: ClassVar[dict[str, int] | None] = {
        "completed": 1,  # graphile-worker: one count of its job table (measured: 50, 51 commits)
        "db_now": 0,
        "last_completion": 0,
    }

    async def open(self, url: str) -> None:
        install()
        self._url = url
        self._ledger = ledger_dir(url)
        self._client = await NodeClient.start(self.name, url)

    async def reset(self) -> None:
        shutil.rmtree(self._ledger, ignore_errors=True)
        self._ledger.mkdir(parents=True)
        await self._client.request("reset")

    async def enqueue_one(self, body: dict[str, Any]) -> int:
        returned: int = await self._client.request("enqueue_one", body=body)
        return returned

    async def enqueue_timed(
        self, bodies: Sequence[dict[str, Any]], batch: int | None
    ) -> float | None:
        seconds: float = await self._client.request("enqueue_all", bodies=list(bodies), batch=batch)
        return seconds

    async def enqueue_many(self, bodies: Sequence[dict[str, Any]]) -> None:
        await self._client.request("enqueue_many", bodies=list(bodies))

    async def completed(self) -> int:
        value: int = await self._client.request("completed")
        return value

    async def db_now(self) -> datetime | None:
        return datetime.now(UTC) if self.host_clock else None

    async def last_completion(self) -> datetime | None:
        millis = await self._client.request("last_completion")
        return None if millis is None else datetime.fromtimestamp(millis / 1000, UTC)

    async def verify(self, expected: int) -> None:
        state = await self._client.request("state")
        problems: list[str] = list(state["problems"])
        if state["added"] != expected:
            problems.append(f"{state['added']} jobs added, expected {expected}")
        problems += ledger.problems(ledger.runs(self._ledger), expected)
        if problems:
            raise VerificationError(f"{self.name}: " + "; ".join(problems))

    async def unlogged_tables(self) -> list[str]:
        tables: list[str] = await self._client.request("unlogged")
        return tables

    async def close(self) -> None:
        await self._client.close()
        shutil.rmtree(self._ledger, ignore_errors=True)


class NodeWorker(BenchWorker):
    """A worker process of a Node peer: ``node main.mjs SYSTEM worker URL``. It runs no Python;
    the harness only asks it for its command line."""

    python = False
    polls = False

    @classmethod
    def command(
        cls, system: str, url: str, *, notify: bool, concurrency: int, report_starts: bool
    ) -> list[str]:
        if not notify:
            raise ValueError(f"{system} cannot turn its wake-ups off (--poll-systems)")
        command = [
            "node",
            str(_MAIN),
            system,
            "worker",
            url,
            f"--concurrency={concurrency}",
            f"--ledger={ledger_dir(url)}",
        ]
        if report_starts:
            command.append("--report-starts")
        return command

    async def open(self) -> None:
        raise NotImplementedError("a Node peer's worker runs in node (see NodeWorker.command)")

    async def run(self, stop: asyncio.Event) -> None:
        raise NotImplementedError("a Node peer's worker runs in node (see NodeWorker.command)")
