"""``rdq stats`` and ``rdq dlq …`` against a store directly and through a node over HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner

from rdq.audit import JsonLinesAuditSink
from rdq.cli import main
from rdq.server import create_app
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, node_settings


async def _fill(name: str, n: int) -> None:
    async with MemoryStorage(name=name) as store:
        for i in range(n):
            await store.enqueue(Envelope(id=f"t{i}", queue="q", handler_ref="h"))
        while claims := await store.claim_due("q", 1000, timedelta(seconds=60)):
            for claim in claims:
                now = datetime.now(UTC)
                index = int(claim.task.id[1:])
                await store.dead_letter(
                    claim.task.id,
                    claim.token,
                    Attempt(
                        number=1,
                        outcome=Outcome.FAILED,
                        error_type="Timeout" if index % 5 < 3 else "Boom",
                        error_message="it broke",
                        started_at=now,
                        finished_at=now,
                        worker_id="w",
                    ),
                )


async def _status(name: str, task_id: str) -> Status:
    async with MemoryStorage(name=name) as store:
        return (await store.get(task_id)).status


@pytest.fixture
def store_url() -> str:
    name = f"cli-{uuid.uuid4().hex}"
    asyncio.run(_fill(name, 5))
    return f"memory://{name}"


def rdq(*args: str) -> tuple[int, str]:
    """Run ``rdq ARGS``; return the exit code and stdout (stderr too when it failed)."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def test_list_show_and_stats_on_a_store(store_url: str) -> None:
    code, out = rdq("dlq", "list", "q", "--storage", store_url, "--json")
    assert code == 0, out
    assert [t["id"] for t in json.loads(out)["tasks"]] == ["t0", "t1", "t2", "t3", "t4"]
    code, out = rdq(
        "dlq",
        "list",
        "q",
        "--storage",
        store_url,
        "--error-type",
        "Timeout",
        "--limit",
        "2",
        "--all",
        "--json",
    )
    assert [t["id"] for t in json.loads(out)["tasks"]] == ["t0", "t1", "t2"]
    code, out = rdq("dlq", "list", "q", "--storage", store_url)
    assert code == 0 and "t4" in out and "it broke" in out
    code, out = rdq("dlq", "show", "t1", "--storage", store_url, "--json")
    assert json.loads(out)["attempts"][0]["error_type"] == "Timeout"
    code, out = rdq("dlq", "show", "t1", "--storage", store_url)
    assert code == 0 and "Timeout" in out
    code, out = rdq("stats", "q", "--storage", store_url, "--json")
    assert json.loads(out)["queues"][0]["dlq_depth"] == 5


def test_dlq_show_and_tasks_show_are_one_command(store_url: str) -> None:
    """``rdq dlq show`` is ``rdq tasks show`` under a second name: the same options and help,
    the same answer for a task in any status."""
    helps = [
        CliRunner().invoke(main, [*group, "show", "--help"]).output
        for group in (["dlq"], ["tasks"])
    ]
    assert helps[0].replace(" dlq show ", " tasks show ") == helps[1]
    for group in ("dlq", "tasks"):
        code, out = rdq(group, "show", "t1", "--storage", store_url, "--json")
        assert code == 0 and json.loads(out)["status"] == "DEAD"


def test_redrive_by_filter_on_a_store_is_audited(store_url: str, tmp_path: Path) -> None:
    name = store_url.removeprefix("memory://")
    code, out = rdq(
        "dlq", "redrive", "q", "--error-type", "Timeout", "--dry-run", "--storage", store_url
    )
    assert code == 0 and "3" in out
    assert asyncio.run(_status(name, "t0")) == Status.DEAD
    audit_log = tmp_path / "audit.jsonl"
    code, out = rdq(
        "dlq",
        "redrive",
        "q",
        "--error-type",
        "Timeout",
        "--yes",
        "--reason",
        "deploy 12",
        "--actor",
        "ops@laptop",
        "--audit-log",
        str(audit_log),
        "--storage",
        store_url,
        "--json",
    )
    assert code == 0, out
    assert json.loads(out) == {
        "action": "redrive",
        "queue": "q",
        "count": 3,
        "dry_run": False,
        "done": True,
        "skipped": [],
        "hint": None,
        "matched": 3,
        "gone": 0,
    }
    assert asyncio.run(_status(name, "t0")) == Status.PENDING
    assert asyncio.run(_status(name, "t3")) == Status.DEAD
    (record,) = JsonLinesAuditSink(audit_log).read()
    assert (record.actor, record.count, record.reason) == ("ops@laptop", 3, "deploy 12")


