"""The limits a running worker keeps, as every surface shows them — ``TaskAdmin.limits``,
``GET /v1/queues/{queue}/limits`` and ``/v1/limits``, ``rdq limits`` on a store and through a
node, the queue page's Limits, the ``rdq_limit_*`` gauges — and a task submitted through a
node with the application given the keys its limits give it, its new value's record first."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from click.testing import CliRunner
from litestar.testing import AsyncTestClient
from prometheus_client import REGISTRY

import rdq
from rdq.admin import TaskAdmin
from rdq.cli import main
from rdq.server import create_app
from rdq.spi import Storage
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, SUBMIT_TOKEN, auth, node_settings, wait_until
from .test_ui import _login

pytestmark = pytest.mark.asyncio


def build_app(release: asyncio.Event) -> rdq.App:
    """Queue pay: at most 2 tasks of key psp at once, 10 a second; its handler charge: at most
    one task per tenant at once. Every task waits for ``release``."""
    app = rdq.App()
    app.queue("pay", limits=[rdq.Concurrency(2, key="psp"), rdq.Rate(10, key="psp")])

    @app.handler(
        "charge",
        queue="pay",
        limits=[rdq.Concurrency(1, key=lambda t: t.payload["tenant"], name="tenant")],
    )
    async def charge(payload: dict[str, str]) -> None:
        await release.wait()

    return app


@dataclass
class Scene:
    url: str
    storage: Storage
    app: rdq.App


@pytest_asyncio.fixture
async def scene() -> AsyncIterator[Scene]:
    """Five tasks (three of tenant a, two of b) and a worker running two of them: one of
    each tenant, psp full."""
    url = f"memory://limits-{uuid.uuid4().hex}"
    release = asyncio.Event()
    async with MemoryStorage(name=url.removeprefix("memory://")) as storage:
        app = build_app(release)
        await rdq.Client(storage, app).submit_many(
            [rdq.Submission("charge", {"tenant": t}) for t in "aaabb"]
        )
        worker = rdq.Worker(app, storage)
        running = asyncio.create_task(worker.run())

        async def psp_full() -> bool:
            found = {c.key: c.in_use for c in await storage.list_controls("pay")}
            return found.get("limit:psp") == 2

        try:
            await wait_until(psp_full, what="the worker holding psp's two slots")
            yield Scene(url, storage, app)
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(running, 30)


def _check(limits: list[dict[str, Any]]) -> None:
    by_name = {v["name"]: v for v in limits}
    assert set(by_name) == {"psp", "tenant"}
    psp = by_name["psp"]
    assert (psp["kind"], psp["key"], psp["concurrency"], psp["rate"]) == (
        "key",
        "limit:psp",
        2,
        10,
    )
    assert (psp["in_use"], psp["saturated"], psp["waiting"], psp["burst"]) == (2, 1, 3, None)
    assert psp["current_rate"] == 10 and psp["adaptive"] is True
    tenant = by_name["tenant"]
    assert (tenant["kind"], tenant["key"], tenant["concurrency"]) == ("value", "limit:tenant:*", 1)
    assert (tenant["in_use"], tenant["keys"], tenant["saturated"], tenant["waiting"]) == (
        2,
        2,
        2,
        3,
    )
    values = {v["value"]: v["in_use"] for v in tenant["values"]}
    assert values == {"a": 1, "b": 1}


def _builtins(views: object) -> list[dict[str, Any]]:
    return list(msgspec.to_builtins(views))


async def test_the_admin_api_the_cli_and_the_gauges_show_each_limit_in_use(
    scene: Scene,
) -> None:
    _check(_builtins(await TaskAdmin(scene.storage).limits("pay")))

    node = create_app(node_settings(), storage=scene.storage)
    async with AsyncTestClient(app=node) as client:
        one = await client.get("/v1/queues/pay/limits", headers=auth(READ_TOKEN))
        assert one.status_code == 200, one.text
        assert one.json()["unsupported"] is None
        _check(one.json()["limits"])
        every = await client.get("/v1/limits", headers=auth(READ_TOKEN))
        _check(every.json()["limits"])
        other = await client.get("/v1/limits?queue=paj", headers=auth(READ_TOKEN))
        assert other.status_code == 404, "a typo is refused, not answered with no limits"
        assert "did you mean 'pay'?" in other.json()["error"]["message"]

        await _login(client, READ_TOKEN)
        page = await client.get("/ui/queues/pay")
        assert page.status_code == 200
        assert 'data-limit="psp"' in page.text and 'data-limit="tenant"' in page.text
        assert "of 2 running" in page.text and "tenant, per value" in page.text
        assert "3 task(s) due and waiting with its key" in page.text

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["limits", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    listed = await asyncio.to_thread(cli, "pay", "--storage", scene.url, "--json")
    _check(json.loads(listed)["limits"])
    table = await asyncio.to_thread(cli, "--storage", scene.url)
    assert "psp" in table and "2 (full)" in table and "10/s" in table
    assert "tenant (per" in table and "2 over 2" in table, "a per-value limit, 80 columns wide"
    assert "tenant=a" in table and "tenant=b" in table

    def gauge(name: str, limit: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"queue": "pay", "limit": limit})

    async def published() -> bool:
        return gauge("rdq_limit_in_use", "psp") == 2

    await wait_until(published, what="the worker's gauges")
    assert gauge("rdq_limit_concurrency", "psp") == 2
    assert gauge("rdq_limit_saturated", "psp") == 1
    assert gauge("rdq_limit_rate", "psp") == 10
    assert gauge("rdq_limit_keys", "tenant") == 2
    assert gauge("rdq_limit_saturated", "tenant") == 2


async def test_a_task_submitted_through_a_node_with_the_app_gets_its_limit_keys(
    scene: Scene,
) -> None:
    node = create_app(node_settings(), storage=scene.storage, engine_app=scene.app)
    body = {"handler_ref": "charge", "queue": "pay", "payload": {"tenant": "c"}, "id": "t-c"}
    async with AsyncTestClient(app=node) as client:
        response = await client.post("/v1/tasks", json=body, headers=auth(SUBMIT_TOKEN))
        assert response.status_code in (200, 201), response.text
        bad = {**body, "id": "t-x", "payload": {"tenant": ["a", "list"]}}
        refused = await client.post("/v1/tasks", json=bad, headers=auth(ADMIN_TOKEN))
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "limits.tenant"
    task = await scene.storage.get("t-c")
    assert task.keys == ["limit:psp", "limit:tenant:c"]
    controls = {c.key: c for c in await scene.storage.list_controls("pay")}
    assert controls["limit:tenant:c"].concurrency == 1, "the new value's record came first"
