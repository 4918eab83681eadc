"""What the claim's two probes cost: ``python -m bench.claim_probes``.

``claim_due()`` (migrations 0007-0009) runs two probes before it takes a task: the scan of
``task_claim_priority_idx`` for each of the 21 priorities (``priority = ANY (...)``, one index
descent each on PostgreSQL 15) and ``unrestricted(q)``, the look for a control that restricts
the queue. This benchmark measures, with ``pgbench`` (no Python client in the way), the claim as
shipped beside copies of it that drop one probe or both, on a durable throwaway cluster (or
``--url``):

* ``shipped``: ``claim_due()`` itself;
* ``one_priority``: the claim of a queue known to use priority 0 only (``priority = 0``);
* ``one_priority_no_control``: the same without the control probe;
* ``no_control``: the 21 priorities, without the control probe;
* ``ceiling``: the contention benchmark's minimal claim (``rdq_compliance.bench_pgbench``).

Each run claims fresh tasks (priority 0, a 10-minute lease) of a queue of its own, beside 20,000
tasks of another queue, for ``--seconds``; a queue that runs dry fails the run. Then idle
claims, as a worker makes them when a NOTIFY wakes it: a claim for 10 slots 25 ms after the
last, finding the one task just submitted (``--idle`` claims per variant, alternating), and the
same with none to find. The copies are made in the database from the text of the newest
migration that defines ``claim_due()``; the shipped code is untouched.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import tempfile
import time

import asyncpg

import rdq
from bench._claim import claim_due_source
from bench.e2e import cluster
from bench.e2e.systems import payload
from rdq_compliance.bench_pgbench import CLAIM, REFILL, SCHEMA, SETUP, find_pgbench, libpq_url

ALL_PRIORITIES = (
    "priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])"
)
CONTROL_PROBE = "AND rdq.unrestricted(q)"
LEASE_US = 600_000_000
TASKS_PER_RUN = {1: 100_000, 10: 300_000}
_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")


def _copies() -> dict[str, str | None]:
    """variant -> the CREATE FUNCTION of its copy of claim_due() (None: the shipped one)."""
    migration, source = claim_due_source()
    shipped = source.replace("{schema}", "rdq")
    if ALL_PRIORITIES not in shipped or CONTROL_PROBE not in shipped:
        raise RuntimeError(f"{migration} no longer has the probes this benchmark removes")

    def copy(name: str, priority: str, control: bool) -> str:
        made = shipped.replace("rdq.claim_due(", f"rdq.claim_{name}(", 1)
        made = made.replace(ALL_PRIORITIES, priority)
        return made if control else made.replace(CONTROL_PROBE, "")

    return {
        "shipped": None,
        "one_priority": copy("one_priority", "priority = 0", True),
        "one_priority_no_control": copy("one_priority_no_control", "priority = 0", False),
        "no_control": copy("no_control", ALL_PRIORITIES, False),
    }


def _function(variant: str) -> str:
    return "rdq.claim_due" if variant == "shipped" else f"rdq.claim_{variant}"


def _pgbench_binary() -> str:
    found = find_pgbench()
    if found is None:
        raise RuntimeError("no pgbench on PATH or under /usr/lib/postgresql/*/bin")
    return found


def _pgbench(url: str, script: str, clients: int, seconds: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        result = subprocess.run(
            [
                _pgbench_binary(),
                *("-n", "-M", "prepared", "-c", str(clients)),
                *("-j", str(min(clients, os.cpu_count() or 1)), "-T", str(seconds)),
                *("-f", f.name, url),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(f.name)
    match = _TPS.search(result.stdout)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed: {result.stderr.strip() or result.stdout.strip()}")
    return float(match.group(1))


async def _fill_statement(conn: asyncpg.Connection) -> str:
    """An INSERT that copies the queue ``template``'s tasks $2 times into queue $1."""
    columns = [
        row["column_name"]
        for row in await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'rdq'"
            " AND table_name = 'task' AND is_generated = 'NEVER' ORDER BY ordinal_position"
        )
    ]
    made = {"id": "t.id || '-' || $1 || '-' || g", "queue": "$1"}
    values = ", ".join(made.get(c, f"t.{c}") for c in columns)
    return (
        f"INSERT INTO rdq.task ({', '.join(columns)}) SELECT {values}"
        " FROM rdq.task AS t, generate_series(1, $2) AS g WHERE t.queue = 'template'"
    )


