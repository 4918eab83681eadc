"""The PostgreSQL the benchmark runs on: a fresh throwaway cluster (durable settings) or a
server given by URL, with one database per system."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

import rdq
from rdq_compliance.servers import ServerUnavailable
from rdq_compliance.servers.postgres import LocalCluster, find_bindir

__all__ = [
    "Server",
    "database_url",
    "experiment_store",
    "process_tree_cpu",
    "quiesce",
    "server",
]

_CHECKED_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_connections",
    "server_version",
)


@dataclass
class Server:
    """A reachable PostgreSQL: its admin URL and the settings that matter for durability."""

    url: str
    throwaway: bool
    settings: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    """The postmaster's process id (throwaway clusters only)."""

    def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by the server's processes, or None if unknown."""
        return None if self.pid is None else process_tree_cpu(self.pid)


def process_tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of process ``root``, its reaped children and its live
    children, from /proc (Linux)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ppid, utime, stime, cutime, cstime = (int(fields[i]) for i in (1, 11, 12, 13, 14))
        if int(entry) == root:
            ticks += utime + stime + cutime + cstime
        elif ppid == root:
            ticks += utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


def database_url(url: str, database: str) -> str:
    """``url`` pointing at ``database`` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@contextlib.contextmanager
def server(url: str | None, *, stat_statements: bool = False) -> Iterator[Server]:
    """Yield the server at ``url``, or a fresh throwaway cluster from the local binaries
    (fsync and synchronous_commit on; with ``stat_statements``, pg_stat_statements loaded)."""
    if url:
        yield Server(url=url, throwaway=False)
        return
    bindir = find_bindir()
    if bindir is None:
        raise ServerUnavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql; pass --url")
    settings = {"fsync": "on", "synchronous_commit": "on"}
    if stat_statements:
        settings |= {
            "shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track": "all",
            "pg_stat_statements.track_planning": "on",
        }
    with LocalCluster(bindir, settings=settings) as cluster:
        pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        yield Server(url=cluster.url, throwaway=True, pid=pid)


async def prepare(target: Server, databases: list[str]) -> dict[str, str]:
    """Create a fresh database per name (dropped first if it exists); return their URLs.

    Also records the durability settings in ``target.settings`` and refuses to run when
    fsync or synchronous_commit is off (the figures would not be durable ones)."""
    conn = await asyncpg.connect(target.url)
    try:
        for name in _CHECKED_SETTINGS:
            target.settings[name] = str(await conn.fetchval(f"SHOW {name}"))
        for name in ("fsync", "synchronous_commit"):
            if target.settings[name] != "on":
                raise RuntimeError(f"{name} is {target.settings[name]!r}: not a durable server")
        urls = {}
        for name in databases:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
            urls[name] = database_url(target.url, name)
        return urls
    finally:
        await conn.close()


async def quiesce(url: str, database_url: str | None = None, timeout: float = 60.0) -> None:
    """Let the server settle before a measured phase, so one system's leftovers do not land in
    the next one's figure: ``VACUUM ANALYZE`` the system's database (like pgbench before a run,
    so an autovacuum triggered by the rows just enqueued does not land at a random point of the
    drain), a ``CHECKPOINT``, then wait (up to ``timeout`` seconds) until no autovacuum worker
    runs."""
    if database_url is not None:
        own = await asyncpg.connect(database_url)
        try:
            await own.execute("VACUUM ANALYZE")
        finally:
            await own.close()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CHECKPOINT")
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            running = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
            )
            if not running:
                return
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def experiment_store(url: str | None) -> AsyncIterator[tuple[Server, str, rdq.Storage]]:
    """What the SPI-level experiments (``bench.e2e.*_experiment``) run on: the server at
    ``url`` or a throwaway cluster, a fresh database ``bench_experiment`` on it, and an open
    rdq store with its schema migrated; yields ``(server, database URL, store)``."""
    with server(url) as target:
        urls = await prepare(target, ["bench_experiment"])
        database = urls["bench_experiment"]
        async with rdq.open_storage(database) as storage:
            await storage.migrate()
            yield target, database, storage
