"""The web UI in a real headless Chromium: log in → queues → DLQ → filter → detail → redrive.

Needs Debian's ``chromium`` at /usr/bin/chromium (Playwright drives it; no browser download).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from rdq.audit import MemoryAuditSink
from rdq.server import create_app
from rdq.spi import Attempt, Envelope, Outcome, Status
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

pytestmark = [pytest.mark.browser, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[object]:
    if not HAVE_CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (CI installs Debian's chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        instance = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            await instance.close()


async def _fill(store: MemoryStorage, queue: str) -> None:
    for i in range(6):
        await store.enqueue(Envelope(id=f"task-{i}", queue=queue, handler_ref=f"handler.{i % 2}"))
    for claim in await store.claim_due(queue, 100, timedelta(seconds=30)):
        now = datetime.now(UTC)
        index = int(claim.task.id.split("-")[1])
        await store.dead_letter(
            claim.task.id,
            claim.token,
            Attempt(
                number=1,
                outcome=Outcome.FAILED,
                error_type="Timeout" if index < 3 else "ConnectionError",
                error_message=f"attempt failed for {claim.task.id}",
                started_at=now,
                finished_at=now,
                worker_id="worker-1",
            ),
        )


async def test_browse_filter_detail_and_redrive(browser: object, tmp_path: Path) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    queue = f"mail-{uuid.uuid4().hex[:6]}"
    sink = MemoryAuditSink()
    async with MemoryStorage() as store:
        await _fill(store, queue)
        app = create_app(node_settings(queues=[queue]), storage=store, audit_sinks=[sink])
        async with running_node(app) as base_url:
            page = await browser.new_page()
            page.set_default_timeout(30_000)
            await page.goto(f"{base_url}/ui")
            await expect(page).to_have_url(f"{base_url}/ui/login")
            await page.fill("#token", ADMIN_TOKEN)
            await page.click("button[type=submit]")

            row = page.locator("#queues tbody tr", has_text=queue)
            await expect(row).to_contain_text("6")
            await row.locator("a.dlq-link").click()
            await expect(page.locator("#dlq tbody tr")).to_have_count(6)

            await page.fill("input[name=error_type]", "Timeout")
            await page.click("#filters button[type=submit]")
            await expect(page.locator("#dlq tbody tr")).to_have_count(3)
            await expect(page.locator("#dlq")).not_to_contain_text("ConnectionError")

            await page.click("a.task-link:text-is('task-1')")
            await expect(page.locator("h1")).to_contain_text("task-1")
            await expect(page.locator("#attempts tbody tr")).to_have_count(1)
            await expect(page.locator("#attempts")).to_contain_text("attempt failed for task-1")
            await expect(page.locator("#attempts")).to_contain_text("worker-1")
            await page.screenshot(path=str(tmp_path / "detail.png"))
            await page.go_back()

            await page.check("input[aria-label='select task-1']")
            await page.check("input[aria-label='select task-2']")
            await page.click("button[name=action][value=redrive]")
            await expect(page.locator("#summary")).to_contain_text("2")
            await page.fill("#reason", "mail relay fixed")
            await page.click("#confirm button[type=submit]")
            await expect(page.locator(".flash")).to_have_text("2 task(s) redriven.")
            await expect(page.locator("#dlq tbody tr")).to_have_count(4)

            await page.fill("input[name=error_type]", "ConnectionError")
            await page.click("#filters button[type=submit]")
            await page.click("a.button:has-text('Redrive all matching')")
            await expect(page.locator("#summary")).to_contain_text("3")
            await page.click("#confirm button[type=submit]")
            await expect(page.locator(".flash")).to_have_text("3 task(s) redriven.")
            await page.screenshot(path=str(tmp_path / "dlq.png"))

        assert (await store.get("task-1")).status == Status.PENDING
        assert (await store.get("task-0")).status == Status.DEAD
        assert [(r.actor, r.count, r.reason) for r in sink.records] == [
            ("alice", 2, "mail relay fixed"),
            ("alice", 3, None),
        ]
        assert sink.records[0].selector == {"ids": ["task-1", "task-2"]}
        assert sink.records[1].selector == {"filter": {"error_type": "ConnectionError"}}
