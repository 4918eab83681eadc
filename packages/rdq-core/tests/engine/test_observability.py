"""Metrics, maintenance (stats gauges, task_ttl purge, on simulated time) and logging
configuration."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import urllib.request
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

import rdq
from rdq import logging as rdq_logging
from rdq import metrics
from rdq.spi import Status

from ._virtual import START, settle, until, virtual_store, worker
from .conftest import fast_worker, running, wait_status


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return value or 0.0


@pytest.mark.asyncio
async def test_worker_counts_claims_attempts_and_dead_letters(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=2, backoff=rdq.Backoff.fixed(0.05))

    @app.handler("ok", queue=queue)
    async def ok(payload: object) -> None:
        return None

    @app.handler("bad", queue=queue)
    async def bad(payload: object) -> None:
        raise ValueError("bad")

    client = rdq.Client(storage, app)
    a = await client.submit("ok")
    b = await client.submit("bad")
    async with running(fast_worker(app, storage)):
        await wait_status(storage, a.id, Status.SUCCEEDED)
        await wait_status(storage, b.id, Status.DEAD)
    assert sample("rdq_claims_total", queue=queue) == 3
    assert sample("rdq_attempts_total", queue=queue, outcome="SUCCEEDED") == 1
    assert sample("rdq_attempts_total", queue=queue, outcome="FAILED") == 2
    assert sample("rdq_dead_lettered_total", queue=queue) == 1
    assert sample("rdq_handler_duration_seconds_count", queue=queue) == 3
    assert sample("rdq_worker_in_flight", queue=queue) == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_maintenance_publishes_stats_and_purges_succeeded_after_ttl(queue):
    """On simulated time: a success is purged once its ``task_ttl`` has passed, at the first
    purge after that (every ``purge_interval``, looked at every ``stats_interval``), not
    before; the stats gauges follow the store."""
    app = rdq.App()
    app.queue(queue, task_ttl=600, max_attempts=1)

    @app.handler("ok", queue=queue)
    async def ok(payload: object) -> None:
        return None

    @app.handler("bad", queue=queue)
    async def bad(payload: object) -> None:
        raise rdq.Permanent("no")

    async with virtual_store() as storage:
        client = rdq.Client(storage, app)
        done = await client.submit("ok")
        await client.submit("bad")
        await client.submit("ok", delay=86_400)
        options = {"maintenance": True, "stats_interval": 15.0, "purge_interval": 60.0}
        async with worker(app, storage, **options):
            succeeded = await settle(storage, done.id, Status.SUCCEEDED)

            async def purged() -> bool:
                try:
                    await storage.get(done.id)
                except rdq.NotFound:
                    return True
                return False

            purged_at = START + timedelta(seconds=await until(purged, 5.0))

            async def gauges() -> bool:
                return (
                    sample("rdq_dlq_depth", queue=queue) == 1
                    and sample("rdq_pending", queue=queue) == 1
                )

            await until(gauges, 1.0)
    assert succeeded.completed_at is not None
    kept = (purged_at - succeeded.completed_at).total_seconds()
    assert 600 <= kept <= 600 + 60 + 15 + 5, f"purged {kept}s after it succeeded"
    assert sample("rdq_succeeded_purged_total", queue=queue) == 1


def test_metrics_are_served_over_http():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.start_http_server(port)
    metrics.STALE_CLAIMS.labels("served-q").inc()
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'rdq_stale_claims_total{queue="served-q"} 1.0' in body
    for name in (
        "rdq_redriven_total",
        "rdq_purged_total",
        "rdq_oldest_pending_age_seconds",
        "rdq_in_flight",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in body


def test_json_logging_binds_the_given_fields():
    stream = io.StringIO()
    rdq_logging.configure(json=True, level="INFO", stream=stream)
    try:
        log = rdq_logging.get_logger("rdq.worker")
        log.debug("hidden")
        log.info("retry scheduled", task_id="t1", queue="q", attempt=2, worker_id="w")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        import structlog

        structlog.reset_defaults()
    assert len(lines) == 1
    assert lines[0]["event"] == "retry scheduled"
    assert {k: lines[0][k] for k in ("task_id", "queue", "attempt", "worker_id")} == {
        "task_id": "t1",
        "queue": "q",
        "attempt": 2,
        "worker_id": "w",
    }
    with pytest.raises(ValueError, match="unknown log level"):
        rdq_logging.configure(level="LOUD")


EMBEDDING_APP = """
import asyncio, json, rdq

app = rdq.App()
app.queue("q", max_attempts=2, backoff=rdq.Backoff.fixed(0.01))

@app.handler("bad", queue="q")
async def bad(payload):
    raise KeyError("missing")

async def main():
    async with rdq.open_storage("memory://embedded") as storage:
        sub = await rdq.Client(storage, app).submit("bad")
        worker = rdq.Worker(app, storage, maintenance=False)
        running = asyncio.create_task(worker.run())
        while (await storage.get(sub.id)).status != "DEAD":
            await asyncio.sleep(0.02)
        worker.stop()
        await running

asyncio.run(main())
print(json.dumps({"ok": True}))
"""


def test_an_application_that_embeds_rdq_keeps_its_stdout(tmp_path):
    """A program that embeds a client and a worker and configures no logging: its standard
    output holds only what it printed; rdq's warnings go through stdlib logging (stderr)."""
    script = tmp_path / "embedding.py"
    script.write_text(EMBEDDING_APP)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"ok": true}\n'
    assert "dead-lettered" in result.stderr
    assert "KeyError: 'missing'" in result.stderr  # the attempt's traceback
