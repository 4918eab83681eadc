"""The console's flow-control and fleet views without a browser: the overview's banner,
sparklines, silent holders and top error groups; a queue's controls acted on through
confirmation pages (CSRF, a reason, the admin right, audited); a paced redrive started,
followed and cancelled; retry now from a task's page; the Workers page; the flags for silent
holders and queues no live worker serves; and a store without the capabilities saying so."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq import flow
from rdq.audit import MemoryAuditSink
from rdq.config import Breaker
from rdq.server import create_app
from rdq.spi import (
    Attempt,
    Capabilities,
    Control,
    Counts,
    Envelope,
    Outcome,
    Status,
    WorkerInfo,
)
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, node_settings, wait_until
from .test_ui import _csrf, _login

Client = AsyncTestClient[Litestar]
pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.behind = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) - self.behind


async def _scene(store: MemoryStorage, clock: Clock) -> None:
    """An outage: the charge handler's breaker open (tripped by pay-0), 20 dead, 5 held;
    a dependency paused in mail; a worker silent for 3 minutes holding mail-0; an hour of
    counts."""
    for n in range(20):
        await store.enqueue(Envelope(id=f"pay-{n}", queue="pay", handler_ref="charge"))
    for claim in await store.claim_due("pay", 100, timedelta(seconds=30)):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="GatewayDown",
            error_message="502 from psp",
            started_at=now,
            finished_at=now,
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)
    for n in range(5):
        task = Envelope(id=f"held-{n}", queue="pay", handler_ref="charge")
        await store.enqueue(task, delay=timedelta(minutes=10))
    now = await store.now()
    tripped = flow.trip(
        Control(queue="pay", key="handler:charge"),
        now,
        Breaker(cooldown=30),
        started=now - timedelta(minutes=2),
        error_types=["GatewayDown"],
        error_type="GatewayDown",
        error_message="502 from psp",
        sample_task="pay-0",
    )
    await store.put_control(tripped, expected_version=0)
    clock.behind = timedelta(minutes=3)
    await store.enqueue(Envelope(id="mail-0", queue="mail", handler_ref="send", keys=["dep:smtp"]))
    await store.enqueue(Envelope(id="mail-1", queue="mail", handler_ref="send"))
    await store.heartbeat_worker(WorkerInfo(id="mail-7:1:aa", queues=["mail"], held=1))
    await store.claim_due("mail", 1, timedelta(minutes=4), worker_id="mail-7:1:aa")
    clock.behind = timedelta(0)
    await store.heartbeat_worker(WorkerInfo(id="web-1:2:bb", queues=["pay"], concurrency=8))
    minute = now.replace(second=0, microsecond=0)
    await store.add_counts(
        [
            Counts(queue="pay", minute=minute - timedelta(minutes=m), succeeded=30, failed=m % 3)
            for m in range(20, 60)
        ]
        + [Counts(queue="pay", minute=minute - timedelta(minutes=3), dead=7, deferred=40)]
    )


@pytest_asyncio.fixture
async def scene() -> AsyncIterator[tuple[Client, MemoryStorage, MemoryAuditSink]]:
    clock = Clock()
    sink = MemoryAuditSink()
    async with MemoryStorage(clock=clock) as store:
        await _scene(store, clock)
        app = create_app(node_settings(queues=["pay"]), storage=store, audit_sinks=[sink])
        async with AsyncTestClient(app=app) as client:
            await _login(client, ADMIN_TOKEN)
            yield client, store, sink


def _text(html: str) -> str:
    """The page's words, tags dropped and spaces folded."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


async def test_the_overview_shows_what_is_held_and_the_last_hour(scene: Any) -> None:
    client, _, _ = scene
    admin = client.app.state.node.admin
    await admin.pause("mail", "dep:smtp", actor="bob", reason="relay maintenance")
    html = (await client.get("/ui")).text
    words = _text(html)
    assert "Breaker of handler charge in pay 5 task(s) held" in words
    assert "GatewayDown 502 from psp" in words
    assert 'href="/ui/tasks/pay-0?traceback=open#traceback"' in html, (
        "the error links to the traceback of the task that tripped it"
    )
    assert "paused dependency smtp in mail" in words
    assert "by bob" in words and "relay maintenance" in words
    assert re.search(r'data-count="total:silent">1<', html), "a task held by a silent worker"
    row = html.split('data-queue="pay"', 1)[1].split("</tr>", 1)[0]
    assert "<polyline" in row and 'class="l-succeeded"' in row and 'class="l-dead"' in row
    assert re.search(r'alarm" data-label="Dead, 15 min">7<', row), "7 dead in the last 15 min"
    mail = html.split('data-queue="mail"', 1)[1].split("</tr>", 1)[0]
    assert "no live worker" in mail, "mail has a due task and only a silent worker"
    assert "no live worker" not in row
    groups = html.split('id="top-groups"', 1)[1]
    assert "GatewayDown" in groups and ">20<" in groups


