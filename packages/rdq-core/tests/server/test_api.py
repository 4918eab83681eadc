"""The HTTP API over the in-memory store: submit, read, DLQ, errors, auth."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.audit import MemoryAuditSink
from rdq.errors import StorageUnavailable
from rdq.server import create_app
from rdq.spi import Attempt, AuditEntry, Outcome, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, SUBMIT_TOKEN, auth, node_settings

Client = AsyncTestClient[Litestar]
ADMIN = auth(ADMIN_TOKEN)


async def _kill(store: MemoryStorage, task_id: str, error_type: str = "Boom") -> None:
    """Dead-letter a submitted task the way a worker would."""
    task = await store.get(task_id)
    for claim in await store.claim_due(task.queue, 100, timedelta(seconds=30)):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.PERMANENT,
            error_type=error_type,
            error_message="no",
            started_at=now,
            finished_at=now,
            worker_id="w",
        )
        if claim.task.id == task_id:
            await store.dead_letter(task_id, claim.token, attempt)
        else:
            await store.reschedule(claim.task.id, claim.token, attempt, now)


async def _submit(client: Client, **body: Any) -> Any:
    body.setdefault("handler_ref", "send_email")
    return await client.post("/v1/tasks", json=body, headers=ADMIN)


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return dict(body["error"])


@pytest.mark.asyncio
async def test_submit_is_idempotent_by_id_and_keeps_unknown_fields(client: Client) -> None:
    first = await _submit(
        client,
        id="t1",
        queue="emails",
        payload={"to": "a@b"},
        headers={"k": "v"},
        future_field={"x": 1},
    )
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["id"] == "t1" and body["status"] == "PENDING" and body["queue"] == "emails"
    assert body["future_field"] == {"x": 1}
    again = await _submit(client, id="t1", queue="emails", payload={"other": True})
    assert again.status_code == 200
    assert again.json()["payload"] == {"to": "a@b"}
    conflict = await _submit(client, id="t1", queue="sms")
    assert conflict.status_code == 409
    assert _error(conflict)["code"] == "id_conflict"
    fetched = await client.get("/v1/tasks/t1", headers=auth(READ_TOKEN))
    assert fetched.status_code == 200
    assert fetched.json()["future_field"] == {"x": 1}


@pytest.mark.asyncio
async def test_submit_without_id_gets_one_and_delay_defers_it(
    client: Client, memory_store: MemoryStorage
) -> None:
    response = await _submit(client, delay=3600)
    assert response.status_code == 201
    task_id = response.json()["id"]
    assert uuid.UUID(task_id).version == 7 and len(task_id) == 32, "the client's kind of id"
    task = await memory_store.get(task_id)
    assert task.next_attempt_at is not None and task.created_at is not None
    assert task.next_attempt_at - task.created_at >= timedelta(seconds=3599)
    assert (await memory_store.stats("default")).oldest_pending_age is None


@pytest.mark.asyncio
async def test_get_missing_task_is_404(client: Client) -> None:
    response = await client.get("/v1/tasks/nope", headers=ADMIN)
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, "malformed_json"),
        (b"[1, 2]", 422, "body"),
        (b'{"handler_ref": 5}', 422, "handler_ref"),
        (b'{"queue": "q"}', 422, "handler_ref"),
        (b'{"handler_ref": "h", "id": ""}', 422, "id"),
        (b'{"handler_ref": "h", "queue": "bad queue"}', 422, "queue"),
        (b'{"handler_ref": "h", "delay": -1}', 422, "delay"),
        (b'{"handler_ref": "h", "headers": {"a": 1}}', 422, "headers"),
        (b'{"handler_ref": "h", "status": "DEAD"}', 422, "status"),
        (b'{"handler_ref": "http://169.254.169.254/x"}', 422, "handler_ref"),
    ],
)
async def test_bad_submissions_are_clear_4xx_and_store_nothing(
    client: Client, memory_store: MemoryStorage, body: bytes, status: int, field: str | None
) -> None:
    response = await client.post(
        "/v1/tasks", content=body, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    error = _error(response)
    if status == 400:
        assert error["code"] == field
    else:
        assert error["field"] == field, error
    stats = await memory_store.stats("default")
    assert stats.pending == 0 and (await memory_store.stats("q")).pending == 0


@pytest.mark.asyncio
async def test_oversized_body_is_413(client: Client) -> None:
    big = {"handler_ref": "h", "payload": "x" * (3 * 1024 * 1024)}
    response = await client.post("/v1/tasks", json=big, headers=ADMIN)
    assert response.status_code == 413, response.text
    assert _error(response)["code"] == "payload_too_large"


@pytest.mark.asyncio
async def test_auth_401_without_valid_token_403_without_right(client: Client) -> None:
    for headers in ({}, auth("wrong-token-0000000000"), {"Authorization": "Basic abc"}):
        response = await client.get("/v1/queues", headers=headers)
        assert response.status_code == 401
        assert _error(response)["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")
    response = await client.post("/v1/tasks", json={"handler_ref": "h"}, headers=auth(READ_TOKEN))
    assert response.status_code == 403
    response = await client.get("/v1/queues", headers=auth(SUBMIT_TOKEN))
    assert response.status_code == 403
    response = await client.post(
        "/v1/queues/default/dlq/purge", json={"ids": ["a"]}, headers=auth(READ_TOKEN)
    )
    assert response.status_code == 403
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.get("/metrics")).status_code == 401
    metrics = await client.get("/metrics", headers=auth(READ_TOKEN))
    assert metrics.status_code == 200 and "rdq_redriven" in metrics.text


@pytest.mark.asyncio
async def test_queues_and_stats(client: Client, memory_store: MemoryStorage) -> None:
    await _submit(client, id="a", queue="emails")
    await _submit(client, id="b", queue="emails")
    await _kill(memory_store, "b")
    response = await client.get("/v1/queues", headers=ADMIN)
    assert response.status_code == 200
    queues = {q["queue"]: q for q in response.json()["queues"]}
    assert set(queues) == {"default", "emails"}
    assert queues["emails"]["dlq_depth"] == 1 and queues["emails"]["pending"] == 1
    stats = await client.get("/v1/queues/emails/stats", headers=ADMIN)
    assert stats.json()["dlq_depth"] == 1
    bad = await client.get("/v1/queues/bad%20queue/stats", headers=ADMIN)
    assert bad.status_code == 422
    assert _error(bad)["field"] == "queue"


@pytest.mark.asyncio
async def test_dlq_listing_filters_and_pages(client: Client, memory_store: MemoryStorage) -> None:
    for i in range(7):
        await _submit(client, id=f"t{i}", handler_ref="h-even" if i % 2 == 0 else "h-odd")
        await _kill(memory_store, f"t{i}", "Timeout" if i < 3 else "Boom")
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2, "handler_ref": "h-even"}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/queues/default/dlq", params=params, headers=ADMIN)).json()
        seen += [t["id"] for t in page["tasks"]]
        assert all(t["attempts"] == [] for t in page["tasks"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["t0", "t2", "t4", "t6"]
    page = (
        await client.get(
            "/v1/queues/default/dlq",
            headers=ADMIN,
            params={"error_type": "Timeout", "include_attempts": "true"},
        )
    ).json()
    assert [t["id"] for t in page["tasks"]] == ["t0", "t1", "t2"]
    assert page["tasks"][0]["attempts"][0]["error_type"] == "Timeout"
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    page = (
        await client.get(
            "/v1/queues/default/dlq", headers=ADMIN, params={"dead_lettered_after": future}
        )
    ).json()
    assert page["tasks"] == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"limit": 0}, 422, "limit"),
        ({"limit": 100000}, 422, "limit"),
        ({"limit": "many"}, 422, "limit"),
        ({"cursor": "not-a-cursor"}, 400, "cursor"),
        ({"dead_lettered_after": "2026-01-01T00:00:00"}, 422, "dead_lettered_after"),
        ({"dead_lettered_after": "yesterday"}, 422, "dead_lettered_after"),
    ],
)
async def test_bad_dlq_queries(
    client: Client, params: dict[str, Any], status: int, field: str
) -> None:
    response = await client.get("/v1/queues/default/dlq", params=params, headers=ADMIN)
    assert response.status_code == status, response.text
    assert _error(response)["field"] == field


@pytest.mark.asyncio
async def test_a_query_parameter_the_endpoint_does_not_take_is_422_naming_it(
    client: Client, memory_store: MemoryStorage
) -> None:
    for task_id, error_type in (("dead-1", "Boom"), ("dead-2", "Other")):
        await _submit(client, id=task_id)
        await _kill(memory_store, task_id, error_type)
    # A misspelt filter must not list (or, for an action, act on) the whole DLQ.
    response = await client.get(
        "/v1/queues/default/dlq", params={"eror_type": "Boom"}, headers=ADMIN
    )
    assert response.status_code == 422, response.text
    error = _error(response)
    assert error["field"] == "eror_type"
    assert "error_type" in error["message"]  # what the endpoint does take
    response = await client.get("/v1/queues", params={"": "1"}, headers=ADMIN)
    assert (response.status_code, _error(response)["field"]) == (422, ""), response.text
    response = await client.get(
        "/v1/queues/default/dlq", params={"error_type": "Boom"}, headers=ADMIN
    )
    assert [t["id"] for t in response.json()["tasks"]] == ["dead-1"]
    # Probes take whatever their scrapers add; without a token the answer is still 401.
    assert (await client.get("/healthz", params={"ts": "1"})).status_code == 200
    unauthorized = await client.get("/v1/queues/default/dlq", params={"eror_type": "Boom"})
    assert unauthorized.status_code == 401


@pytest.mark.asyncio
async def test_redrive_and_purge_with_dry_run_and_audit(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for i in range(5):
        await _submit(client, id=f"t{i}")
        await _kill(memory_store, f"t{i}", "Timeout" if i < 3 else "Boom")
    url = "/v1/queues/default/dlq"
    dry = await client.post(
        f"{url}/redrive", headers=ADMIN, json={"filter": {"error_type": "Timeout"}, "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    assert dry.json() == {"action": "redrive", "queue": "default", "count": 3, "dry_run": True}
    assert audit_sink.records == []
    done = await client.post(
        f"{url}/redrive",
        headers=ADMIN,
        json={"filter": {"error_type": "Timeout"}, "reason": "fixed"},
    )
    assert done.json()["count"] == 3
    assert (await memory_store.get("t0")).status == Status.PENDING
    purged = await client.post(f"{url}/purge", headers=ADMIN, json={"ids": ["t3", "t0"]})
    assert purged.json()["count"] == 1
    assert [(r.actor, r.action, r.count, r.reason) for r in audit_sink.records] == [
        ("alice (admin)", "redrive", 3, "fixed"),
        ("alice (admin)", "purge", 1, None),
    ]
    assert (await memory_store.stats("default")).dlq_depth == 1


class _AuditTrailDown(MemoryStorage):
    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        raise StorageUnavailable("audit table locked")


@pytest.mark.asyncio
async def test_an_action_that_was_done_answers_200_even_when_its_audit_entry_is_not_stored() -> (
    None
):
    """The redrive happened; answering 503 ("retry later") would invite a second, wider
    redrive. The unrecorded entry is logged and counted instead (rdq_audit_failures)."""
    sink = MemoryAuditSink()
    async with _AuditTrailDown() as store:
        app = create_app(node_settings(), storage=store, audit_sinks=[sink])
        async with AsyncTestClient(app=app) as client:
            await _submit(client, id="t0")
            await _kill(store, "t0")
            url = "/v1/queues/default/dlq/redrive"
            done = await client.post(url, headers=ADMIN, json={"ids": ["t0"]})
            assert done.status_code == 200, done.text
            assert done.json()["count"] == 1
            assert (await store.get("t0")).status == Status.PENDING
    assert [(r.action, r.count, r.id) for r in sink.records] == [("redrive", 1, None)]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": ["a"], "filter": {}},
        {"ids": []},
        {"ids": ["bad id"]},
        {"filter": {"error_typ": "x"}},
        {"filter": {"error_type": ""}},
        {"filter": {"dead_lettered_before": "2026-01-01T00:00:00"}},
        {"ids": ["a"], "dry_run": "yes"},
    ],
)
async def test_bad_selectors_are_422_and_change_nothing(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink, body: Any
) -> None:
    await _submit(client, id="a")
    await _kill(memory_store, "a")
    response = await client.post("/v1/queues/default/dlq/purge", json=body, headers=ADMIN)
    assert response.status_code == 422, response.text
    _error(response)
    assert (await memory_store.stats("default")).dlq_depth == 1
    assert audit_sink.records == []


@pytest.mark.asyncio
async def test_unknown_route_and_method_use_the_error_shape(client: Client) -> None:
    missing = await client.get("/v1/nothing", headers=ADMIN)
    assert missing.status_code == 404 and _error(missing)["code"] == "not_found"
    wrong = await client.delete("/v1/tasks", headers=ADMIN)
    assert wrong.status_code == 405 and _error(wrong)["code"] == "method_not_allowed"


@pytest.mark.asyncio
async def test_openapi_document_is_served(client: Client) -> None:
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/v1/tasks",
        "/v1/tasks/{task_id}",
        "/v1/queues",
        "/v1/queues/{queue}/dlq",
        "/v1/queues/{queue}/dlq/redrive",
        "/v1/queues/{queue}/dlq/purge",
    ):
        assert path in paths


class _Unreachable(MemoryStorage):
    """A store whose backend is down (a fault a live memory store cannot produce)."""

    async def get(self, task_id: str) -> Any:
        raise StorageUnavailable("connection refused")

    async def stats(self, queue: str) -> Any:
        raise StorageUnavailable("connection refused")


@pytest.mark.asyncio
async def test_an_unreachable_storage_is_503_and_not_ready() -> None:
    async with _Unreachable() as store:
        app = create_app(node_settings(), storage=store)
        async with AsyncTestClient(app=app) as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
            assert ready.status_code == 503
            assert _error(ready)["code"] == "storage_unavailable"
            stats = await client.get("/v1/queues/default/stats", headers=ADMIN)
            assert stats.status_code == 503
            assert "refused" not in stats.text, "backend details stay in the log"


@pytest.mark.asyncio
async def test_health_can_be_protected(memory_store: MemoryStorage) -> None:
    app = create_app(node_settings(open_health=False, open_metrics=True), storage=memory_store)
    async with AsyncTestClient(app=app) as client:
        assert (await client.get("/healthz")).status_code == 401
        assert (await client.get("/readyz")).status_code == 401
        assert (await client.get("/healthz", headers=auth(READ_TOKEN))).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


@pytest.mark.asyncio
async def test_a_submit_only_token_cannot_read_a_stored_task_by_submitting_its_id(
    client: Client, memory_store: MemoryStorage
) -> None:
    """Re-submitting an existing id answers 200, but the stored payload, history and
    tracebacks go only to tokens that may read; a foreign id's queue is not named."""
    producer = auth(SUBMIT_TOKEN)
    body = {"id": "secret-1", "queue": "q", "handler_ref": "h", "payload": {"card": "4111"}}
    assert (await client.post("/v1/tasks", json=body, headers=ADMIN)).status_code == 201
    await _kill(memory_store, "secret-1", "CardDeclined")

    again = {"id": "secret-1", "queue": "q", "handler_ref": "h", "payload": {"probe": True}}
    response = await client.post("/v1/tasks", json=again, headers=producer)
    assert response.status_code == 200
    assert response.json()["payload"] == {"probe": True}
    assert "CardDeclined" not in response.text
    assert "4111" not in response.text
    # a reader still gets the stored task
    reader = await client.post("/v1/tasks", json=again, headers=ADMIN)
    assert reader.json()["payload"] == {"card": "4111"}

    elsewhere = {"id": "secret-1", "queue": "other", "handler_ref": "h"}
    conflict = await client.post("/v1/tasks", json=elsewhere, headers=producer)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "id_conflict"
    assert "'q'" not in conflict.text
