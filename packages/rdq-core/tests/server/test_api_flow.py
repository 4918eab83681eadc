"""The flow-control and fleet endpoints over the in-memory store: controls, pause and resume,
breakers listed and set by hand, retry now, paced redrives (driven by the node, resumed when
orphaned, cancelled), workers judged live or silent, per-minute rates; each action audited,
bad input one 422 naming the field, and a store without the capabilities saying so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq import flow
from rdq.admin import TaskAdmin
from rdq.audit import MemoryAuditSink
from rdq.config import Breaker
from rdq.server import _upkeep, create_app
from rdq.spi import (
    Attempt,
    Capabilities,
    Control,
    Counts,
    DLQFilter,
    Envelope,
    Outcome,
    Selector,
    Status,
    WorkerInfo,
)
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, auth, node_settings, wait_until

Client = AsyncTestClient[Litestar]
ADMIN = auth(ADMIN_TOKEN)
READ = auth(READ_TOKEN)
pytestmark = pytest.mark.asyncio


class Clock:
    """The store's clock: now, moved on by hand."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.at


async def _dead(store: MemoryStorage, queue: str, count: int, handler: str = "charge") -> None:
    for n in range(count):
        await store.enqueue(Envelope(id=f"{queue}-{handler}-{n}", queue=queue, handler_ref=handler))
    for claim in await store.claim_due(queue, 1000, timedelta(seconds=30)):
        now = await store.now()
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="GatewayDown",
            error_message="502",
            started_at=now,
            finished_at=now,
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)


async def _trip(store: MemoryStorage, queue: str, key: str, sample: str = "t-1") -> None:
    now = await store.now()
    tripped = flow.trip(
        Control(queue=queue, key=key),
        now,
        Breaker(cooldown=30),
        started=now - timedelta(seconds=20),
        error_types=["GatewayDown"],
        error_type="GatewayDown",
        error_message="502 Bad Gateway from psp.example",
        sample_task=sample,
    )
    await store.put_control(tripped, expected_version=0)


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


