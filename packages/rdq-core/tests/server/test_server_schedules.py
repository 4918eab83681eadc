"""``[schedules.NAME]`` in a node's TOML file: ``rdq server`` runs them as ``rdq worker`` does,
one task per tick however many nodes share the store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

import rdq
from rdq.server import load_settings
from rdq.spi import Page, Status, TaskFilter

from .conftest import Receiver, wait_until
from .test_cli_server import _free_port, _wait_ready

TOKEN = "schedules-token-0123456789"
RDQ = str(Path(sys.executable).parent / "rdq")

NODE_CONFIG = """
[server]
storage = "{storage}"
port = {port}
queues = ["{queue}"]
migrate = true

[[server.tokens]]
owner = "ops"
rights = ["read", "submit", "admin"]
token_env = "OPS_TOKEN"

[server.callbacks]
allow_hosts = ["127.0.0.1"]
allow_networks = ["127.0.0.1/32"]

[queues.{queue}]
max_attempts = 1

[schedules.beat-{queue}]
handler = "{hook}"
every = 1
queue = "{queue}"
payload = {{ kind = "beat" }}

[schedules.elsewhere-{queue}]
handler = "{hook}"
every = 1
queue = "not-worked-{queue}"
"""


def test_the_settings_hand_schedules_to_the_app(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        NODE_CONFIG.format(
            storage="memory://", port=8080, queue="q", hook="http://127.0.0.1:1/hook"
        )
    )
    _, engine = load_settings(path, env={"OPS_TOKEN": TOKEN})
    app = rdq.App()
    app.configure(engine)
    beat = app.schedules["beat-q"]
    assert (beat.handler, beat.queue, beat.payload) == (
        "http://127.0.0.1:1/hook",
        "q",
        {"kind": "beat"},
    )
    assert app.queue_config("q").max_attempts == 1
    path.write_text(path.read_text() + "\n[schedules.broken]\nevery = 0\n")
    _, engine = load_settings(path, env={"OPS_TOKEN": TOKEN})
    with pytest.raises(rdq.ConfigError) as info:
        rdq.App().configure(engine)
    assert info.value.key == "schedules.broken.every"


@pytest.mark.asyncio
async def test_two_server_nodes_run_each_tick_of_a_toml_schedule_once(
    postgres_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    """Two ``rdq server`` processes on one PostgreSQL, the same file with a 1-second schedule
    whose handler is a callback: every tick while both run is one task, enqueued by one node
    and delivered once; the schedule on a queue no node works warns and does not run."""
    queue = f"sched-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "OPS_TOKEN": TOKEN, "RDQ_SERVER_TOKENS": ""}
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        for name in ("a", "b"):
            config, port = tmp_path / f"{name}.toml", _free_port()
            config.write_text(
                NODE_CONFIG.format(
                    storage=postgres_url, port=port, queue=queue, hook=receiver.url()
                )
            )
            process = _start_node(config, env)
            nodes.append(process)
            await asyncio.to_thread(_wait_ready, f"http://127.0.0.1:{port}", process)
        async with rdq.open_storage(postgres_url) as storage:
            both_up = await storage.now()

            def ticks_since_both_up() -> list[str]:
                return [
                    r.headers["X-Rdq-Task-Id"]
                    for r in receiver.received("/hook")
                    if _tick(r.headers["X-Rdq-Task-Id"]) > both_up
                ]

            async def three_ticks() -> bool:
                return len(set(ticks_since_both_up())) >= 3

            await wait_until(three_ticks, what="three ticks delivered while both nodes run")
    finally:
        for process in nodes:
            process.send_signal(signal.SIGTERM)
        logs = [process.communicate(timeout=60)[1].decode() for process in nodes]
    for process, log in zip(nodes, logs, strict=True):
        assert process.returncode in (0, -signal.SIGTERM), log

    delivered = Counter(r.headers["X-Rdq-Task-Id"] for r in receiver.received("/hook"))
    assert all(task_id.startswith(f"schedule:beat-{queue}:") for task_id in delivered)
    assert set(delivered.values()) == {1}, delivered
    lines = [json.loads(line) for log in logs for line in log.splitlines()]
    enqueued = Counter(
        line["task_id"] for line in lines if line["event"] == "schedule: tick enqueued"
    )
    assert set(enqueued.values()) == {1}, enqueued  # one node enqueued each tick
    assert set(delivered) <= set(enqueued)
    warned = [line for line in lines if "does not run a schedule" in line["event"]]
    assert {(w["schedule"], w["queue"]) for w in warned} == {
        (f"elsewhere-{queue}", f"not-worked-{queue}")
    }
    assert len(warned) == 2  # once per node
    async with rdq.open_storage(postgres_url) as storage:
        done, _ = await storage.list_tasks(
            queue, TaskFilter(status=Status.SUCCEEDED), Page(limit=1000, include_attempts=True)
        )
        assert done, "no scheduled task succeeded: the checks below would prove nothing"
        for task in done:
            assert [a.outcome for a in task.attempts] == ["SUCCEEDED"], task.id
            assert task.headers["rdq-schedule"] == f"beat-{queue}"
        assert not (await storage.stats(f"not-worked-{queue}")).pending


def _start_node(config: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [RDQ, "server", "--config", str(config), "--log-json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _tick(task_id: str) -> datetime:
    """The tick time of a schedule task id ``schedule:<name>:<YYYYmmddTHHMMSSZ>``."""
    return datetime.strptime(task_id.rsplit(":", 1)[1], "%Y%m%dT%H%M%S%z")