async def _throughput(
    conn: asyncpg.Connection, url: str, variants: list[str], args: argparse.Namespace
) -> None:
    fill = await _fill_statement(conn)
    await conn.execute(SETUP)
    rates: dict[tuple[int, int, str], list[float]] = {}
    runs = 0
    for round_ in range(args.rounds):
        for limit in args.limits:
            for clients in args.clients:
                order = [*variants, "ceiling"]
                if round_ % 2:
                    order.reverse()
                for variant in order:
                    runs += 1
                    queue = f"q{runs}"
                    if variant == "ceiling":
                        for statement in REFILL:
                            await conn.execute(statement)
                        script = CLAIM.format(schema=SCHEMA, limit=limit)
                    else:
                        await conn.execute(fill, queue, TASKS_PER_RUN[limit] // 1000)
                        await conn.execute("VACUUM ANALYZE rdq.task")
                        script = (
                            f"SELECT count(*) FROM {_function(variant)}"
                            f"('{queue}', {limit}, {LEASE_US}, 'bench');\n"
                        )
                    await conn.execute("CHECKPOINT")
                    tps = _pgbench(url, script, clients, args.seconds)
                    if variant == "ceiling":
                        rate = tps * limit
                    else:
                        counts = {
                            row["status"]: row["count"]
                            for row in await conn.fetch(
                                "SELECT status, count(*) FROM rdq.task WHERE queue = $1"
                                " GROUP BY status",
                                queue,
                            )
                        }
                        if not counts.get("PENDING"):
                            raise RuntimeError(f"{variant}: queue {queue} ran dry; a longer one")
                        rate = counts.get("IN_FLIGHT", 0) / args.seconds
                        await conn.execute("DELETE FROM rdq.task WHERE queue = $1", queue)
                    rates.setdefault((limit, clients, variant), []).append(rate)
                    print(
                        f"round {round_ + 1}, limit {limit}, {clients} clients, {variant}:"
                        f" {rate:,.0f} tasks/s",
                        flush=True,
                    )
    print("\nclaims, tasks/s (medians; the ratio to shipped):")
    for limit in args.limits:
        for clients in args.clients:
            base = statistics.median(rates[(limit, clients, "shipped")])
            cells = []
            for variant in [*variants, "ceiling"]:
                median = statistics.median(rates[(limit, clients, variant)])
                cells.append(f"{variant} {median:,.0f} ({median / base:.2f}x)")
            print(f"  limit {limit}, {clients} clients: " + " | ".join(cells))


async def _idle(
    storage: rdq.Storage, database: str, variants: list[str], claims: int, *, empty: bool
) -> None:
    client = rdq.Client(storage)
    conn = await asyncpg.connect(database)
    try:
        times: dict[str, list[float]] = {variant: [] for variant in variants}
        for i in range(claims):
            for variant in variants if i % 2 == 0 else list(reversed(variants)):
                queue = f"idle_{variant}"
                if not empty:
                    await client.submit("noop", payload(i), queue=queue)
                await asyncio.sleep(0.025)
                started = time.perf_counter()
                rows = await conn.fetch(
                    f"SELECT * FROM {_function(variant)}($1, $2, $3, $4)",
                    queue,
                    10,
                    LEASE_US,
                    "bench",
                )
                times[variant].append(time.perf_counter() - started)
                if len(rows) != (0 if empty else 1):
                    raise RuntimeError(f"{variant}: {len(rows)} tasks claimed")
        kind = "finding none" if empty else "finding the one just submitted"
        print(f"\nidle claims for 10 slots, {kind} (ms, p50 / p99):")
        for variant, measured in times.items():
            measured.sort()
            p50 = statistics.median(measured) * 1e3
            p99 = measured[int(0.99 * (len(measured) - 1))] * 1e3
            print(f"  {variant}: {p50:.3f} / {p99:.3f}")
    finally:
        await conn.close()


async def measure(args: argparse.Namespace) -> None:
    copies = _copies()
    variants = list(copies)
    async with cluster.experiment_store(args.url) as (_server, database, storage):
        client = rdq.Client(storage)
        for queue, count in (("other", 20_000), ("template", 1_000)):
            for start in range(0, count, 1000):
                await client.submit_many(
                    [
                        rdq.Submission("noop", payload(i), queue=queue)
                        for i in range(start, start + 1000)
                    ]
                )
        conn = await asyncpg.connect(database)
        try:
            for made in copies.values():
                if made is not None:
                    await conn.execute(made)
            await conn.execute("VACUUM ANALYZE rdq.task")
            if args.rounds:
                await _throughput(conn, libpq_url(database), variants, args)
        finally:
            await conn.close()
        if args.idle:
            await _idle(storage, database, variants, args.idle, empty=False)
            await _idle(storage, database, variants, args.idle, empty=True)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="an existing PostgreSQL (default: a throwaway cluster)")
    parser.add_argument("--limits", type=_ints, default=[1, 10], help="tasks per claim")
    parser.add_argument("--clients", type=_ints, default=[1, 4, 16], help="pgbench clients")
    parser.add_argument("--seconds", type=int, default=5, help="per pgbench run")
    parser.add_argument("--rounds", type=int, default=3, help="0: the idle claims only")
    parser.add_argument("--idle", type=int, default=300, help="idle claims per variant (0: none)")
    args = parser.parse_args()
    if any(limit not in TASKS_PER_RUN for limit in args.limits):
        parser.error(f"--limits: each one of {sorted(TASKS_PER_RUN)}")
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