async def test_pause_and_resume_through_confirmation_pages(scene: Any) -> None:
    client, _, sink = scene
    page = await client.get("/ui/queues/pay")
    assert 'href="/ui/queues/pay/control?do=pause&amp;key=%2A"' in page.text
    confirm = await client.get("/ui/queues/pay/control?do=pause&kind=handler&name=charge")
    assert confirm.status_code == 200
    words = _text(confirm.text)
    assert "Pause handler charge of pay?" in words and "5 task(s)" in words
    csrf = _csrf(confirm.text)
    form = {"csrf": csrf, "do": "pause", "key": "handler:charge"}
    no_reason = await client.post("/ui/queues/pay/control", data=form)
    assert no_reason.status_code == 422 and "give a reason" in no_reason.text
    forged = await client.post("/ui/queues/pay/control", data={**form, "csrf": "x", "reason": "r"})
    assert forged.status_code == 403
    done = await client.post(
        "/ui/queues/pay/control", data={**form, "reason": "PSP maintenance"}, follow_redirects=False
    )
    assert done.status_code == 303
    assert done.headers["location"] == "/ui/queues/pay?done=pause&count=1#controls"
    after = await client.get(done.headers["location"])
    assert "Paused: no worker claims these tasks" in after.text
    controls = _text(after.text.split('id="controls"', 1)[1].split("</section>", 1)[0])
    assert "paused handler charge 5 task(s) held · by alice" in controls
    assert "PSP maintenance" in controls
    resume = await client.get("/ui/queues/pay/control?do=resume&key=handler%3Acharge")
    await client.post(
        "/ui/queues/pay/control",
        data={"csrf": _csrf(resume.text), "do": "resume", "key": "handler:charge", "reason": "ok"},
    )
    assert [(r.action, r.selector, r.reason) for r in sink.records] == [
        ("pause", {"key": "handler:charge"}, "PSP maintenance"),
        ("resume", {"key": "handler:charge"}, "ok"),
    ]
    bad = await client.get("/ui/queues/pay/control?do=open&key=%2A")
    assert bad.status_code == 422 and "handler:&lt;ref&gt; or dep:&lt;name&gt;" in bad.text
    nothing = await client.get("/ui/queues/pay/control?do=explode&key=%2A")
    assert nothing.status_code == 404


async def test_a_reader_sees_the_controls_but_cannot_act(scene: Any) -> None:
    client, _, _ = scene
    await client.post("/ui/logout", data={"csrf": _csrf((await client.get("/ui")).text)})
    await _login(client, READ_TOKEN)
    page = await client.get("/ui/queues/pay")
    assert "handler charge" in page.text and "Close…" not in page.text
    assert "Pause the queue…" not in page.text
    refused = await client.get("/ui/queues/pay/control?do=close&key=handler%3Acharge")
    assert refused.status_code == 403


async def test_close_a_breaker_by_hand(scene: Any) -> None:
    client, store, sink = scene
    page = await client.get("/ui/queues/pay")
    assert 'href="/ui/queues/pay/control?do=close&amp;key=handler%3Acharge"' in page.text
    confirm = await client.get("/ui/queues/pay/control?do=close&key=handler%3Acharge")
    assert "5 task(s) held are let go over the ramp" in _text(confirm.text)
    await client.post(
        "/ui/queues/pay/control",
        data={
            "csrf": _csrf(confirm.text),
            "do": "close",
            "key": "handler:charge",
            "reason": "PSP back",
        },
    )
    (control,) = await store.list_controls("pay")
    assert flow.breaker_of(control).state is flow.State.CLOSED
    assert [(r.action, r.reason) for r in sink.records] == [("breaker.close", "PSP back")]
    overview = await client.get("/ui")
    assert "Breaker of handler charge" not in overview.text


