"""The PostgreSQL ceiling for the contention benchmark, measured with ``pgbench`` (no Python).

The same shapes as :mod:`rdq_compliance.bench` at their most minimal: a SKIP LOCKED claim of one
row (or ten) over a fresh 256-row pool whose rows stay due (each claim's lease ends at once),
in autocommit, and a single-row durable INSERT. What PostgreSQL allows on this machine, right
now, is the bar our figures are read against (the disk's commit speed swings from run to run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["find_pgbench", "pgbench_ceiling"]

SCHEMA = "rdq_bench_ceiling"

SETUP = f"""
DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.pool (
    id integer PRIMARY KEY,
    status text NOT NULL,
    due_at timestamptz NOT NULL,
    token uuid,
    lease_expires_at timestamptz
);
CREATE INDEX pool_due ON {SCHEMA}.pool (due_at) WHERE status IN ('PENDING', 'IN_FLIGHT');
CREATE TABLE {SCHEMA}.ins (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    payload json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
"""

REFILL = (
    f"TRUNCATE {SCHEMA}.pool",
    f"""INSERT INTO {SCHEMA}.pool (id, status, due_at)
    SELECT n, 'PENDING', now() - interval '1 hour' FROM generate_series(1, 256) AS n""",
    f"VACUUM ANALYZE {SCHEMA}.pool",
)

CLAIM = """
UPDATE {schema}.pool
SET status = 'IN_FLIGHT', token = gen_random_uuid(), lease_expires_at = now(), due_at = now()
WHERE id IN (
    SELECT id FROM {schema}.pool
    WHERE status IN ('PENDING', 'IN_FLIGHT') AND due_at <= now()
    ORDER BY due_at
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)
RETURNING id;
"""

INSERT = f"""
INSERT INTO {SCHEMA}.ins (queue, payload) VALUES ('bench', '{{"n": 1}}');
"""

_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")


def find_pgbench() -> str | None:
    """The pgbench binary on PATH or beside the local PostgreSQL binaries, or None."""
    found = shutil.which("pgbench")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True):
        return str(candidate)
    return None


def libpq_url(url: str) -> str:
    """``url`` without rdq's query parameters (libpq refuses unknown ones)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql", query=""))


def _psql(url: str, *statements: str) -> None:
    """Run ``statements`` one by one in autocommit (asyncpg comes with rdq-postgres)."""
    import asyncio

    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def _pgbench(pgbench: str, url: str, script: str, clients: int, seconds: float) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        result = subprocess.run(
            [
                pgbench,
                "-n",
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                str(min(clients, os.cpu_count() or 1)),
                "-T",
                str(max(1, round(seconds))),
                "-f",
                path,
                url,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 120,
        )
    finally:
        os.unlink(path)
    match = _TPS.search(result.stdout)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed: {result.stderr.strip() or result.stdout.strip()}")
    return float(match.group(1))


def pgbench_ceiling(
    url: str,
    *,
    claimants: Sequence[int],
    limits: Sequence[int],
    producers: Sequence[int],
    seconds: float,
    pgbench: str,
) -> dict[tuple[str, int, int], float]:
    """Run the ceiling workloads; return rows/s keyed by ``("claim", limit, clients)`` and
    ``("insert", 1, clients)``. Leaves nothing behind (its schema is dropped)."""
    target = libpq_url(url)
    out: dict[tuple[str, int, int], float] = {}
    _psql(target, SETUP)
    try:
        for limit in limits:
            script = CLAIM.format(schema=SCHEMA, limit=limit)
            for clients in claimants:
                _psql(target, *REFILL)
                tps = _pgbench(pgbench, target, script, clients, seconds)
                out[("claim", limit, clients)] = tps * limit
        for clients in producers:
            out[("insert", 1, clients)] = _pgbench(pgbench, target, INSERT, clients, seconds)
    finally:
        _psql(target, f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    return out
