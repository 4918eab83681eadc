"""The scene of docs/operations.md, "A dependency goes down" and "A worker stops"
(examples/triage/fleet.py), staged for real on a SQLite file behind a node: a worker process
killed with SIGKILL while it holds 20 tasks is called silent within two of its heartbeats,
and the console shows it, the breaker, the pause and the queue no worker serves."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import rdq

EXAMPLE = Path(__file__).parents[4] / "examples" / "triage"

pytest.importorskip("rdq_sqlite")


@pytest.fixture(scope="module")
def fleet() -> Iterator[Any]:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import fleet as module

        yield module
    finally:
        sys.path.remove(str(EXAMPLE))


async def _console(base: str, token: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=base, timeout=60)
    form = (await client.get("/ui/login")).text
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', form)
    assert nonce is not None
    done = await client.post("/ui/login", data={"token": token, "login_csrf": nonce.group(1)})
    assert done.status_code == 303
    return client


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_killed_worker_is_flagged_and_the_scene_reads_as_the_docs_say(
    fleet: Any, tmp_path: Path
) -> None:
    from outage import serving

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    token = "fleet-operator-token-0123456789"
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        async with serving(storage, token) as base:
            scene = await fleet.stage(storage, url)
            assert scene.flagged_after <= 2 * scene.heartbeat + 2  # two heartbeats, and a poll
            console = await _console(base, token)
            try:
                overview = (await console.get("/ui")).text
                workers = (await console.get("/ui/workers")).text
                running = (await console.get("/ui/queues/exports?state=running")).text
                unserved = (await console.get("/ui/queues/invoices")).text
            finally:
                await console.aclose()
    assert "Breaker of handler payments.charge_card" in overview
    assert "40 task(s) held" in overview and "30 task(s) held" in overview
    assert re.search(r">20</[^>]+>\s*<[^>]+>held by silent workers", overview), overview
    assert "no live worker" in overview
    assert re.search(rf"{re.escape(scene.killed)}.*?silent for", workers, re.S)
    assert "Still holds 20 task(s)" in workers
    assert running.count("held by a silent worker") == 20
    assert "No live worker serves this queue." in unserved