async def test_a_paced_redrive_from_the_confirmation_page(scene: Any) -> None:
    client, store, sink = scene
    query = "state=dead&scope=filter&action=redrive&error_type=GatewayDown&handler_ref=charge"
    confirm = await client.get(f"/ui/queues/pay/confirm?{query}")
    assert 'name="rate"' in confirm.text and "per second" in confirm.text
    form = {
        "csrf": _csrf(confirm.text),
        "action": "redrive",
        "state": "dead",
        "scope": "filter",
        "error_type": "GatewayDown",
        "handler_ref": "charge",
        "reason": "PSP back",
        "rate": "2",
    }
    done = await client.post("/ui/queues/pay/act", data=form, follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == "/ui/queues/pay?state=dead&done=paced&count=20#controls"
    page = await client.get("/ui/queues/pay?state=dead&done=paced&count=20")
    assert "Paced redrive of 20 task(s) started" in page.text
    (op,) = await client.app.state.node.admin.paced_redrives("pay")
    assert op.driver == client.app.state.node.id and op.rate == 2
    section = page.text.split('id="redrives"', 1)[1].split("</ul>", 1)[0]
    assert "<progress" in section and f"do=cancel-redrive&amp;id={op.id}" in section

    async def started() -> bool:
        return (await client.app.state.node.admin.paced_redrive("pay", op.id)).done >= 1

    await wait_until(started, what="the node returns the first tasks")
    confirm = await client.get(f"/ui/queues/pay/control?do=cancel-redrive&id={op.id}")
    assert "not yet returned stay in the DLQ" in _text(confirm.text)
    await client.post(
        "/ui/queues/pay/control",
        data={"csrf": _csrf(confirm.text), "do": "cancel-redrive", "id": op.id, "reason": "stop"},
    )
    cancelled = await client.app.state.node.admin.paced_redrive("pay", op.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_by == "alice (admin)"
    assert (await store.stats("pay")).dlq_depth > 0
    assert [r.action for r in sink.records] == ["redrive.cancel"]
    bad = await client.post("/ui/queues/pay/act", data={**form, "rate": "fast"})
    assert bad.status_code == 422 and "positive rate" in bad.text


async def test_retry_now_from_a_pending_tasks_page(scene: Any) -> None:
    client, store, sink = scene
    page = await client.get("/ui/tasks/held-0")
    words = _text(page.text)
    assert "Held back: the breaker of handler charge is open" in words
    assert 'id="retry-now"' in page.text
    confirm = await client.get("/ui/queues/pay/confirm?ids=held-0&state=pending&action=retry_now")
    assert "Retry now 1 task(s)?" in _text(confirm.text)
    done = await client.post(
        "/ui/queues/pay/act",
        data={
            "csrf": _csrf(confirm.text),
            "action": "retry_now",
            "state": "pending",
            "ids": "held-0",
            "scope": "ids",
            "reason": "PSP back",
        },
        follow_redirects=False,
    )
    assert done.headers["location"] == "/ui/queues/pay?state=pending&done=retry_now&count=1"
    task = await store.get("held-0")
    assert task.next_attempt_at is not None and task.next_attempt_at <= await store.now()
    again = await client.get("/ui/tasks/held-0")
    assert 'id="retry-now"' not in again.text, "a due task has nothing to retry now"
    assert [(r.action, r.count) for r in sink.records] == [("retry_now", 1)]
    pending = await client.get("/ui/queues/pay?state=pending")
    assert "held: breaker open" in pending.text


async def test_workers_and_silent_holders_are_flagged(scene: Any) -> None:
    client, _, _ = scene
    page = await client.get("/ui/workers")
    words = _text(page.text)
    assert "2 live, 1 silent" in words, "the node, web-1 live; mail-7 silent"
    assert "silent for 3 min" in words
    assert "Still holds 1 task(s): mail-0" in words
    assert 'href="/ui/workers" aria-current="page"' in page.text
    running = await client.get("/ui/queues/mail?state=running")
    row = running.text.split('data-id="mail-0"', 1)[1].split("</tr>", 1)[0]
    assert re.search(r"held by a silent worker since 3 min; its lease expires in \d+ s", row)
    assert "No live worker serves this queue." in running.text
    task = await client.get("/ui/tasks/mail-0")
    assert re.search(
        r"Held by a silent worker since 3 min.*its lease expires in \d+ s", _text(task.text)
    )
    pay = await client.get("/ui/queues/pay")
    assert "No live worker serves this queue." not in pay.text
    assert "1 live worker(s) claim from it." in _text(pay.text)


class Version2Storage(MemoryStorage):
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities(), control=False, worker_registry=False, counters=False
        )


async def test_a_store_without_the_capabilities_is_said_plainly() -> None:
    async with Version2Storage() as store:
        await store.enqueue(Envelope(id="t", queue="q", handler_ref="h"), delay=timedelta(hours=1))
        async with AsyncTestClient(app=create_app(node_settings(), storage=store)) as client:
            await _login(client, ADMIN_TOKEN)
            overview = await client.get("/ui")
            assert overview.status_code == 200
            assert "no rates: Version2Storage does not offer the 'counters'" in _text(overview.text)
            queue = await client.get("/ui/queues/q")
            assert queue.status_code == 200
            assert "No pauses, breakers or paced redrives here: Version2Storage" in _text(
                queue.text
            )
            assert "Retry now" not in queue.text and "No rates: " in queue.text
            workers = await client.get("/ui/workers")
            assert "No worker registry: Version2Storage does not offer" in _text(workers.text)
            task = await client.get("/ui/tasks/t")
            assert task.status_code == 200 and 'id="retry-now"' not in task.text
            confirm = await client.get("/ui/queues/q/control?do=pause&key=%2A")
            assert "This store keeps no control records" in confirm.text
            dead = await client.get("/ui/queues/q/confirm?state=dead&scope=filter&action=redrive")
            assert 'name="rate"' not in dead.text


async def test_every_state_of_a_task_page_still_renders(scene: Any) -> None:
    client, store, _ = scene
    for task_id in ("pay-0", "held-1", "mail-0", "mail-1"):
        response = await client.get(f"/ui/tasks/{task_id}")
        assert response.status_code == 200, task_id
    assert (await store.get("pay-0")).status is Status.DEAD