async def test_pause_and_resume_a_handler_audited(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for n in range(3):
        await memory_store.enqueue(Envelope(id=f"c{n}", queue="pay", handler_ref="charge"))
    body = {"handler": "charge", "reason": "PSP maintenance"}
    paused = await client.post("/v1/queues/pay/pause", json=body, headers=ADMIN)
    assert paused.status_code == 200, paused.text
    doc = paused.json()
    assert (doc["key"], doc["kind"], doc["paused"]) == ("handler:charge", "handler", True)
    assert doc["pause"]["by"] == "alice (admin)" and doc["pause"]["reason"] == "PSP maintenance"
    assert await memory_store.claim_due("pay", 10, timedelta(seconds=30)) == []
    listed = (await client.get("/v1/queues/pay/controls", headers=READ)).json()
    assert listed["unsupported"] is None
    assert [(c["key"], c["paused"]) for c in listed["controls"]] == [("handler:charge", True)]
    whole = await client.post("/v1/queues/pay/pause", json={}, headers=ADMIN)
    assert whole.json()["key"] == "*"
    await client.post("/v1/queues/pay/resume", json={}, headers=ADMIN)
    resumed = await client.post("/v1/queues/pay/resume", json={"handler": "charge"}, headers=ADMIN)
    assert resumed.json()["paused"] is False
    assert len(await memory_store.claim_due("pay", 10, timedelta(seconds=30))) == 3
    actions = [(r.action, r.selector, r.actor) for r in audit_sink.records]
    assert actions == [
        ("pause", {"key": "handler:charge"}, "alice (admin)"),
        ("pause", {"key": "*"}, "alice (admin)"),
        ("resume", {"key": "*"}, "alice (admin)"),
        ("resume", {"key": "handler:charge"}, "alice (admin)"),
    ]
    typo = await client.post("/v1/queues/pay/pause", json={"dependency": "psp"}, headers=ADMIN)
    assert typo.status_code == 404 and _error(typo)["code"] == "unknown_name"
    assert "unknown dependency 'psp' in queue 'pay'" in _error(typo)["message"]
    dep = await client.post(
        "/v1/queues/pay/pause", json={"dependency": "psp", "force": True}, headers=ADMIN
    )
    assert dep.json()["key"] == "dep:psp" and dep.json()["kind"] == "dependency"


async def test_bad_control_input_is_one_422_naming_the_field(client: Client) -> None:
    cases = [
        ("/v1/queues/pay/pause", {"handler": "a", "dependency": "b"}, "dependency"),
        ("/v1/queues/pay/pause", {"handler": "a b"}, "handler"),
        ("/v1/queues/pay/pause", {"handle": "a"}, "body"),  # the message names it
        ("/v1/queues/pay/pause", {"reason": "x" * 3000}, "reason"),
        ("/v1/queues/pay/breakers/open", {"handler": "a", "key": "dep:b"}, "key"),
        ("/v1/queues/pay/breakers/open", {"key": "*"}, "key"),
        ("/v1/queues/pay/breakers/open", {}, "key"),
        ("/v1/queues/pay/breakers/*/open", {}, "key"),
        ("/v1/queues/pay/retry-now", {}, "ids"),
        ("/v1/queues/pay/retry-now", {"ids": []}, "ids"),
        (
            "/v1/queues/pay/retry-now",
            {"filter": {"status": "DEAD"}},
            "filter",
        ),  # no status: PENDING only
        ("/v1/queues/pay/dlq/redrive", {"filter": {}, "rate": "fast"}, "rate"),
        ("/v1/queues/pay/dlq/redrive", {"filter": {}, "rate": 0}, "rate"),
        ("/v1/queues/pay/dlq/redrive", {"filter": {}, "rate": "0/s"}, "rate"),
        ("/v1/queues/pay/dlq/purge", {"filter": {}, "rate": 5}, "body"),  # only redrives are paced
    ]
    for path, body, field in cases:
        response = await client.post(path, json=body, headers=ADMIN)
        assert response.status_code == 422, (path, body, response.text)
        assert _error(response)["field"] == field, (path, body, response.text)
    rates = await client.get("/v1/queues/pay/rates?minutes=0", headers=READ)
    assert rates.status_code == 422 and _error(rates)["field"] == "minutes"
    refused = await client.post("/v1/queues/pay/pause", json={}, headers=READ)
    assert refused.status_code == 403


async def test_breakers_listed_with_what_they_hold_and_closed_by_hand(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for n in range(4):
        await memory_store.enqueue(Envelope(id=f"p{n}", queue="pay", handler_ref="charge"))
    await _trip(memory_store, "pay", "handler:charge", sample="p0")
    await _trip(memory_store, "mail", "dep:smtp")
    listed = (await client.get("/v1/breakers", headers=READ)).json()
    assert listed["unsupported"] is None
    by_key = {b["key"]: b for b in listed["breakers"]}
    charge = by_key["handler:charge"]
    assert (charge["queue"], charge["state"], charge["error_type"]) == (
        "pay",
        "open",
        "GatewayDown",
    )
    assert charge["sample_task"] == "p0" and charge["held"] == 4 and not charge["held_more"]
    assert charge["until"] is not None and charge["outages"][0]["end"] is None
    assert by_key["dep:smtp"]["held"] is None, "a dependency's held tasks are not cheap to count"
    only_mail = (await client.get("/v1/breakers?queue=mail", headers=READ)).json()
    assert [b["key"] for b in only_mail["breakers"]] == ["dep:smtp"]

    closed = await client.post(
        "/v1/queues/pay/breakers/handler:charge/close", json={"reason": "PSP back"}, headers=ADMIN
    )
    assert closed.status_code == 200, closed.text
    assert closed.json()["state"] == "closed" and closed.json()["rate"] == 3  # the ramp
    assert len(await memory_store.claim_due("pay", 10, timedelta(seconds=30))) >= 1
    opened = await client.post(
        "/v1/queues/mail/breakers/open", json={"dependency": "smtp", "reason": "x"}, headers=ADMIN
    )
    assert opened.json()["state"] == "open" and opened.json()["by"] == "alice (admin)"
    hook = "https://hooks.example/a/b"
    by_body = await client.post(
        "/v1/queues/mail/breakers/open", json={"handler": hook, "force": True}, headers=ADMIN
    )
    assert by_body.json()["key"] == f"handler:{hook}"
    actions = [(r.action, r.queue, r.selector["key"], r.reason) for r in audit_sink.records]
    assert actions == [
        ("breaker.close", "pay", "handler:charge", "PSP back"),
        ("breaker.open", "mail", "dep:smtp", "x"),
        ("breaker.open", "mail", f"handler:{hook}", None),
    ]
    half = await memory_store.list_controls("pay")
    assert flow.breaker_of(half[0]).state is flow.State.CLOSED


async def test_half_open_breakers_show_their_probes_left(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _trip(memory_store, "pay", "handler:charge")
    (control,) = await memory_store.list_controls("pay")
    later = (await memory_store.now()) + timedelta(minutes=5)
    probing = flow.begin_probing(control, later, Breaker(probes=3))
    assert probing is not None
    await memory_store.put_control(probing, expected_version=control.version)
    (breaker,) = (await client.get("/v1/breakers", headers=READ)).json()["breakers"]
    assert breaker["state"] == "half_open" and breaker["probes_left"] == 3


async def test_retry_now_by_filter_and_ids_with_a_dry_run(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for n in range(3):
        await memory_store.enqueue(
            Envelope(id=f"w{n}", queue="pay", handler_ref="charge"), delay=timedelta(hours=1)
        )
    await memory_store.enqueue(Envelope(id="due", queue="pay", handler_ref="charge"))
    body = {"filter": {"handler_ref": "charge"}, "dry_run": True}
    dry = await client.post("/v1/queues/pay/retry-now", json=body, headers=ADMIN)
    assert dry.json() == {
        "action": "retry_now",
        "queue": "pay",
        "count": 3,
        "dry_run": True,
    }
    assert audit_sink.records == []
    one = await client.post(
        "/v1/queues/pay/retry-now", json={"ids": ["w0", "due", "nope"]}, headers=ADMIN
    )
    assert one.json()["count"] == 1
    rest = await client.post(
        "/v1/queues/pay/retry-now", json={"filter": {}, "reason": "PSP back"}, headers=ADMIN
    )
    assert rest.json()["count"] == 2
    assert len(await memory_store.claim_due("pay", 10, timedelta(seconds=30))) == 4
    assert [(r.action, r.count) for r in audit_sink.records] == [
        ("retry_now", 1),
        ("retry_now", 2),
    ]


async def test_a_paced_redrive_is_driven_by_the_node_and_followed(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    await _dead(memory_store, "pay", 6)
    body = {"filter": {"error_type": "GatewayDown"}, "rate": "20/s", "reason": "PSP back"}
    started = await client.post("/v1/queues/pay/dlq/redrive", json=body, headers=ADMIN)
    assert started.status_code == 200, started.text
    result = started.json()
    op = result["operation"]
    assert result["count"] == 6 and op["total"] == 6 and op["rate"] == 20
    node_id = client.app.state.node.id
    assert op["driver"] == node_id and op["actor"] == "alice (admin)"

    async def done() -> bool:
        got = await client.get(f"/v1/queues/pay/redrives/{op['id']}", headers=READ)
        return bool(got.json()["status"] == "done")

    await wait_until(done, what="the paced redrive finishes")
    assert (await memory_store.stats("pay")).pending == 6
    listed = (await client.get("/v1/redrives", headers=READ)).json()["redrives"]
    assert [(r["id"], r["done"], r["status"]) for r in listed] == [(op["id"], 6, "done")]
    per_queue = (await client.get("/v1/queues/pay/redrives", headers=READ)).json()
    assert [r["id"] for r in per_queue["redrives"]] == [op["id"]]
    unknown = await client.get("/v1/queues/mail/redrives", headers=READ)
    assert unknown.status_code == 404, "a queue nothing knows is refused, not answered empty"
    assert unknown.json()["error"]["code"] == "unknown_name"
    (record,) = audit_sink.records
    assert (record.action, record.count, record.reason) == ("redrive", 6, "PSP back")
    assert record.selector["rate"] == "20/s"
    dry = await client.post(
        "/v1/queues/pay/dlq/redrive", json={"filter": {}, "rate": 5, "dry_run": True}, headers=ADMIN
    )
    assert dry.json() == {
        "action": "redrive",
        "queue": "pay",
        "count": 0,
        "dry_run": True,
        "hint": "the DLQ of pay is empty",
    }
    missing = await client.get("/v1/queues/pay/redrives/abc123", headers=READ)
    assert missing.status_code == 404


async def test_a_paced_redrive_is_cancelled_half_way(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    await _dead(memory_store, "pay", 40)
    body = {"filter": {}, "rate": 4, "reason": "slowly"}
    op = (await client.post("/v1/queues/pay/dlq/redrive", json=body, headers=ADMIN)).json()[
        "operation"
    ]

    async def started() -> bool:
        got = await client.get(f"/v1/queues/pay/redrives/{op['id']}", headers=READ)
        return bool(got.json()["done"] >= 1)

    await wait_until(started, what="the first tasks return")
    cancelled = await client.post(
        f"/v1/queues/pay/redrives/{op['id']}/cancel", json={"reason": "enough"}, headers=ADMIN
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["cancelled_by"] == "alice (admin)"
    await asyncio.sleep(1)
    stats = await memory_store.stats("pay")
    assert stats.dlq_depth > 20 and stats.pending + stats.dlq_depth == 40
    assert [r.action for r in audit_sink.records] == ["redrive.cancel"]
    gone = await client.post("/v1/queues/pay/redrives/ffffff/cancel", json={}, headers=ADMIN)
    assert gone.status_code == 404


async def test_the_node_takes_over_an_orphaned_redrive(
    memory_store: MemoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One started without a driver (``rdq dlq redrive --detach``) or whose driver died is
    driven by a node on the store within a round of its upkeep."""
    monkeypatch.setattr(_upkeep, "INTERVAL", 0.2)
    await _dead(memory_store, "pay", 5)
    admin = TaskAdmin(memory_store)
    op = await admin.start_paced_redrive("pay", Selector(filter=DLQFilter()), 50, actor="ops")
    app = create_app(node_settings(), storage=memory_store)
    async with AsyncTestClient(app=app) as client:

        async def done() -> bool:
            got = await client.get(f"/v1/queues/pay/redrives/{op.id}", headers=READ)
            return bool(got.json()["status"] == "done")

        await wait_until(done, what="the node drives the orphan")
        final = (await client.get(f"/v1/queues/pay/redrives/{op.id}", headers=READ)).json()
        assert final["driver"] == app.state.node.id and final["done"] == 5


async def test_workers_live_and_silent_by_the_store_clock() -> None:
    clock = Clock()
    async with MemoryStorage(clock=clock) as store:
        await store.heartbeat_worker(
            WorkerInfo(id="box:1:a", host="box", queues=["pay"], concurrency=8, held=2, heartbeat=5)
        )
        await store.heartbeat_worker(WorkerInfo(id="box:2:b", queues=["mail"], heartbeat=5))
        clock.at += timedelta(seconds=8)
        await store.heartbeat_worker(
            WorkerInfo(id="box:1:a", host="box", queues=["pay"], concurrency=8, held=2, heartbeat=5)
        )
        clock.at += timedelta(seconds=4)  # box:2:b silent for 12 s > 2 heartbeats
        app = create_app(node_settings(), storage=store)
        async with AsyncTestClient(app=app) as client:
            body = (await client.get("/v1/workers", headers=READ)).json()
    assert body["unsupported"] is None
    workers = {w["id"]: w for w in body["workers"]}
    live, silent = workers["box:1:a"], workers["box:2:b"]
    assert (live["status"], live["held"], live["concurrency"], live["kind"]) == (
        "live",
        2,
        8,
        "worker",
    )
    assert silent["status"] == "silent" and silent["silent_for"] == 12
    nodes = [w for w in body["workers"] if w["kind"] == "node"]
    assert len(nodes) == 1 and nodes[0]["status"] == "live", "the node registers itself"
    assert body["workers"][-1]["id"] == "box:2:b", "live ones first"


async def test_rates_per_minute_with_the_gaps_filled() -> None:
    clock = Clock()
    async with MemoryStorage(clock=clock) as store:
        minute = clock.at.replace(second=0)
        await store.add_counts(
            [
                Counts(queue="pay", minute=minute - timedelta(minutes=2), succeeded=5, failed=1),
                Counts(queue="pay", minute=minute, succeeded=2, dead=3, deferred=4),
                Counts(queue="mail", minute=minute, succeeded=9),
            ]
        )
        app = create_app(node_settings(), storage=store)
        async with AsyncTestClient(app=app) as client:
            body = (await client.get("/v1/queues/pay/rates?minutes=5", headers=READ)).json()
            default = (await client.get("/v1/queues/pay/rates", headers=READ)).json()
    rows = [(r["succeeded"], r["failed"], r["dead"], r["deferred"]) for r in body["minutes"]]
    assert rows == [(0, 0, 0, 0), (0, 0, 0, 0), (5, 1, 0, 0), (0, 0, 0, 0), (2, 0, 3, 4)]
    assert len(default["minutes"]) == 60


class Version2Storage(MemoryStorage):
    """The memory store as a store of contract version 2: no control records, no registry,
    no counts."""

    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities(), control=False, worker_registry=False, counters=False
        )


@pytest_asyncio.fixture
async def old_client() -> AsyncIterator[Client]:
    async with Version2Storage() as store:
        app = create_app(node_settings(), storage=store)
        async with AsyncTestClient(app=app) as client:
            yield client


async def test_a_store_without_the_capabilities_says_what_it_lacks(old_client: Client) -> None:
    for path, listed in (
        ("/v1/queues/pay/controls", "controls"),
        ("/v1/breakers", "breakers"),
        ("/v1/redrives", "redrives"),
        ("/v1/queues/pay/redrives", "redrives"),
        ("/v1/workers", "workers"),
        ("/v1/queues/pay/rates", "minutes"),
    ):
        response = await old_client.get(path, headers=READ)
        assert response.status_code == 200, (path, response.text)
        body = response.json()
        assert body[listed] == [], path
        assert "Version2Storage does not offer the" in body["unsupported"], (path, body)
    for path, body in (
        ("/v1/queues/pay/pause", {}),
        ("/v1/queues/pay/breakers/dep:x/open", {}),
        ("/v1/queues/pay/retry-now", {"ids": ["a"]}),
        ("/v1/queues/pay/dlq/redrive", {"filter": {}, "rate": 5}),
    ):
        response = await old_client.post(path, json=body, headers=ADMIN)
        assert response.status_code == 501, (path, response.text)
        error = _error(response)
        assert error["code"] == "not_implemented"
        assert "Version2Storage does not offer the 'control' capability" in error["message"]


async def test_status_of_a_task_held_by_nobody_is_untouched(
    client: Client, memory_store: MemoryStorage
) -> None:
    """Nothing here changes a task's status: the pause holds, the task stays PENDING."""
    await memory_store.enqueue(Envelope(id="x", queue="pay", handler_ref="charge"))
    await client.post("/v1/queues/pay/pause", json={}, headers=ADMIN)
    assert (await memory_store.get("x")).status is Status.PENDING
