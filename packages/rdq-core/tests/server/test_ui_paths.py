"""The console on an on-call engineer's paths: an incident link through the login, a queue
opening on the tab that has something, a long error folded above its traceback, where a page
is in its list and how many rows it shows, finding a task by the start of its id."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.spi import Attempt, Envelope, Outcome, Selector
from rdq_memory import MemoryStorage

from .conftest import READ_TOKEN

Client = AsyncTestClient[Litestar]


def _nonce(html: str) -> str:
    match = re.search(r'name="login_csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def _words(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", text).split())


async def _log_in(client: Client, form_url: str = "/ui/login", **fields: str) -> str:
    """Log in through the form at ``form_url``; the URL the login sends the browser to."""
    form = await client.get(form_url)
    found = re.findall(r'<input type="hidden" name="(next)" value="([^"]*)"', form.text)
    hidden = {name: html.unescape(value) for name, value in found}
    data = {"token": READ_TOKEN, "login_csrf": _nonce(form.text), **hidden, **fields}
    response = await client.post("/ui/login", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    location: str = response.headers["location"]
    return location


async def _dead(
    store: MemoryStorage, queue: str, ids: list[str], message: str = "boom", handler: str = "h"
) -> None:
    for task_id in ids:
        await store.enqueue(Envelope(id=task_id, queue=queue, handler_ref=handler))
    for claim in await store.claim_due(queue, len(ids), timedelta(seconds=30)):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="Boom",
            error_message=message,
            traceback="Traceback (most recent call last):\nBoom: boom\n",
            started_at=now,
            finished_at=now,
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)


@pytest.mark.asyncio
async def test_a_link_followed_before_logging_in_is_where_the_login_leads(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "payments", ["d1"])
    wanted = "/ui/queues/payments?state=dead&error_type=shop.GatewayDown"
    sent = await client.get(wanted, follow_redirects=False)
    assert sent.status_code == 303
    assert sent.headers["location"].startswith("/ui/login?next=")
    assert await _log_in(client, sent.headers["location"]) == wanted
    page = await client.get(wanted)
    assert page.status_code == 200 and "shop.GatewayDown" in page.text


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/ui",
        "https://evil.example/ui/queues/x",
        "/\\evil.example",
        "/ui\\..\\evil",
        "/uievil",
        "/v1/queues",
        "/ui/login",
        "/ui/tasks/x#frag",
        "javascript:alert(1)",
        "/ui/queues/x\r\nSet-Cookie: a=b",
    ],
)
async def test_the_login_never_leads_off_the_console(client: Client, target: str) -> None:
    form = await client.get("/ui/login", params={"next": target})
    assert 'name="next"' not in form.text, "a target refused is not even carried"
    assert await _log_in(client, next=target) == "/ui"


@pytest.mark.asyncio
async def test_a_queue_opens_on_the_tab_that_has_tasks_dead_first(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "full-dlq", ["d1", "d2"])
    await memory_store.enqueue(Envelope(id="p1", queue="full-dlq", handler_ref="h"))
    await memory_store.enqueue(Envelope(id="r1", queue="busy", handler_ref="h"))
    await memory_store.claim_due("busy", 1, timedelta(seconds=60))
    await memory_store.enqueue(Envelope(id="p2", queue="waiting", handler_ref="h"))
    await _log_in(client)

    async def current(queue: str) -> str:
        html = (await client.get(f"/ui/queues/{queue}")).text
        match = re.search(r'class="tab t-(\w+)[^"]*" aria-current="page"', html)
        assert match, html
        return match.group(1)

    assert await current("full-dlq") == "dead"
    assert await current("busy") == "running"
    assert await current("waiting") == "pending"
    assert await current("default") == "pending", "a declared queue with no task yet"
    typo = await client.get("/ui/queues/ful-dlq")
    assert typo.status_code == 404 and "did you mean &#39;full-dlq&#39;?" in typo.text
    asked = (await client.get("/ui/queues/full-dlq", params={"state": "pending"})).text
    assert 'class="tab t-pending" aria-current="page"' in asked, "a tab asked for is kept"


@pytest.mark.asyncio
async def test_a_long_error_message_is_folded_and_a_short_one_is_not(
    client: Client, memory_store: MemoryStorage
) -> None:
    long = "upstream said: " + "x" * 8_000
    await _dead(memory_store, "q", ["long"], message=long)
    await _dead(memory_store, "q", ["short"], message="502 Bad Gateway")
    await _log_in(client)
    page = (await client.get("/ui/tasks/long")).text
    folded = page.split('<details class="emsg long">', 1)
    assert len(folded) == 2, "the long message sits in a folded <details>"
    summary = folded[1].split("</summary>", 1)[0]
    assert "8,015 characters" in summary and len(summary) < 600
    assert long in folded[1], "the whole message is there, once opened"
    assert page.index("emsg long") < page.index('id="traceback"')
    short = (await client.get("/ui/tasks/short")).text
    assert '<p class="emsg">502 Bad Gateway</p>' in short and "emsg long" not in short


@pytest.mark.asyncio
async def test_a_paged_list_says_where_it_is_and_offers_page_sizes(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "q", [f"t{i:03d}" for i in range(60)])
    await _log_in(client)
    first = await client.get("/ui/queues/q", params={"state": "dead", "size": "25"})
    assert first.text.count('class="task-link') == 25
    assert "1–25 of 60" in _words(first.text)
    assert re.search(r'Per page: <a href="[^"]+">25</a>|<strong aria-current="true">25', first.text)
    seen = []
    url = re.search(r'href="([^"]+)" id="next-page"', first.text)
    while url is not None:
        page = await client.get(url.group(1).replace("&amp;", "&"))
        seen.append(re.search(r'id="position">([^<]+)<', page.text).group(1))  # type: ignore[union-attr]
        url = re.search(r'href="([^"]+)" id="next-page"', page.text)
    assert seen == ["26–50 of 60", "51–60 of 60"]
    bad = await client.get("/ui/queues/q", params={"state": "dead", "size": "7"})
    assert "size: choose 25, 50, 100 or 200 rows a page" in bad.text
    assert bad.text.count('class="task-link') == 50, "a size not offered: the default"
    filtered = await client.get(
        "/ui/queues/q", params={"state": "dead", "handler_ref": "h", "size": "100"}
    )
    assert "1–60 of 60" in _words(filtered.text), "the last page of a filtered list counts"


@pytest.mark.asyncio
async def test_a_redriven_task_says_so_in_words(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "q", ["again"])
    await memory_store.redrive("q", Selector(ids=["again"]))
    await _log_in(client)
    page = await client.get("/ui/queues/q", params={"state": "pending"})
    assert '<span class="redriven">redriven 1×</span>' in page.text
    assert "↻" not in page.text


@pytest.mark.asyncio
async def test_the_time_filters_show_their_format_beside_not_inside(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "q", ["d1"])
    await _log_in(client)
    form = (await client.get("/ui/queues/q", params={"state": "dead"})).text.split(
        'id="filters"', 1
    )[1]
    form = form.split("</form>", 1)[0]
    assert "placeholder" not in form, "an empty field looks empty"
    assert "RFC 3339 with an offset, such as" in _words(form)


@pytest.mark.asyncio
async def test_find_a_task_by_the_start_of_its_id(
    client: Client, memory_store: MemoryStorage
) -> None:
    await _dead(memory_store, "pay", ["order-43"])
    for task_id, queue in (("order-41", "pay"), ("order-42", "pay"), ("refund-7", "refunds")):
        await memory_store.enqueue(Envelope(id=task_id, queue=queue, handler_ref="h"))
    await _log_in(client)
    several = await client.get("/ui/search", params={"q": "order-4"})
    assert several.status_code == 200
    found = re.findall(r'<tr data-id="([^"]+)"', several.text)
    assert found == ["order-43", "order-41", "order-42"], "dead first, then pending"
    assert "Read every one of the 4 task(s)" in _words(several.text)
    one = await client.get("/ui/search", params={"q": "refund"}, follow_redirects=False)
    assert one.status_code == 303 and one.headers["location"] == "/ui/tasks/refund-7"
    scoped = await client.get("/ui/search", params={"q": "order", "queue": "refunds"})
    assert scoped.status_code == 404 and "No task’s id starts with order" in _words(scoped.text)
    exact = await client.get("/ui/search", params={"q": "order-42"}, follow_redirects=False)
    assert exact.headers["location"] == "/ui/tasks/order-42"
    bad = await client.get("/ui/search", params={"q": "order 4"})
    assert bad.status_code == 422 and "q: may hold only" in bad.text


@pytest.mark.asyncio
async def test_a_prefix_search_says_how_far_it_read(
    client: Client, memory_store: MemoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rdq.server._ui import _search

    monkeypatch.setattr(_search, "SCAN_BUDGET", 30)
    await memory_store.enqueue_batch(
        [Envelope(id=f"job-{i:03d}", queue="q", handler_ref="h") for i in range(100)]
    )
    await _log_in(client)
    page = await client.get("/ui/search", params={"q": "job-09"})
    words = _words(page.text)
    assert page.status_code == 404 and "Read 30 of 100 task(s)" in words
    assert "others may match" in words and "Name the queue" in words


@pytest.mark.asyncio
async def test_every_colour_of_both_schemes_is_a_value(client: Client) -> None:
    """A custom property defined as itself (``--fail: var(--fail)``) is invalid: whatever
    uses it is drawn in no colour (the failed line of a sparkline, a table head)."""
    css = (await client.get("/ui/static/console.css")).text
    defined = re.findall(r"--([a-z-]+):\s*([^;]+);", css)
    assert defined
    assert [name for name, value in defined if f"var(--{name})" in value] == []


@pytest.mark.asyncio
async def test_dead_tasks_no_count_has_seen_yet_are_grouped_on_the_overview(
    client: Client, memory_store: MemoryStorage
) -> None:
    """Tasks dead-lettered before any worker's per-minute counts reached the store (flushed
    every ten seconds), or long ago: the overview groups the deepest DLQs, never "none"."""
    await _dead(memory_store, "payments", ["d1", "d2", "d3"])
    await _log_in(client)
    html = (await client.get("/ui")).text
    section = html[html.index('id="top-groups"') :]
    assert "No task is dead-lettered" not in section
    assert "(of the deepest DLQs)" in section
    assert re.search(r'id="error-groups".*?>3</a>.*?payments', section, re.S), section
