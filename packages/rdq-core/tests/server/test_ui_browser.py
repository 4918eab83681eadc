"""The console in a real headless Chromium: triage an outage from the overview to a group
redrive and the audit page; a dependency down, from the breaker banner to closing it by hand
and a paced redrive; live refresh that keeps scroll and selection, the keyboard, and every
page readable at 390 px, 1400 px and on a 27" screen.

Needs Debian's ``chromium`` at /usr/bin/chromium (Playwright drives it; no browser download).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from rdq import flow
from rdq.audit import MemoryAuditSink
from rdq.config import Breaker
from rdq.server import create_app
from rdq.spi import Attempt, Control, Counts, Envelope, Outcome, Status, WorkerInfo
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings, running_node

CHROMIUM = os.environ.get("RDQ_CHROMIUM", "/usr/bin/chromium")
HAVE_CHROMIUM = Path(CHROMIUM).exists()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PATIENCE_MS = 60_000
"""How long an action or expectation may wait for the page before the test fails."""
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1400, "height": 900}
DESKTOP = {"width": 2560, "height": 1440}  # a 27" screen

pytestmark = [pytest.mark.browser, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Any]:
    if not HAVE_CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (CI installs Debian's chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.async_api import async_playwright, expect

    # Each expectation polls until it holds; its bound (Playwright's default is 5 s) only
    # matters when the page is wrong, so it is generous for a busy machine.
    expect.set_options(timeout=PATIENCE_MS)
    async with async_playwright() as playwright:
        instance = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            await instance.close()
            expect.set_options(timeout=5_000)


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/payments/tasks.py", line 38, in charge_card\n'
    "    receipt = await gateway.charge(order.card_token, order.amount_cents)\n"
    "payments.gateway.GatewayDown: 502 Bad Gateway from psp.example\n"
)


async def _dead(
    store: MemoryStorage, queue: str, plan: list[tuple[str, str, int]], first: int = 1
) -> None:
    """Dead-letter ``count`` tasks per ``(handler, error_type, count)``, numbered from
    ``first``."""
    n = first - 1
    for handler, _, count in plan:
        for _ in range(count):
            n += 1
            await store.enqueue(Envelope(id=f"{queue}-{n:04d}", queue=queue, handler_ref=handler))
    errors = {handler: error for handler, error, _ in plan}
    for claim in await store.claim_due(queue, 1000, timedelta(seconds=30), worker_id="box:w1"):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type=errors[claim.task.handler_ref],
            error_message="502 Bad Gateway from psp.example",
            traceback=TRACEBACK,
            started_at=now - timedelta(milliseconds=120),
            finished_at=now,
            worker_id="box:w1",
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)


class _Clock:
    """The store's clock: this machine's, or ``behind`` it."""

    def __init__(self) -> None:
        self.behind = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) - self.behind


async def _log_in(browser: Any, base_url: str, viewport: dict[str, int]) -> Any:
    context = await browser.new_context(viewport=viewport)
    page = await context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    await page.goto(f"{base_url}/ui")
    assert page.url == f"{base_url}/ui/login"
    await page.fill("#token", ADMIN_TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}/ui")
    return page


async def _fits(page: Any) -> None:
    """Nothing on the page is wider than the window (no sideways scrolling)."""
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url} is {width}px wide"


async def test_triage_an_outage_from_overview_to_audit(browser: Any, tmp_path: Path) -> None:
    from playwright.async_api import expect

    queue = f"pay-{uuid.uuid4().hex[:6]}"
    sink = MemoryAuditSink()
    async with MemoryStorage() as store:
        await _dead(
            store,
            queue,
            [("charge_card", "GatewayDown", 12), ("send_receipt", "KeyError", 4)],
        )
        app = create_app(node_settings(queues=[queue]), storage=store, audit_sinks=[sink])
        async with running_node(app) as base_url:
            page = await _log_in(browser, base_url, DESKTOP)
            row = page.locator("#queues tbody tr", has_text=queue)
            await expect(row.locator("a.dlq-link")).to_have_text("16")
            await page.screenshot(path=str(tmp_path / "overview.png"))
            await row.locator("a.dlq-link").click()

            groups = page.locator("#groups tbody tr")
            await expect(groups).to_have_count(2)
            await expect(groups.first).to_contain_text("GatewayDown")
            await expect(groups.first).to_contain_text("12")
            await groups.first.locator("a", has_text="Show").click()
            await expect(page.locator("#tasks tbody tr")).to_have_count(12)

            await page.locator("a.task-link").first.click()
            await expect(page.locator("h1")).to_contain_text(f"{queue}-0001")
            trace = page.locator("details.tb").first
            await expect(trace).not_to_have_attribute("open", "")  # folded by default
            await trace.locator("summary").click()
            await expect(trace.locator("pre")).to_contain_text("GatewayDown: 502 Bad Gateway")
            await page.screenshot(path=str(tmp_path / "task.png"), full_page=True)

            await page.go_back()
            await page.go_back()
            await (
                page.locator("#groups tbody tr", has_text="GatewayDown")
                .locator("a", has_text="Redrive")
                .click()
            )
            await expect(page.locator("#summary")).to_contain_text("12")
            await page.click("#confirm button[type=submit]")  # no reason: the form refuses
            await expect(page.locator("#confirm")).to_be_visible()
            await page.fill("#reason", "PSP back (INC-812)")
            await page.click("#confirm button[type=submit]")
            redriven = "12 task(s) redriven. Matched 12, already gone 0."
            await expect(page.locator(".flash")).to_contain_text(redriven)
            await expect(page.locator("#groups tbody tr")).to_have_count(1)

            await (
                page.locator("#groups tbody tr", has_text="KeyError")
                .locator("a", has_text="Purge")
                .click()
            )
            await expect(page.locator("#summary")).to_contain_text("4")
            await page.fill("#reason", "orders deleted upstream")
            await page.click("#confirm button[type=submit]")
            flash = page.locator(".flash")
            await expect(flash).to_contain_text("4 task(s) purged. Matched 4, already gone 0.")

            await page.click("nav.nav a:text-is('Audit')")
            rows = page.locator("#audit tbody tr")
            await expect(rows).to_have_count(2)
            await expect(rows.first).to_contain_text("orders deleted upstream")
            await expect(rows.nth(1)).to_contain_text("PSP back (INC-812)")
            await page.screenshot(path=str(tmp_path / "audit.png"))

        assert (await store.stats(queue)).pending == 12
        assert [(r.action, r.count) for r in sink.records] == [("redrive", 12), ("purge", 4)]


async def test_search_by_id_with_the_keyboard(browser: Any) -> None:
    from playwright.async_api import expect

    async with MemoryStorage() as store:
        await store.enqueue(Envelope(id="order-42", queue="q", handler_ref="h"))
        async with running_node(create_app(node_settings(), storage=store)) as base_url:
            page = await _log_in(browser, base_url, PHONE)
            await page.keyboard.press("/")
            await expect(page.locator("#q")).to_be_focused()
            await page.keyboard.type("order-42")
            await page.keyboard.press("Enter")
            await expect(page.locator("h1")).to_contain_text("order-42")
            await expect(page.locator("#now")).to_contain_text("Waiting")
            await page.keyboard.press("/")
            await page.keyboard.type("order-43")
            await page.keyboard.press("Enter")
            await expect(page.locator("#found-h")).to_contain_text("No task’s id starts with")
            await page.keyboard.press("/")
            await page.keyboard.type("order-")  # the start of an id: its one match opens
            await page.keyboard.press("Enter")
            await expect(page.locator("h1")).to_contain_text("order-42")
            # Every control of a queue page is reachable with Tab.
            await page.goto(f"{base_url}/ui/queues/q")
            reached: set[str] = set()
            for _ in range(60):
                await page.keyboard.press("Tab")
                reached.add(await page.evaluate("document.activeElement.textContent.trim()"))
            assert {"Filter", "Dead 0", "Cancel selected…"} <= {
                " ".join(r.split()) for r in reached
            }


async def test_live_refresh_keeps_scroll_and_selection(browser: Any) -> None:
    from playwright.async_api import expect

    queue = "live"
    async with MemoryStorage() as store:
        await _dead(store, queue, [("h", "Boom", 40)])
        async with running_node(create_app(node_settings(), storage=store)) as base_url:
            page = await _log_in(browser, base_url, {"width": 1280, "height": 600})
            await page.goto(f"{base_url}/ui/queues/{queue}?state=dead")
            await page.check(f"input[aria-label='select {queue}-0030']")
            await page.locator(f"tr[data-id='{queue}-0030']").scroll_into_view_if_needed()
            await page.mouse.move(5, 590)
            row = page.locator(f"tr[data-id='{queue}-0030']")
            before = await row.bounding_box()
            assert before is not None and await page.evaluate("window.scrollY") > 0
            await _dead(store, "live", [("h2", "Other", 5)], first=100)  # five more arrive
            tab = page.locator("#tabs a[aria-current='page']")
            await expect(tab).to_contain_text("45")  # the page refreshes every 5 s
            # the change since the last refresh is marked (+5, or what a refresh caught midway)
            await expect(page.locator("#tabs .delta")).to_have_text(re.compile(r"^\+[1-5]$"))
            assert await page.is_checked(f"input[aria-label='select {queue}-0030']")
            after = await row.bounding_box()  # what the operator looks at stays put
            assert after is not None and abs(after["y"] - before["y"]) < 2, (before, after)
            await expect(page.locator("#picked")).to_have_text("1 selected:")


async def test_pages_fit_a_phone_and_a_big_screen(browser: Any, tmp_path: Path) -> None:
    store_clock = _Clock()
    async with MemoryStorage(clock=store_clock) as store:
        long_handler = "https://hooks.example.com/a/very/long/callback/path/" + "x" * 120
        await _dead(store, "q" * 60, [(long_handler, "rdq.callbacks.CallbackFailed", 3)])
        store_clock.behind = timedelta(hours=1)  # pending since an hour ago
        for i in range(3):
            await store.enqueue(Envelope(id=f"p-{'y' * 150}-{i}", queue="q" * 60, handler_ref="h"))
        store_clock.behind = timedelta(0)
        await store.claim_due("q" * 60, 1, timedelta(seconds=60), worker_id="w" * 120)
        # One claimed an hour ago with a 1 s lease: its lease has lapsed (and nobody has
        # reclaimed it) whenever the pages are shown, however long the test takes to get there.
        store_clock.behind = timedelta(hours=1)
        task = (await store.claim_due("q" * 60, 1, timedelta(seconds=1)))[0].task
        store_clock.behind = timedelta(0)
        assert task.lease_expires_at is not None
        assert task.lease_expires_at < datetime.now(UTC) - timedelta(minutes=59)
        await _outage(store, "q" * 60, f"handler:{long_handler}", f"{'q' * 60}-0001")
        await store.heartbeat_worker(WorkerInfo(id="w" * 120, queues=["q" * 60], heartbeat=5))
        app = create_app(node_settings(), storage=store)
        async with running_node(app) as base_url:
            for name, viewport in (("phone", PHONE), ("laptop", LAPTOP), ("desktop", DESKTOP)):
                page = await _log_in(browser, base_url, viewport)
                paths = [
                    "/ui",
                    f"/ui/queues/{'q' * 60}?state=dead",
                    f"/ui/queues/{'q' * 60}?state=running",
                    f"/ui/queues/{'q' * 60}?state=pending",
                    f"/ui/tasks/{'q' * 60}-0001",
                    f"/ui/tasks/{task.id}",
                    f"/ui/queues/{'q' * 60}/confirm?state=dead&scope=filter&action=redrive",
                    f"/ui/queues/{'q' * 60}/control?do=close&key=handler%3A{long_handler}",
                    "/ui/workers",
                    "/ui/audit",
                ]
                for path in paths:
                    await page.goto(base_url + path)
                    await _fits(page)
                await page.screenshot(path=str(tmp_path / f"{name}.png"))
        assert (await store.get(task.id)).status == Status.IN_FLIGHT


async def test_pages_load_without_browser_errors(browser: Any) -> None:
    """No page of the console leaves an error in the browser's console (a missing
    resource, a script error, a CSP refusal)."""
    async with MemoryStorage() as store:
        await _dead(store, "q", [("h", "Boom", 2)])
        await _outage(store, "q", "handler:h", "q-0001")
        async with running_node(create_app(node_settings(), storage=store)) as base_url:
            context = await browser.new_context(viewport=PHONE)
            page = await context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{base_url}/ui/login")
            await page.fill("#token", ADMIN_TOKEN)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{base_url}/ui")
            for path in (
                "/ui/queues/q?state=dead",
                "/ui/tasks/q-0001",
                "/ui/audit",
                "/ui/workers",
                "/ui/queues/q/control?do=pause&key=%2A",
            ):
                await page.goto(base_url + path)
                await page.wait_for_load_state("networkidle")
            assert errors == []


async def _outage(store: MemoryStorage, queue: str, key: str, sample: str) -> None:
    """The breaker of ``key`` open (tripped by ``sample``), and an hour of rates."""
    now = await store.now()
    tripped = flow.trip(
        Control(queue=queue, key=key),
        now,
        Breaker(cooldown=600),
        started=now - timedelta(minutes=4),
        error_types=["payments.gateway.GatewayDown"],
        error_type="payments.gateway.GatewayDown",
        error_message="502 Bad Gateway from psp.example",
        sample_task=sample,
    )
    await store.put_control(tripped, expected_version=0)
    minute = now.replace(second=0, microsecond=0)
    await store.add_counts(
        [
            Counts(
                queue=queue,
                minute=minute - timedelta(minutes=m),
                succeeded=40 if m > 5 else 2,
                failed=0 if m > 5 else 20,
                dead=0 if m > 5 else 3,
                deferred=0 if m > 5 else 30,
            )
            for m in range(60)
        ]
    )


async def test_a_dependency_goes_down_from_the_banner_to_a_paced_redrive(
    browser: Any, tmp_path: Path
) -> None:
    """The operator's steps of docs/operations.md, "A dependency goes down": the banner names
    the open breaker and links the task that tripped it; the queue's controls close it by
    hand; what died before it tripped is redriven at a pace, followed, and audited."""
    from playwright.async_api import expect

    queue = f"pay-{uuid.uuid4().hex[:6]}"
    sink = MemoryAuditSink()
    async with MemoryStorage() as store:
        await _dead(store, queue, [("charge_card", "GatewayDown", 12)])
        await _outage(store, queue, "handler:charge_card", f"{queue}-0001")
        for n in range(6):
            await store.enqueue(
                Envelope(id=f"{queue}-w{n}", queue=queue, handler_ref="charge_card"),
                delay=timedelta(minutes=5),
            )
        await store.heartbeat_worker(WorkerInfo(id="web-1:1:aa", queues=[queue], heartbeat=60))
        app = create_app(node_settings(queues=[queue]), storage=store, audit_sinks=[sink])
        async with running_node(app) as base_url:
            for viewport in (LAPTOP, PHONE):
                page = await _log_in(browser, base_url, viewport)
                banner = page.locator("#alerts .alert")
                await expect(banner).to_have_count(1)
                await expect(banner).to_contain_text("Breaker of handler charge_card")
                await expect(banner).to_contain_text("6 task(s) held")
                await expect(banner.locator("a.sample-link")).to_have_attribute(
                    "href", f"/ui/tasks/{queue}-0001?traceback=open#traceback"
                )
                row = page.locator("#queues tbody tr", has_text=queue)
                await expect(row.locator("svg.spark polyline")).to_have_count(3)
                await _fits(page)
                await page.screenshot(path=str(tmp_path / f"overview-{viewport['width']}.png"))
                await page.context.close()

            page = await _log_in(browser, base_url, LAPTOP)
            await page.locator("#alerts a", has_text=queue).click()
            controls = page.locator("#controls")
            await expect(controls).to_contain_text("6 task(s) held")
            await expect(page.locator("#rates figure.chart rect.f-dead")).not_to_have_count(0)
            await controls.locator("a", has_text="Close…").click()
            await expect(page.locator("#summary")).to_contain_text("6 task(s) held are let go")
            await page.fill("#reason", "PSP back (INC-812)")
            await page.click("#confirm button[type=submit]")
            await expect(page.locator(".flash")).to_contain_text("Breaker closed")
            await expect(page.locator("#alerts .alert")).to_have_count(0)

            await page.locator("#tabs a", has_text="Dead").click()
            await page.locator("a", has_text="Redrive all…").click()
            await expect(page.locator("#summary")).to_contain_text("12")
            await page.fill("#reason", "died before the breaker tripped")
            await page.fill("#rate", "4")
            await page.click("#confirm button[type=submit]")
            await expect(page.locator(".flash")).to_contain_text("Paced redrive of 12 task(s)")
            progress = page.locator("#redrives li").first
            await expect(progress.locator("progress")).to_be_visible()
            await expect(progress).to_contain_text("12 of 12 returned")  # the page refreshes
            await expect(progress).to_contain_text("done")
            await _fits(page)
            await page.screenshot(path=str(tmp_path / "queue-1400.png"), full_page=True)

            await page.click("nav.nav a:text-is('Workers')")
            await expect(page.locator("#workers tbody tr", has_text="web-1:1:aa")).to_contain_text(
                "live"
            )
        assert (await store.stats(queue)).dlq_depth == 0
        assert [(r.action, r.count) for r in sink.records] == [
            ("breaker.close", 0),
            ("redrive", 12),
        ]
