"""Dedup keys through every surface: ``POST /v1/tasks`` with a ``dedup_key`` (the outcome in
``RDQ-Outcome``, 201 or 200, 409 for a key of another queue), ``rdq submit`` on a store and
through a node, the key on the task and the outcome in the audit trail (API, CLI, console)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from litestar.testing import AsyncTestClient

from rdq.cli import main
from rdq.spi import AuditFilter, Page
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, SUBMIT_TOKEN
from .test_cli_dlq import node_url as node_url  # a real node on the named store
from .test_ui import _login

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def rdq_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.asyncio
async def test_the_api_folds_a_submission_under_its_key_and_says_how(
    client: AsyncTestClient[Any], memory_store: MemoryStorage
) -> None:
    body = {"handler_ref": "sync", "queue": "orders", "payload": {"v": 1}, "delay": 600}
    first = await client.post("/v1/tasks", json={**body, "dedup_key": "order-7"}, headers=AUTH)
    assert first.status_code == 201 and first.headers["rdq-outcome"] == "added"
    holder = first.json()["id"]
    assert first.json()["headers"]["rdq-dedup-key"] == "order-7"
    replaced = await client.post(
        "/v1/tasks",
        json={**body, "payload": {"v": 2}, "dedup_key": "order-7", "dedup_mode": "replace"},
        headers=AUTH,
    )
    assert replaced.status_code == 200 and replaced.headers["rdq-outcome"] == "replaced"
    assert replaced.json()["id"] == holder and replaced.json()["payload"] == {"v": 2}
    skipped = await client.post("/v1/tasks", json={**body, "dedup_key": "order-7"}, headers=AUTH)
    assert skipped.headers["rdq-outcome"] == "skipped" and skipped.json()["id"] == holder
    elsewhere = await client.post(
        "/v1/tasks", json={**body, "queue": "other", "dedup_key": "order-7"}, headers=AUTH
    )
    assert elsewhere.status_code == 409
    producer = {"Authorization": f"Bearer {SUBMIT_TOKEN}"}
    hidden = await client.post(
        "/v1/tasks", json={**body, "queue": "other", "dedup_key": "order-7"}, headers=producer
    )
    assert hidden.status_code == 409 and "orders" not in hidden.text, "no queue named"
    bad = await client.post(
        "/v1/tasks", json={**body, "dedup_key": "k", "dedup_mode": "extend"}, headers=AUTH
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "dedup_window"
    assert (await memory_store.stats("orders")).pending == 1
    entries, _ = await memory_store.list_audit(AuditFilter(action="dedup"), Page())
    assert sorted(e.selector["outcome"] for e in entries) == ["replaced", "skipped"]
    assert {e.actor for e in entries} == {"alice (admin)"}
    await _login(client, ADMIN_TOKEN)
    audit = await client.get("/ui/audit")
    assert "replaced into" in audit.text and "key <code>order-7</code>" in audit.text
    task_page = await client.get(f"/ui/tasks/{holder}")
    assert "rdq-dedup-key" in task_page.text and "order-7" in task_page.text


@pytest.fixture
def store_url() -> str:
    return f"memory://dedup-{uuid.uuid4().hex}"


@pytest.mark.parametrize("through", ["store", "node"])
def test_rdq_submit_folds_under_a_key_on_a_store_and_through_a_node(
    store_url: str, through: str, request: pytest.FixtureRequest
) -> None:
    where = (
        ("--storage", store_url)
        if through == "store"
        else ("--server", request.getfixturevalue("node_url"), "--token", ADMIN_TOKEN)
    )
    code, out = rdq_cli(
        "submit", "sync", '{"v": 1}', "--queue", "q", "--dedup-key", "k-1", "--delay", "60", *where
    )
    assert code == 0 and out.startswith("added task "), out
    code, out = rdq_cli(
        "submit", "sync", '{"v": 2}', "--queue", "q", "--dedup-key", "k-1", "--json", *where
    )
    answer = json.loads(out)
    assert answer["outcome"] == "skipped" and answer["task"]["payload"] == {"v": 1}
    code, out = rdq_cli(
        "submit",
        "sync",
        '{"v": 3}',
        "--queue",
        "q",
        "--dedup-key",
        "k-1",
        "--dedup-mode",
        "debounce",
        "--delay",
        "5",
        *where,
    )
    assert code == 0 and out.startswith("replaced the payload and headers of task"), out
    code, out = rdq_cli("audit", "--action", "dedup", "--queue", "q", *where)
    assert code == 0 and "skipped into" in out and "replaced into" in out
    code, out = rdq_cli("submit", "sync", "not json", *where)
    assert code == 2 and "not JSON" in out
