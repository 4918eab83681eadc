"""The API of the operator console: every queue, tasks in every status, cancel, DLQ groups and
group actions, tracebacks, and the audit trail shared by everyone on the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, auth

Client = AsyncTestClient[Litestar]
ADMIN = auth(ADMIN_TOKEN)
READ = auth(READ_TOKEN)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app/payments.py", line 42, in charge\n'
    "    gateway.charge(order)\n"
    "GatewayDown: 502 from gateway\n"
)


async def _dead(store: MemoryStorage, task_id: str, handler: str, error_type: str) -> None:
    await store.enqueue(Envelope(id=task_id, queue="pay", handler_ref=handler))
    for claim in await store.claim_due("pay", 100, timedelta(seconds=30), worker_id="w-7"):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type=error_type,
            error_message="502 from gateway",
            traceback=TRACEBACK,
            started_at=now,
            finished_at=now,
            worker_id="w-7",
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)


async def _outage(store: MemoryStorage) -> None:
    for i in range(5):
        await _dead(store, f"g{i}", "charge", "GatewayDown")
    for i in range(2):
        await _dead(store, f"k{i}", "receipt", "KeyError")


@pytest.mark.asyncio
async def test_every_queue_is_listed_even_ones_this_node_never_heard_of(
    client: Client, memory_store: MemoryStorage
) -> None:
    await memory_store.enqueue(Envelope(id="x", queue="elsewhere", handler_ref="h"))
    body = (await client.get("/v1/queues", headers=READ)).json()
    rows = {q["queue"]: q for q in body["queues"]}
    assert set(rows) == {"default", "elsewhere"}  # "default": the node works it
    assert rows["elsewhere"]["pending"] == 1 and rows["elsewhere"]["estimated"] == []
    assert rows["default"]["cancelled"] == 0


@pytest.mark.asyncio
async def test_tasks_in_each_status_with_paging(
    client: Client, memory_store: MemoryStorage
) -> None:
    for i in range(7):
        await memory_store.enqueue(Envelope(id=f"t{i}", queue="work", handler_ref="h"))
    await memory_store.claim_due("work", 2, timedelta(seconds=60), worker_id="worker-9")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"status": "PENDING", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/v1/queues/work/tasks", params=params, headers=READ)).json()
        seen.extend(t["id"] for t in body["tasks"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["t2", "t3", "t4", "t5", "t6"]
    running = (
        await client.get("/v1/queues/work/tasks", params={"status": "IN_FLIGHT"}, headers=READ)
    ).json()["tasks"]
    assert [(t["id"], t["claimed_by"]) for t in running] == [("t0", "worker-9"), ("t1", "worker-9")]
    assert all(t["lease_expires_at"] for t in running)
    stale = await client.get(
        "/v1/queues/work/tasks", params={"status": "DEAD", "cursor": "nope"}, headers=READ
    )
    assert stale.status_code == 400 and stale.json()["error"]["code"] == "stale_cursor"
    bad = await client.get("/v1/queues/work/tasks", params={"status": "LOST"}, headers=READ)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "status"


@pytest.mark.asyncio
async def test_a_task_shows_its_traceback(client: Client, memory_store: MemoryStorage) -> None:
    await _dead(memory_store, "g0", "charge", "GatewayDown")
    task = (await client.get("/v1/tasks/g0", headers=READ)).json()
    assert task["attempts"][-1]["traceback"] == TRACEBACK
    assert task["status"] == "DEAD"


@pytest.mark.asyncio
async def test_cancel_pending_and_running_tasks_audited(
    client: Client, memory_store: MemoryStorage
) -> None:
    for i in range(4):
        await memory_store.enqueue(Envelope(id=f"c{i}", queue="work", handler_ref="h"))
    (claim,) = await memory_store.claim_due("work", 1, timedelta(seconds=60), worker_id="w")
    url = "/v1/queues/work/tasks/cancel"
    dry = await client.post(url, json={"ids": ["c0", "c1", "zz"], "dry_run": True}, headers=ADMIN)
    assert dry.json() == {
        "action": "cancel",
        "queue": "work",
        "count": 2,
        "dry_run": True,
        "skipped": [{"id": "zz", "reason": "not_found"}],
    }
    assert (await memory_store.get("c1")).status == Status.PENDING
    reader = await client.post(url, json={"ids": ["c1"]}, headers=READ)
    assert reader.status_code == 403
    done = await client.post(
        url, json={"ids": ["c0", "c1"], "reason": "duplicate orders"}, headers=ADMIN
    )
    assert done.json()["count"] == 2
    assert (await memory_store.get(claim.task.id)).status == Status.CANCELLED
    by_filter = await client.post(
        url, json={"filter": {"status": "PENDING", "handler_ref": "h"}}, headers=ADMIN
    )
    assert by_filter.json()["count"] == 2
    assert (await memory_store.stats("work")).cancelled == 4
    listed = await client.get("/v1/queues/work/tasks", params={"status": "CANCELLED"}, headers=READ)
    assert {t["id"] for t in listed.json()["tasks"]} == {"c0", "c1", "c2", "c3"}
    for body, field in (
        ({"ids": ["c1"], "filter": {}}, "ids"),
        ({}, "ids"),
        ({"filter": {"status": "DEAD"}}, "filter.status"),
        ({"ids": []}, "ids"),
    ):
        response = await client.post(url, json=body, headers=ADMIN)
        assert response.status_code == 422, body
        assert response.json()["error"]["field"] == field, body
    audit = (await client.get("/v1/audit", params={"action": "cancel"}, headers=READ)).json()
    assert [(e["actor"], e["count"], e["reason"]) for e in audit["entries"]] == [
        ("alice (admin)", 2, None),
        ("alice (admin)", 2, "duplicate orders"),
    ]


@pytest.mark.asyncio
async def test_groups_then_redrive_one_group_and_purge_another(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _outage(memory_store)
    groups = (await client.get("/v1/queues/pay/dlq/groups", headers=READ)).json()
    assert [(g["handler_ref"], g["error_type"], g["count"]) for g in groups["groups"]] == [
        ("charge", "GatewayDown", 5),
        ("receipt", "KeyError", 2),
    ]
    gateway = {"filter": {"handler_ref": "charge", "error_type": "GatewayDown"}}
    dry = await client.post(
        "/v1/queues/pay/dlq/redrive", json={**gateway, "dry_run": True}, headers=ADMIN
    )
    assert dry.json()["count"] == 5
    await client.post(
        "/v1/queues/pay/dlq/redrive", json={**gateway, "reason": "gateway back"}, headers=ADMIN
    )
    keys = {"filter": {"handler_ref": "receipt", "error_type": "KeyError"}, "reason": "bug 7"}
    purged = await client.post("/v1/queues/pay/dlq/purge", json=keys, headers=ADMIN)
    assert purged.json()["count"] == 2
    assert (await client.get("/v1/queues/pay/dlq/groups", headers=READ)).json()["groups"] == []
    audit = (await client.get("/v1/audit", params={"queue": "pay"}, headers=READ)).json()
    assert [(e["action"], e["count"], e["selector"]) for e in audit["entries"]] == [
        ("purge", 2, {"filter": {"error_type": "KeyError", "handler_ref": "receipt"}}),
        ("redrive", 5, {"filter": {"error_type": "GatewayDown", "handler_ref": "charge"}}),
    ]


@pytest.mark.asyncio
async def test_the_audit_trail_pages_newest_first_and_filters(
    client: Client, memory_store: MemoryStorage
) -> None:
    for i in range(5):
        await memory_store.enqueue(Envelope(id=f"a{i}", queue="work", handler_ref="h"))
        await client.post(
            "/v1/queues/work/tasks/cancel",
            json={"ids": [f"a{i}"], "reason": f"r{i}"},
            headers=ADMIN,
        )
    reasons: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, "actor": "alice (admin)"}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/v1/audit", params=params, headers=READ)).json()
        reasons.extend(e["reason"] for e in body["entries"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert reasons == ["r4", "r3", "r2", "r1", "r0"]
    nobody = await client.get("/v1/audit", params={"actor": "mallory"}, headers=READ)
    assert nobody.json() == {"entries": [], "next_cursor": None}
    future = await client.get("/v1/audit", params={"after": "9999-01-01T00:00:00Z"}, headers=READ)
    assert future.json()["entries"] == []
