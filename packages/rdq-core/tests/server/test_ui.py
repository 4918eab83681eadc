"""The web UI without a browser: sessions, CSRF, rights, confirmation, escaping."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.audit import MemoryAuditSink
from rdq.spi import Attempt, Envelope, Outcome, Status
from rdq_memory import MemoryStorage

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
    form = await client.get("/ui/login")
    bad = await client.post(
        "/ui/login", data={"token": "nope-nope-nope-nope", "login_csrf": _login_nonce(form.text)}
    )
    assert bad.status_code == 401 and "not valid" in bad.text
    client.cookies.set("rdq_session", "YWxpY2U.9999999999.bm9uY2U.forged", path="/ui")
    response = await client.get("/ui", follow_redirects=False)
    assert response.status_code == 303


@pytest.mark.asyncio
async def test_redrive_through_the_confirmation_with_csrf(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    await _dead(memory_store, "t1")
    await _login(client, ADMIN_TOKEN)
    page = await client.get("/ui/queues/default/dlq")
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text, "content is escaped"
    assert "&lt;script&gt;" in page.text
    confirm = await client.get(
        "/ui/queues/default/dlq/confirm", params={"action": "redrive", "ids": "t1"}
    )
    assert confirm.status_code == 200 and "<strong>1</strong>" in confirm.text
    token = _csrf(confirm.text)
    forged = await client.post(
        "/ui/queues/default/dlq/redrive", data={"ids": "t1", "scope": "ids", "csrf": "forged"}
    )
    assert forged.status_code == 403
    assert (await memory_store.get("t1")).status == Status.DEAD
    done = await client.post(
        "/ui/queues/default/dlq/redrive",
        follow_redirects=False,
        data={"ids": "t1", "scope": "ids", "csrf": token, "reason": "ok"},
    )
    assert done.status_code == 303, done.text
    assert (await memory_store.get("t1")).status == Status.PENDING
    assert [(r.actor, r.action, r.count, r.reason) for r in audit_sink.records] == [
        ("alice", "redrive", 1, "ok")
    ]
    landing = await client.get(done.headers["location"])
    assert "1 task(s) redriven." in landing.text


@pytest.mark.asyncio
async def test_readers_browse_but_cannot_act(client: Client, memory_store: MemoryStorage) -> None:
    await _dead(memory_store, "t1")
    await _login(client, READ_TOKEN)
    page = await client.get("/ui/queues/default/dlq")
    assert page.status_code == 200 and "t1" in page.text
    assert "Redrive selected" not in page.text
    detail = await client.get("/ui/tasks/t1")
    assert detail.status_code == 200 and "Redrive…" not in detail.text
    confirm = await client.get(
        "/ui/queues/default/dlq/confirm", params={"action": "purge", "ids": "t1"}
    )
    assert confirm.status_code == 403
    queues = await client.get("/ui")
    token = _csrf(queues.text)
    purge = await client.post(
        "/ui/queues/default/dlq/purge", data={"ids": "t1", "scope": "ids", "csrf": token}
    )
    assert purge.status_code == 403
    assert (await memory_store.get("t1")).status == Status.DEAD


@pytest.mark.asyncio
async def test_bad_filters_and_cursors_are_shown_not_crashed(client: Client) -> None:
    await _login(client, ADMIN_TOKEN)
    page = await client.get("/ui/queues/default/dlq", params={"after": "yesterday"})
    assert page.status_code == 200 and "RFC 3339" in page.text
    page = await client.get("/ui/queues/default/dlq", params={"cursor": "garbage"})
    assert page.status_code == 200 and "cursor" in page.text
    missing = await client.get("/ui/tasks/nope")
    assert missing.status_code == 404


@pytest.mark.asyncio
async def test_dlq_pages_with_cursor_and_purges_one_task_from_its_page(
    client: Client, memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> None:
    for i in range(60):
        await _dead(memory_store, f"t{i:02d}")
    await _login(client, ADMIN_TOKEN)
    first = await client.get("/ui/queues/default/dlq")
    assert first.text.count('class="task-link"') == 50
    next_url = re.search(r'href="([^"]+)" id="next-page"', first.text)
    assert next_url is not None
    second = await client.get(next_url.group(1).replace("&amp;", "&"))
    assert second.text.count('class="task-link"') == 10
    assert "t59" in second.text and "t00" not in second.text
    assert 'id="next-page"' not in second.text

    detail = await client.get("/ui/tasks/t07")
    purge_link = re.search(r'href="([^"]+)">Purge…', detail.text)
    assert purge_link is not None
    confirm = await client.get(purge_link.group(1).replace("&amp;", "&"))
    assert "deleted for good" in confirm.text
    done = await client.post(
        "/ui/queues/default/dlq/purge",
        follow_redirects=False,
        data={"ids": "t07", "scope": "ids", "csrf": _csrf(confirm.text)},
    )
    assert done.status_code == 303
    assert (await memory_store.stats("default")).dlq_depth == 59
    assert [(r.action, r.selector, r.count) for r in audit_sink.records] == [
        ("purge", {"ids": ["t07"]}, 1)
    ]