def test_bad_invocations_fail_with_one_clear_line(store_url: str) -> None:
    code, out = rdq("dlq", "show", "nope", "--storage", store_url)
    assert code == 1 and out.strip() == "Error: task 'nope' not found"
    code, out = rdq("dlq", "purge", "q", "--storage", store_url, "--yes")
    assert code == 2 and "give task ids" in out
    code, out = rdq("dlq", "purge", "q", "t1", "--error-type", "X", "--storage", store_url)
    assert code == 2
    code, out = rdq("dlq", "purge", "q", "t1", "--storage", store_url)
    assert code == 2 and "--yes" in out, "no silent purge when nobody can confirm"
    code, out = rdq("dlq", "list", "q", "--storage", store_url, "--after", "2026-01-01T00:00")
    assert code == 2 and "offset" in out
    code, out = rdq("dlq", "list", "bad queue", "--storage", store_url)
    assert code == 1 and "queue" in out
    code, out = rdq("dlq", "list", "q", "--server", "http://127.0.0.1:9")
    assert code == 2 and "--token" in out


@pytest.fixture
def node_url(store_url: str) -> Iterator[str]:
    """A real node serving the same named memory store, in a thread with its own loop."""
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


def test_the_same_commands_through_a_node(node_url: str, store_url: str) -> None:
    name = store_url.removeprefix("memory://")
    remote = ("--server", node_url, "--token", ADMIN_TOKEN)
    code, out = rdq("stats", *remote, "--json")
    assert code == 0, out
    assert {q["queue"] for q in json.loads(out)["queues"]} == {"default", "q"}
    code, out = rdq("stats", "q", *remote)
    assert code == 0 and "q" in out
    code, out = rdq("dlq", "list", "q", *remote, "--handler-ref", "h", "--json")
    assert len(json.loads(out)["tasks"]) == 5
    code, out = rdq("dlq", "show", "t2", *remote, "--json")
    assert json.loads(out)["id"] == "t2"
    code, out = rdq("dlq", "purge", "q", "t3", "t4", "missing", *remote, "--yes")
    assert code == 4 and "2 task(s) of queue q purged" in out, "done in part: exit 4"
    assert "1 of the 3 named task(s) cannot be purged:\n  missing: not found" in out
    code, out = rdq("dlq", "redrive", "q", "--all", *remote, "--yes", "--json")
    assert json.loads(out)["count"] == 3
    assert asyncio.run(_status(name, "t0")) == Status.PENDING
    code, out = rdq(
        "dlq", "redrive", "q", "--all", "--server", node_url, "--token", READ_TOKEN, "--yes"
    )
    assert code == 1
    assert out.strip() == (
        "Error: server answered HTTP 403: forbidden: the token of 'reader' (role 'viewer') may not "
        "do this: acting on tasks, queues and breakers needs the operator or admin role"
    )
    code, out = rdq("dlq", "list", "q", "--server", node_url, "--token", "bad-token-000000000")
    assert code == 1 and "HTTP 401" in out
    code, out = rdq("dlq", "list", "q", "--server", "http://127.0.0.1:9", "--token", "x" * 20)
    assert code == 1 and "cannot reach" in out


def test_a_large_selection_by_ids() -> None:
    name = f"cli-{uuid.uuid4().hex}"
    asyncio.run(_fill(name, 1500))
    code, out = rdq(
        "dlq",
        "redrive",
        "q",
        *[f"t{i}" for i in range(1200)],
        "--storage",
        f"memory://{name}",
        "--yes",
    )
    assert code == 0 and "1200 task(s)" in out
