"""``rdq queue``, ``rdq breakers``, ``rdq breaker``, ``rdq workers``, ``rdq tasks retry-now``
and ``rdq dlq redrive --rate`` / ``redrives`` / ``--cancel``: against a store directly and
through a node over HTTP, with the same answers; a foreground paced redrive stopped by
Ctrl-C is cancelled; a store without the capabilities is named with what it lacks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
import uvicorn
from click.testing import CliRunner

from rdq import flow
from rdq.admin import TaskAdmin
from rdq.cli import main
from rdq.config import Breaker
from rdq.plugins import open_storage
from rdq.server import _upkeep, create_app
from rdq.spi import (
    Attempt,
    Capabilities,
    Control,
    Envelope,
    Outcome,
    Page,
    Status,
    Storage,
    TaskFilter,
    WorkerInfo,
)
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings

RDQ = str(Path(sys.executable).parent / "rdq")


async def _fill(store: Storage, queue: str = "pay", dead: int = 5, waiting: int = 3) -> None:
    for n in range(dead):
        await store.enqueue(Envelope(id=f"d{n}", queue=queue, handler_ref="charge"))
    for claim in await store.claim_due(queue, 1000, timedelta(seconds=30)):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="GatewayDown",
            error_message="502",
            started_at=now,
            finished_at=now,
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)
    for n in range(waiting):
        task = Envelope(id=f"w{n}", queue=queue, handler_ref="charge")
        await store.enqueue(task, delay=timedelta(hours=1))
    now = await store.now()
    tripped = flow.trip(
        Control(queue=queue, key="handler:charge"),
        now,
        Breaker(cooldown=60),
        started=now,
        error_types=["GatewayDown"],
        error_type="GatewayDown",
        error_message="502 Bad Gateway",
        sample_task="d0",
    )
    await store.put_control(tripped, expected_version=0)
    await store.heartbeat_worker(
        WorkerInfo(id="box:7:w", host="box", queues=[queue], concurrency=4, held=1)
    )


async def _named(name: str) -> None:
    async with MemoryStorage(name=name) as store:
        await _fill(store)


def _store(name: str) -> MemoryStorage:
    return MemoryStorage(name=name)


async def _status(name: str, task_id: str) -> Status:
    async with _store(name) as store:
        return (await store.get(task_id)).status


@pytest.fixture
def store_url() -> str:
    name = f"cli-flow-{uuid.uuid4().hex}"
    asyncio.run(_named(name))
    return f"memory://{name}"


def rdq(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


@pytest.fixture
def node_url(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(_upkeep, "INTERVAL", 0.3)
    app = create_app(node_settings(storage=store_url))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        thread.join(0.05)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def _targets(store_url: str, node_url: str | None) -> list[tuple[str, ...]]:
    found = [("--storage", store_url)]
    if node_url is not None:
        found.append(("--server", node_url, "--token", ADMIN_TOKEN))
    return found


def test_pause_and_resume_on_a_store_audited(store_url: str) -> None:
    where = ("--storage", store_url, "--actor", "ops@laptop")
    code, out = rdq("queue", "pause", "pay", "--handler", "charge", "--reason", "PSP", *where)
    assert code == 0, out
    assert "paused handler:charge of queue pay by ops@laptop: PSP" in out
    assert "rdq queue resume pay --handler charge" in out
    code, out = rdq("queue", "pause", "pay", *where, "--json")
    assert json.loads(out)["key"] == "*" and json.loads(out)["paused"] is True
    code, out = rdq("queue", "resume", "pay", *where)
    assert code == 0 and "the whole queue pay is not paused" in out
    code, out = rdq("queue", "pause", "pay", "--handler", "a", "--dependency", "b", *where)
    assert code == 2 and "not both" in out
    code, out = rdq("audit", "--storage", store_url, "--json")
    actions = [(e["action"], e["actor"]) for e in json.loads(out)["entries"]]
    assert actions == [("resume", "ops@laptop"), ("pause", "ops@laptop"), ("pause", "ops@laptop")]


def test_the_same_commands_directly_and_through_a_node(store_url: str, node_url: str) -> None:
    answers = []
    for where in _targets(store_url, node_url):
        code, out = rdq("breakers", *where, "--json")
        assert code == 0, out
        (charge,) = [b for b in json.loads(out)["breakers"] if b["key"] == "handler:charge"]
        answers.append((charge["state"], charge["error_type"], charge["held"], charge["queue"]))
        code, out = rdq("breakers", "pay", *where)
        assert code == 0 and "handler:charge" in out and "GatewayDown" in out
        assert "open" in out and "rdq breaker close" in out
        code, out = rdq("workers", *where, "--json")
        body = json.loads(out)
        ids = {w["id"]: w for w in body["workers"]}
        assert ids["box:7:w"]["queues"] == ["pay"] and body["unsupported"] is None
        code, out = rdq("workers", *where)
        assert code == 0 and "box:7:w" in out and "1/4" in out
    assert answers[0] == answers[1] == ("open", "GatewayDown", 3, "pay")
    code, out = rdq("workers", "--storage", store_url, "--json")
    nodes = [w for w in json.loads(out)["workers"] if w["kind"] == "node"]
    assert len(nodes) == 1, "the node registers itself"

    remote = ("--server", node_url, "--token", ADMIN_TOKEN)
    code, out = rdq(
        "breaker", "close", "handler:charge", "--queue", "pay", "--reason", "ok", *remote
    )
    assert code == 0 and "is closed, let go at 3/s rising" in out
    code, out = rdq(
        "breaker", "open", "dep:psp", "--queue", "pay", "--storage", store_url, "--yes", "--json"
    )
    assert code == 1 and "unknown dependency 'psp'" in out, "no task or worker names psp yet"
    code, out = rdq(
        "breaker",
        "open",
        "dep:psp",
        "--queue",
        "pay",
        "--storage",
        store_url,
        "--yes",
        "--json",
        "--force",
    )
    assert json.loads(out)["state"] == "open" and json.loads(out)["by"]
    code, out = rdq("breaker", "open", "psp", "--queue", "pay", *remote, "--yes")
    assert code == 2 and "KEY is handler:REF or dep:NAME" in out
    code, out = rdq("breaker", "open", "dep:psp", "--queue", "pay", *remote)
    assert code == 2 and "--yes" in out, "no silent open when nobody can confirm"
    code, out = rdq("queue", "pause", "pay", "--dependency", "psp", *remote, "--json")
    paused = json.loads(out)
    assert paused["key"] == "dep:psp" and paused["pause"]["by"] == "alice (admin)"


def test_retry_now_by_ids_and_by_filter(store_url: str, node_url: str) -> None:
    name = store_url.removeprefix("memory://")
    local, remote = _targets(store_url, node_url)
    code, out = rdq("tasks", "retry-now", "pay", "--handler-ref", "charge", "--dry-run", *local)
    assert code == 0 and "retry now would act on 3 task(s) of queue pay (dry run)" in out
    code, out = rdq("tasks", "retry-now", "pay", "w0", "nope", "--yes", *remote, "--json")
    assert code == 4, "done in part: one of the named tasks is not there"
    assert json.loads(out) == {
        "action": "retry_now",
        "queue": "pay",
        "count": 1,
        "dry_run": False,
        "done": True,
        "skipped": [{"id": "nope", "reason": "not_found"}],
        "hint": None,
    }
    code, out = rdq("tasks", "retry-now", "pay", "--all", "--yes", "--reason", "PSP back", *local)
    assert code == 0 and "2 task(s) of queue pay made due now" in out
    code, out = rdq("tasks", "retry-now", "pay", "--all", *local)
    assert code == 3 and "0 tasks match; nothing done" in out, "nothing left: nothing asked"

    async def due() -> int:
        async with _store(name) as store:
            return len(
                [
                    t
                    for t in (
                        await store.list_tasks(
                            "pay", TaskFilter(status=Status.PENDING), Page(limit=100)
                        )
                    )[0]
                    if t.next_attempt_at and t.next_attempt_at <= await store.now()
                ]
            )

    assert asyncio.run(due()) == 3


def test_a_paced_redrive_in_the_foreground_and_through_a_node(
    store_url: str, node_url: str
) -> None:
    name = store_url.removeprefix("memory://")
    local, remote = _targets(store_url, node_url)
    code, out = rdq("dlq", "redrive", "pay", "d0", "d1", "--rate", "50/s", "--dry-run", *local)
    assert code == 0 and "at most 50/s" in out and "dry run" in out
    code, out = rdq(
        "dlq", "redrive", "pay", "d0", "d1", "--rate", "100/s", "--yes", "--reason", "x", *local
    )
    assert code == 0, out
    assert "paced redrive" in out and "done: 2 of 2 task(s) redriven" in out
    assert asyncio.run(_status(name, "d0")) == Status.PENDING
    code, out = rdq(
        "dlq", "redrive", "pay", "--all", "--rate", "600/min", "--yes", *remote, "--json"
    )
    assert code == 0, out
    op = json.loads(out)["operation"]
    assert (op["status"], op["done"], op["total"], op["rate"]) == ("done", 3, 3, 10)
    code, out = rdq("dlq", "redrives", *remote, "--json")
    listed = json.loads(out)["redrives"]
    assert [r["status"] for r in listed] == ["done", "done"] and listed[0]["id"] == op["id"]
    code, out = rdq("dlq", "redrives", "pay", *local)
    assert code == 0 and op["id"] in out and "3/3" in out
    code, out = rdq("dlq", "redrive", "pay", "--all", "--rate", "fast", "--yes", *local)
    assert code == 1 and "rate: must be a positive rate" in out
    code, out = rdq("dlq", "redrive", "pay", "--all", "--detach", "--yes", *local)
    assert code == 2 and "--detach goes with --rate" in out


def test_a_detached_redrive_is_driven_by_a_running_node(store_url: str, node_url: str) -> None:
    name = store_url.removeprefix("memory://")
    code, out = rdq(
        "dlq", "redrive", "pay", "--all", "--rate", "50/s", "--detach", "--yes",
        "--storage", store_url, "--json",
    )  # fmt: skip
    assert code == 0, out
    body = json.loads(out)
    op = body["operation"]
    assert op["driver"] is None and op["status"] == "running"
    assert len(body["drivers"]) == 1 and body["drivers"][0].startswith("node:")
    for _ in range(600):
        code, out = rdq("dlq", "redrives", "pay", "--storage", store_url, "--json")
        (found,) = json.loads(out)["redrives"]
        if found["status"] == "done":
            break
        time.sleep(0.1)
    assert found["status"] == "done" and found["driver"] == body["drivers"][0]
    assert asyncio.run(_status(name, "d4")) == Status.PENDING


def test_detached_without_a_node_says_so_and_is_cancelled(store_url: str) -> None:
    where = ("--storage", store_url)
    code, out = rdq("dlq", "redrive", "pay", "--all", "--rate", "5/s", "--detach", "--yes", *where)
    assert code == 0, out
    assert "no live node on this store drives paced redrives" in out
    op_id = out.split("paced redrive ", 1)[1].split()[0]
    code, out = rdq("dlq", "redrive", "--cancel", op_id, "--queue", "pay", *where)
    assert code == 0 and f"paced redrive {op_id} of queue pay cancelled" in out
    assert "0 of 5 task(s) redriven; the rest stay in the DLQ" in out
    code, out = rdq("dlq", "redrive", "--cancel", "abcdef", "--queue", "pay", *where)
    assert code == 1 and "no paced redrive 'abcdef' in queue 'pay'" in out
    code, out = rdq("dlq", "redrive", "--cancel", op_id, *where)
    assert code == 2 and "name the queue" in out


async def _sqlite_fill(url: str) -> None:
    async with open_storage(url) as store:
        await store.migrate()
        await _fill(store, dead=40, waiting=0)


async def _sqlite_ops(url: str) -> list[dict[str, object]]:
    async with open_storage(url) as store:
        return [msgspec.to_builtins(op) for op in await TaskAdmin(store).paced_redrives("pay")]


def test_ctrl_c_cancels_a_foreground_paced_redrive(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    asyncio.run(_sqlite_fill(url))
    proc = subprocess.Popen(
        [RDQ, "dlq", "redrive", "pay", "--all", "--rate", "4/s", "--yes", "--storage", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for _ in range(600):
            ops = asyncio.run(_sqlite_ops(url))
            if ops and int(ops[0]["done"]) >= 2:  # type: ignore[call-overload]
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "cancelled by" in out and "the rest stay in the DLQ" in out, out + err
    (op,) = asyncio.run(_sqlite_ops(url))
    assert op["status"] == "cancelled" and 2 <= int(op["done"]) < 40  # type: ignore[call-overload]


class OldStore(MemoryStorage):
    """The memory store as a store of contract version 2."""

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities(), control=False, worker_registry=False, counters=False
        )


def test_a_store_without_the_capabilities_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of contract version 2 has no breakers, registry or paced redrives: the
    listings say so in one line; the actions fail saying what it lacks."""
    from rdq import plugins

    monkeypatch.setattr(plugins, "open_storage", lambda url, **_: OldStore())
    where = ("--storage", "memory://")
    code, out = rdq("breakers", *where)
    assert code == 0 and "no breakers to show: OldStore does not offer the 'control'" in out
    code, out = rdq("workers", *where, "--json")
    assert "'worker_registry' capability" in json.loads(out)["unsupported"]
    code, out = rdq("dlq", "redrives", *where)
    assert code == 0 and "no paced redrives to show" in out
    code, out = rdq("queue", "pause", "pay", *where)
    assert code == 1 and "OldStore does not offer the 'control' capability" in out
