"""End to end over real HTTP, on every first-party store (memory, and real PostgreSQL, Redis,
MongoDB and SQLite): submit → callback retries → DLQ → filtered redrive → success, with auth
and audit; and two nodes sharing the work of one store."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from rdq import App, Backoff
from rdq.audit import JsonLinesAuditSink
from rdq.callbacks import CallbackSettings, verify
from rdq.server import create_app

from .conftest import (
    ADMIN_TOKEN,
    READ_TOKEN,
    SUBMIT_TOKEN,
    Receiver,
    Reply,
    auth,
    node_settings,
    running_node,
    wait_until,
)

SECRET = "end-to-end-signing-secret"


@pytest.fixture(params=["memory", "postgres", "redis", "mongo", "sqlite"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://e2e-{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rdq.db'}"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest_asyncio.fixture
async def node(
    storage_url: str, receiver: Receiver, tmp_path: Path
) -> AsyncIterator[tuple[str, str, Path]]:
    queue = f"hooks-{uuid.uuid4().hex[:8]}"
    engine = App()
    # The timeouts only bound a broken run: a local receiver answers at once, and an attempt
    # cut short by a slow machine would change the outcomes this test checks.
    engine.queue(queue, max_attempts=3, backoff=Backoff.fixed(0.2), timeout=120.0, lease=30.0)
    settings = node_settings(
        storage=storage_url,
        queues=[queue],
        work=True,
        migrate=True,
        audit_log=str(tmp_path / "audit.jsonl"),
        callbacks=CallbackSettings(
            allow_hosts=["127.0.0.1"],
            allow_networks=["127.0.0.0/8"],
            secrets=[SECRET],
            timeout=60.0,
        ),
    )
    app = create_app(settings, engine_app=engine)
    async with running_node(app) as base_url:
        yield base_url, queue, tmp_path / "audit.jsonl"


async def _task(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/tasks/{task_id}", headers=auth(READ_TOKEN))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _status_is(http: httpx.AsyncClient, task_id: str, status: str) -> bool:
    return (await _task(http, task_id))["status"] == status


@pytest.mark.asyncio
async def test_callbacks_retry_dead_letter_and_redrive_over_http(
    node: tuple[str, str, Path], receiver: Receiver
) -> None:
    base_url, queue, audit_path = node
    receiver.script("/flaky", Reply(500), Reply(503), Reply(200))
    receiver.script("/broken", Reply(500, body=b"down"))  # retryable, charged: not an outage
    receiver.script("/gone", Reply(404, body=b"no such customer"))
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        unauthenticated = await http.post("/v1/tasks", json={"handler_ref": "x"})
        assert unauthenticated.status_code == 401
        for name in ("flaky", "broken", "gone"):
            response = await http.post(
                "/v1/tasks",
                headers=auth(SUBMIT_TOKEN),
                json={
                    "id": f"{queue}-{name}",
                    "queue": queue,
                    "handler_ref": receiver.url(f"/{name}"),
                    "payload": {"name": name},
                    "trace": "kept",
                },
            )
            assert response.status_code == 201, response.text

        flaky, broken, gone = (f"{queue}-{n}" for n in ("flaky", "broken", "gone"))
        await wait_until(lambda: _status_is(http, flaky, "SUCCEEDED"), what="flaky succeeds")
        await wait_until(lambda: _status_is(http, broken, "DEAD"), what="broken dead-letters")
        await wait_until(lambda: _status_is(http, gone, "DEAD"), what="gone dead-letters")

        outcomes = [a["outcome"] for a in (await _task(http, flaky))["attempts"]]
        assert outcomes == ["FAILED", "FAILED", "SUCCEEDED"]
        broken_task = await _task(http, broken)
        assert [a["outcome"] for a in broken_task["attempts"]] == ["FAILED"] * 3
        retryable_type = broken_task["attempts"][-1]["error_type"]
        assert "CallbackFailed" in retryable_type
        gone_task = await _task(http, gone)
        assert [a["outcome"] for a in gone_task["attempts"]] == ["PERMANENT"]
        assert "HTTP 404" in gone_task["attempts"][0]["error_message"]

        # flaky: 3 deliveries, broken: 3, gone: 1; every one signed and carrying its fields
        assert len(receiver.requests) == 7, [r.path for r in receiver.requests]
        for request in receiver.requests:
            headers = {k.lower(): v for k, v in request.headers.items()}
            assert verify(
                [SECRET], headers["x-rdq-signature"], headers["x-rdq-timestamp"], request.body
            )
            assert json.loads(request.body)["trace"] == "kept"

        dlq_url = f"/v1/queues/{queue}/dlq"
        page = (
            await http.get(dlq_url, params={"error_type": retryable_type}, headers=auth(READ_TOKEN))
        ).json()
        assert [t["id"] for t in page["tasks"]] == [broken]
        selector = {"filter": {"error_type": retryable_type}, "reason": "receiver is back"}
        forbidden = await http.post(f"{dlq_url}/redrive", json=selector, headers=auth(READ_TOKEN))
        assert forbidden.status_code == 403
        dry = await http.post(
            f"{dlq_url}/redrive", json={**selector, "dry_run": True}, headers=auth(ADMIN_TOKEN)
        )
        assert dry.json()["count"] == 1
        receiver.script("/broken", Reply(200))
        done = await http.post(f"{dlq_url}/redrive", json=selector, headers=auth(ADMIN_TOKEN))
        assert done.status_code == 200 and done.json()["count"] == 1

        await wait_until(lambda: _status_is(http, broken, "SUCCEEDED"), what="redrive succeeds")
        redriven = await _task(http, broken)
        assert redriven["redrive_count"] == 1
        assert [a["outcome"] for a in redriven["attempts"]] == ["FAILED"] * 3 + ["SUCCEEDED"]
        assert await _status_is(http, gone, "DEAD"), "the filter left the 404 task alone"

        metrics = await http.get("/metrics", headers=auth(READ_TOKEN))
        assert f'rdq_redriven_total{{queue="{queue}"}} 1.0' in metrics.text

    (record,) = JsonLinesAuditSink(audit_path).read()
    assert (record.actor, record.action, record.queue, record.count, record.reason) == (
        "alice (admin)",
        "redrive",
        queue,
        1,
        "receiver is back",
    )
    assert record.selector == {"filter": {"error_type": retryable_type}}
    assert ADMIN_TOKEN not in audit_path.read_text()


@pytest.mark.asyncio
@pytest.mark.parametrize("shared", ["postgres", "redis", "mongo", "sqlite"])
async def test_two_nodes_on_one_database_share_the_work(
    shared: str, request: pytest.FixtureRequest, tmp_path: Path, receiver: Receiver
) -> None:
    if shared == "sqlite":
        storage = f"sqlite:///{tmp_path / 'rdq.db'}"
    else:
        storage = request.getfixturevalue(f"{shared}_url")
    queue = f"shared-{uuid.uuid4().hex[:8]}"
    callbacks = CallbackSettings(
        allow_hosts=["127.0.0.1"], allow_networks=["127.0.0.0/8"], secrets=[SECRET]
    )

    def node_app() -> Any:
        engine = App()
        engine.queue(queue, max_attempts=3, backoff=Backoff.fixed(0.2), concurrency=2)
        settings = node_settings(
            storage=storage, queues=[queue], work=True, migrate=True, callbacks=callbacks
        )
        return create_app(settings, engine_app=engine)

    ids = [f"{queue}-{i}" for i in range(20)]
    async with (
        running_node(node_app()) as first,
        running_node(node_app()) as second,
        httpx.AsyncClient(timeout=30) as http,
    ):
        for i, task_id in enumerate(ids):
            base = first if i % 2 else second
            response = await http.post(
                f"{base}/v1/tasks",
                headers=auth(SUBMIT_TOKEN),
                json={"id": task_id, "queue": queue, "handler_ref": receiver.url("/ok")},
            )
            assert response.status_code == 201

        async def all_done() -> bool:
            stats = await http.get(f"{first}/v1/queues/{queue}/stats", headers=auth(READ_TOKEN))
            body = stats.json()
            return bool(body["succeeded"] == len(ids))

        await wait_until(all_done, what="every task delivered")
        workers = set()
        for task_id in ids:
            task = (await http.get(f"{second}/v1/tasks/{task_id}", headers=auth(READ_TOKEN))).json()
            assert [a["outcome"] for a in task["attempts"]] == ["SUCCEEDED"]
            workers.add(task["attempts"][0]["worker_id"])
    delivered = [r.headers.get("X-Rdq-Task-Id") for r in receiver.received("/ok")]
    assert sorted(delivered) == sorted(ids), "each task delivered once"
    assert 1 <= len(workers) <= 2
