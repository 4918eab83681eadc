"""The console without a browser: sessions, CSRF, rights, confirmation with a count and a reason,
escaping, every state's tab, search, the audit page, and bad input shown rather than crashed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.audit import MemoryAuditSink
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_memory import MemoryStorage
from rdq_memory.testing import put_corrupt_task

from .conftest import ADMIN_TOKEN, READ_TOKEN

Client = AsyncTestClient[Litestar]


async def _dead(store: MemoryStorage, task_id: str, error_type: str = "Boom") -> None:
    await store.enqueue(Envelope(id=task_id, queue="default", handler_ref="<b>h</b>"))
    for claim in await store.claim_due("default", 10, timedelta(seconds=30)):
        now = datetime.now(UTC)
        await store.dead_letter(
            claim.task.id,
            claim.token,
            Attempt(
                number=1,
                outcome=Outcome.FAILED,
                error_type=error_type,
                error_message="<script>alert(1)</script>",
                traceback="Traceback (most recent call last):\n<img src=x onerror=alert(1)>\n",
                started_at=now,
                finished_at=now,
            ),
        )


def _login_nonce(html: str) -> str:
    match = re.search(r'name="login_csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


async def _login(client: Client, token: str) -> None:
    form = await client.get("/ui/login")
    response = await client.post(
        "/ui/login",
        data={"token": token, "login_csrf": _login_nonce(form.text)},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert token not in cookie


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


@pytest.mark.asyncio
async def test_pages_need_a_session(client: Client) -> None:
    response = await client.get("/ui", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    for path in ("/ui/queues/default", "/ui/tasks/x", "/ui/audit", "/ui/search?q=x"):
        response = await client.get(path, follow_redirects=False)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/ui/login?next="), path
    form = await client.get("/ui/login")
    bad = await client.post(
        "/ui/login", data={"token": "nope-nope-nope-nope", "login_csrf": _login_nonce(form.text)}
    )
    assert bad.status_code == 401 and "not valid" in bad.text
    client.cookies.set("rdq_session", "YWxpY2U.9999999999.bm9uY2U.forged", path="/ui")
    response = await client.get("/ui", follow_redirects=False)
    assert response.status_code == 303


@pytest.mark.asyncio
async def test_pages_carry_the_security_headers(client: Client) -> None:
    await _login(client, READ_TOKEN)
    response = await client.get("/ui")
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "form-action 'self'" in policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    assert "<script>" not in response.text.replace('<script src="/ui/static/console.js"', "")


@pytest.mark.asyncio
async def test_redrive_through_the_confirmation_with_csrf_and_a_reason(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    await _dead(memory_store, "t1")
    await _login(client, ADMIN_TOKEN)
    page = await client.get("/ui/queues/default", params={"state": "dead"})
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text, "content is escaped"
    assert "&lt;script&gt;" in page.text and "&lt;b&gt;h&lt;/b&gt;" in page.text
    confirm = await client.get(
        "/ui/queues/default/confirm", params={"action": "redrive", "ids": "t1", "state": "dead"}
    )
    assert confirm.status_code == 200 and "<strong>1</strong>" in confirm.text
    token = _csrf(confirm.text)
    base = {"ids": "t1", "scope": "ids", "state": "dead", "action": "redrive"}
    forged = await client.post("/ui/queues/default/act", data={**base, "csrf": "forged"})
    assert forged.status_code == 403
    no_reason = await client.post("/ui/queues/default/act", data={**base, "csrf": token})
    assert no_reason.status_code == 422 and "reason" in no_reason.text
    assert (await memory_store.get("t1")).status == Status.DEAD
    done = await client.post(
        "/ui/queues/default/act",
        follow_redirects=False,
        data={**base, "csrf": token, "reason": "relay fixed"},
    )
    assert done.status_code == 303, done.text
    assert (await memory_store.get("t1")).status == Status.PENDING
    assert [(r.actor, r.action, r.count, r.reason) for r in audit_sink.records] == [
        ("alice (admin)", "redrive", 1, "relay fixed")
    ]
    landing = await client.get(done.headers["location"])
    assert "1 task(s) redriven." in landing.text
    audit = await client.get("/ui/audit")
    assert "relay fixed" in audit.text and "alice" in audit.text


@pytest.mark.asyncio
async def test_readers_browse_but_cannot_act(client: Client, memory_store: MemoryStorage) -> None:
    await _dead(memory_store, "t1")
    await _login(client, READ_TOKEN)
    page = await client.get("/ui/queues/default", params={"state": "dead"})
    assert page.status_code == 200 and "t1" in page.text
    assert "Redrive selected" not in page.text and 'name="ids"' not in page.text
    detail = await client.get("/ui/tasks/t1")
    assert detail.status_code == 200 and "Redrive…" not in detail.text
    confirm = await client.get(
        "/ui/queues/default/confirm", params={"action": "purge", "ids": "t1", "state": "dead"}
    )
    assert confirm.status_code == 403
    token = _csrf((await client.get("/ui")).text)
    purge = await client.post(
        "/ui/queues/default/act",
        data={
            "ids": "t1",
            "scope": "ids",
            "state": "dead",
            "action": "purge",
            "csrf": token,
            "reason": "x",
        },
    )
    assert purge.status_code == 403
    assert (await memory_store.get("t1")).status == Status.DEAD


@pytest.mark.asyncio
async def test_actions_that_do_not_fit_the_state_are_refused(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "t1")
    await _login(client, ADMIN_TOKEN)
    for params in (
        {"action": "cancel", "ids": "t1", "state": "dead"},
        {"action": "redrive", "ids": "t1", "state": "pending"},
        {"action": "purge", "scope": "filter", "state": "cancelled"},
        {"action": "delete", "ids": "t1", "state": "dead"},
    ):
        response = await client.get("/ui/queues/default/confirm", params=params)
        assert response.status_code in (404, 422), params


@pytest.mark.asyncio
async def test_every_state_has_its_tab_and_cancel_works_from_pending(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for i in range(3):
        await memory_store.enqueue(Envelope(id=f"p{i}", queue="default", handler_ref="h"))
    await memory_store.claim_due("default", 1, timedelta(seconds=60), worker_id="box-1:w")
    await _login(client, ADMIN_TOKEN)
    running = await client.get("/ui/queues/default", params={"state": "running"})
    assert "box-1:w" in running.text and "p0" in running.text
    for state in ("pending", "running", "dead", "succeeded", "cancelled"):
        page = await client.get("/ui/queues/default", params={"state": state})
        assert page.status_code == 200, state
        assert re.search(r'aria-current="page">\s*' + state.capitalize(), page.text), state
    confirm = await client.get(
        "/ui/queues/default/confirm",
        params={"action": "cancel", "state": "pending", "scope": "filter"},
    )
    assert "<strong>2</strong>" in confirm.text
    done = await client.post(
        "/ui/queues/default/act",
        follow_redirects=False,
        data={
            "action": "cancel",
            "state": "pending",
            "scope": "filter",
            "csrf": _csrf(confirm.text),
            "reason": "duplicates",
        },
    )
    assert done.status_code == 303
    assert (await memory_store.stats("default")).cancelled == 2
    assert audit_sink.records[-1].selector == {"filter": {"status": "PENDING"}}
    cancelled = await client.get("/ui/queues/default", params={"state": "cancelled"})
    assert "p1" in cancelled.text and "p2" in cancelled.text


@pytest.mark.asyncio
async def test_search_and_the_task_page(client: Client, memory_store: MemoryStorage) -> None:
    await _dead(memory_store, "t1", error_type="KeyError")
    await _login(client, READ_TOKEN)
    found = await client.get("/ui/search", params={"q": " t1 "}, follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == "/ui/tasks/t1"
    missing = await client.get("/ui/search", params={"q": "t2"})
    assert missing.status_code == 404
    assert "No task’s id starts with t2" in _words(missing.text)
    bad = await client.get("/ui/search", params={"q": "no spaces allowed"})
    assert bad.status_code == 422
    task = await client.get("/ui/tasks/t1")
    assert "Dead-lettered" in task.text and "KeyError" in task.text
    assert '<details class="tb" id="traceback">' in task.text, "tracebacks are folded"
    linked = await client.get("/ui/tasks/t1", params={"traceback": "open"})
    assert '<details class="tb" id="traceback" open>' in linked.text, "unless linked open"
    assert "&lt;img src=x" in task.text and "<img src=x" not in task.text


@pytest.mark.asyncio
async def test_bad_filters_and_cursors_are_shown_not_crashed(client: Client) -> None:
    await _login(client, ADMIN_TOKEN)
    page = await client.get("/ui/queues/default", params={"state": "dead", "after": "yesterday"})
    assert page.status_code == 200 and "RFC 3339" in page.text
    page = await client.get("/ui/queues/default", params={"cursor": "garbage"})
    assert page.status_code == 200 and "cursor" in page.text
    page = await client.get("/ui/queues/bad%20queue")
    assert page.status_code == 422
    page = await client.get("/ui/audit", params={"cursor": "garbage"})
    assert page.status_code == 200 and "cursor" in page.text


@pytest.mark.asyncio
async def test_dead_tasks_page_with_cursor_and_purge_one_from_its_page(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for i in range(60):
        await _dead(memory_store, f"t{i:02d}")
    await _login(client, ADMIN_TOKEN)
    first = await client.get("/ui/queues/default", params={"state": "dead"})
    assert first.text.count('class="task-link') == 50
    next_url = re.search(r'href="([^"]+)" id="next-page"', first.text)
    assert next_url is not None
    second = await client.get(next_url.group(1).replace("&amp;", "&"))
    assert second.text.count('class="task-link') == 10
    listed = second.text.split('id="tasks"', 1)[1]
    assert "t59" in listed and "t00" not in listed
    assert 'id="next-page"' not in second.text

    detail = await client.get("/ui/tasks/t07")
    purge_link = re.search(r'href="([^"]+)">Purge…', detail.text)
    assert purge_link is not None
    confirm = await client.get(purge_link.group(1).replace("&amp;", "&"))
    assert "deleted for good" in confirm.text
    done = await client.post(
        "/ui/queues/default/act",
        follow_redirects=False,
        data={
            "ids": "t07",
            "scope": "ids",
            "state": "dead",
            "action": "purge",
            "reason": "poison",
            "csrf": _csrf(confirm.text),
        },
    )
    assert done.status_code == 303
    assert (await memory_store.stats("default")).dlq_depth == 59
    assert [(r.action, r.selector, r.count) for r in audit_sink.records] == [
        ("purge", {"ids": ["t07"]}, 1)
    ]


@pytest.mark.asyncio
async def test_each_group_shows_a_sample_of_its_error(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "t1", error_type="KeyError")
    await _dead(memory_store, "t2", error_type="GatewayDown")
    await _login(client, READ_TOKEN)
    page = await client.get("/ui/queues/default", params={"state": "dead"})
    groups = page.text.split('id="groups"', 1)[1].split("</table>", 1)[0]
    assert groups.count('class="sample-link"') == 2
    assert 'href="/ui/tasks/t1?traceback=open#traceback" class="sample-link">traceback →' in groups
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in groups, "the sample message, escaped"


def _words(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.asyncio
async def test_attempts_left_only_for_queues_the_node_knows(memory_store: MemoryStorage) -> None:
    import rdq
    from rdq.server import create_app

    from .conftest import node_settings

    app = rdq.App()
    app.queue("pay", max_attempts=4)
    await memory_store.enqueue(Envelope(id="known", queue="pay", handler_ref="h"))
    await memory_store.enqueue(Envelope(id="unknown", queue="other", handler_ref="h"))
    node = create_app(node_settings(), storage=memory_store, engine_app=app)
    async with AsyncTestClient(node) as client:
        await _login(client, READ_TOKEN)
        known = _words((await client.get("/ui/tasks/known")).text)
        assert "it will be attempt #1, the 1st of its 4; 3 more after it." in known
        assert "of its" not in _words((await client.get("/ui/tasks/unknown")).text)


@pytest.mark.asyncio
async def test_attempts_left_count_as_the_engine_does(memory_store: MemoryStorage) -> None:
    """The first of 5 attempts, running, leaves 4 after it; an attempt that used none (a
    DEFERRED one, held while a dependency was down) is not counted, as rdq.retry counts."""
    import rdq
    from rdq.server import create_app

    from .conftest import node_settings

    app = rdq.App()
    app.queue("pay", max_attempts=5)
    for task_id in ("first", "held-once", "last"):
        await memory_store.enqueue(Envelope(id=task_id, queue="pay", handler_ref="h"))
    claims = {c.task.id: c for c in await memory_store.claim_due("pay", 3, timedelta(seconds=60))}
    now = datetime.now(UTC)
    deferred = Attempt(number=1, outcome=Outcome.DEFERRED, started_at=now, finished_at=now)
    later = now + timedelta(hours=1)
    await memory_store.reschedule("held-once", claims["held-once"].token, deferred, later)
    for n in range(1, 5):
        failed = Attempt(number=n, outcome=Outcome.FAILED, error_type="E", finished_at=now)
        await memory_store.reschedule("last", claims["last"].token, failed, now)
        claims["last"] = (await memory_store.claim_due("pay", 1, timedelta(seconds=60)))[0]
    node = create_app(node_settings(), storage=memory_store, engine_app=app)
    async with AsyncTestClient(node) as client:
        await _login(client, READ_TOKEN)
        first = _words((await client.get("/ui/tasks/first")).text)
        assert "This is attempt #1, the 1st of its 5; 4 more after it." in first
        held = _words((await client.get("/ui/tasks/held-once")).text)
        assert "it will be attempt #2, the 1st of its 5 counted" in held
        assert "1 earlier one(s) not counted" in held and "4 more after it." in held
        last = _words((await client.get("/ui/tasks/last")).text)
        assert "This is attempt #5, the 5th of its 5; the last: if it fails" in last


@pytest.mark.asyncio
async def test_a_corrupt_task_is_shown_with_what_is_wrong(
    client: Client, memory_store: MemoryStorage
) -> None:
    await put_corrupt_task(memory_store, "default", "broken", raw='{"id": "broken", "retry": 7')
    await _login(client, READ_TOKEN)
    listed = await client.get("/ui/queues/default", params={"state": "pending"})
    row = listed.text.split('data-id="broken"', 1)[1].split("</tr>", 1)[0]
    assert "corrupt" in row
    page = await client.get("/ui/tasks/broken")
    assert page.status_code == 200
    assert "stored form does not decode" in page.text
