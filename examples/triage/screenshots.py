"""Walk the triage of docs/operations.md in a real browser and save its screenshots.

    python examples/triage/screenshots.py [--storage URL] [--fleet-storage URL] [--out docs/img]

Builds the gateway outage (outage.py) on the store, serves the console, and drives headless
Chromium (Debian's /usr/bin/chromium, through Playwright) through the walkthrough: the
overview, the grouped DLQ, a task's traceback, the group redrive's confirmation, the DLQ after
it, the purge of another group, and the audit page — plus the DLQ at phone width. Then the
scene of "A dependency goes down" and "A worker stops" (fleet.py; a SQLite file in a temporary
directory unless ``--fleet-storage`` names a store): the banners, a killed worker's tasks, the
Workers page, the breaker under the queue's controls, closing it by hand and a paced redrive,
each at 1400 px and 390 px.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import fleet
from outage import QUEUE, build, serving
from shop import app

import rdq

CHROMIUM = os.environ.get("RDQ_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


async def walk(base: str, token: str, out: Path) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = await browser.new_context(viewport=WIDE)
        page = await context.new_page()
        page.set_default_timeout(30_000)
        await page.goto(f"{base}/ui/login")
        await page.fill("#token", token)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{base}/ui")
        # the workers' per-minute counts reach the store every ten seconds: the page's live
        # refresh draws the sparklines once they have
        await page.wait_for_selector(f"#queues tr[data-queue='{QUEUE}'] svg.spark")
        await page.mouse.move(0, 0)
        await page.screenshot(path=out / "console-overview.png")

        await page.click(f"#queues tr[data-queue='{QUEUE}'] a.dlq-link")
        await page.wait_for_selector("#groups")
        await page.mouse.move(0, 0)
        await page.screenshot(path=out / "console-dlq-groups.png")

        receipts = page.locator("#groups tbody tr", has_text="KeyError")
        await receipts.locator("a", has_text="Show").click()
        await page.locator("a.task-link").first.click()
        await page.wait_for_selector("#attempts")
        for summary in await page.locator("#attempts details.tb summary").all():
            await summary.click()
            break
        await page.screenshot(path=out / "console-task.png", full_page=True)

        await page.goto(f"{base}/ui/queues/{QUEUE}?state=dead")
        charges = page.locator("#groups tbody tr", has_text="GatewayDown")
        await charges.locator("a", has_text="Redrive").click()
        await page.fill("#reason", "PSP outage over, INC-812")
        await page.screenshot(path=out / "console-confirm.png")
        await page.click("#confirm button[type=submit]")
        await page.wait_for_selector(".flash")
        await page.mouse.move(0, 0)
        await page.screenshot(path=out / "console-after-redrive.png")

        receipts = page.locator("#groups tbody tr", has_text="KeyError")
        await receipts.locator("a", has_text="Purge").click()
        await page.fill("#reason", "phone orders get paper receipts; bug RCPT-77 filed")
        await page.click("#confirm button[type=submit]")
        await page.wait_for_selector(".flash")

        await page.goto(f"{base}/ui/audit")
        await page.screenshot(path=out / "console-audit.png")

        await page.goto(f"{base}/ui/queues/emails?state=running")
        await page.wait_for_selector("#tasks tbody tr[data-id]")
        await page.mouse.move(0, 0)
        await page.screenshot(path=out / "console-running.png")
        await context.close()

        phone = await browser.new_context(viewport={"width": 390, "height": 844})
        page = await phone.new_page()
        await page.goto(f"{base}/ui/login")
        await page.fill("#token", token)
        await page.click("button[type=submit]")
        await page.goto(f"{base}/ui/queues/{QUEUE}?state=dead#tabs")
        await page.screenshot(path=out / "console-phone.png")
        await browser.close()


WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


async def _logged_in(browser: Any, base: str, token: str, viewport: dict[str, int]) -> Any:
    context = await browser.new_context(viewport=viewport)
    page = await context.new_page()
    page.set_default_timeout(30_000)
    await page.goto(f"{base}/ui/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/ui")
    return page


async def _shot(
    page: Any, name: str, out: Path, full: bool = False, height: int | None = None
) -> None:
    """``height``: only the top of the window (a confirmation page is short)."""
    await page.mouse.move(0, 0)
    clip = None if height is None else {"x": 0, "y": 0, "width": WIDE["width"], "height": height}
    await page.screenshot(path=out / name, full_page=full, clip=clip)


async def walk_fleet(base: str, token: str, out: Path) -> None:
    """The fleet scene (fleet.py) at 1400 and 390 px: looking first, then acting at 1400."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for viewport, suffix in ((WIDE, ""), (PHONE, "-phone")):
            page = await _logged_in(browser, base, token, viewport)
            await page.wait_for_selector("#alerts .alert")
            await _shot(page, f"fleet-overview{suffix}.png", out, full=True)
            await page.goto(f"{base}/ui/workers")
            await _shot(page, f"fleet-workers{suffix}.png", out, full=True)
            tasks = "#tasks-wrap" if suffix else ""  # on a phone the tasks are below
            await page.goto(f"{base}/ui/queues/exports?state=running{tasks}")
            await page.wait_for_selector("#tasks tbody tr.silent")
            await _shot(page, f"fleet-stuck{suffix}.png", out)
            await page.goto(f"{base}/ui/queues/invoices")
            await page.wait_for_selector("#unserved")
            await _shot(page, f"fleet-unserved{suffix}.png", out)
            anchor = "#controls" if suffix else ""  # on a phone the controls are below
            await page.goto(f"{base}/ui/queues/{QUEUE}?state=pending{anchor}")
            await page.wait_for_selector("#control-list")
            await _shot(page, f"breaker-controls{suffix}.png", out)
            await page.context.close()

        page = await _logged_in(browser, base, token, WIDE)
        await page.goto(f"{base}/ui/queues/{QUEUE}")
        await page.locator("#control-list a", has_text="Close…").first.click()
        await page.fill("#reason", "PSP confirms recovery, INC-812")
        await _shot(page, "breaker-close.png", out, height=440)
        await page.click("#confirm button[type=submit]")
        await page.wait_for_selector(".flash")
        await page.goto(f"{base}/ui/queues/{QUEUE}?state=dead")
        charges = page.locator("#groups tbody tr", has_text="GatewayDown")
        await charges.locator("a", has_text="Redrive").click()
        await page.fill("#reason", "died before the breaker tripped, INC-812")
        await page.fill("#rate", "2")
        await _shot(page, "paced-redrive-confirm.png", out, height=630)
        await page.click("#confirm button[type=submit]")
        await page.wait_for_selector("#redrives li progress")
        await page.wait_for_timeout(4000)  # a few returned: the bar has moved
        await page.goto(f"{base}/ui/queues/{QUEUE}#controls")
        await _shot(page, "paced-redrive-progress.png", out)
        await page.context.close()
        phone = await _logged_in(browser, base, token, PHONE)
        await phone.goto(f"{base}/ui/queues/{QUEUE}#controls")
        await _shot(phone, "paced-redrive-progress-phone.png", out)
        await browser.close()


async def fleet_scene(url: str | None, out: Path) -> None:
    """Stage fleet.py's scene on ``url`` (a throwaway SQLite file if None) and walk it."""
    with tempfile.TemporaryDirectory() as tmp:
        url = url or f"sqlite:///{Path(tmp) / 'fleet.db'}"
        token = secrets.token_urlsafe(24)
        async with rdq.open_storage(url) as storage:
            await storage.migrate()
            async with serving(storage, token) as base:
                scene = await fleet.stage(storage, url)
                print(
                    f"worker {scene.killed} killed with {fleet.STUCK} tasks in flight: "
                    f"flagged silent {scene.flagged_after:.1f} s later "
                    f"(heartbeat {scene.heartbeat:.0f} s)"
                )
                await walk_fleet(base, token, out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="memory://")
    parser.add_argument("--fleet-storage", help="a file or server store for the fleet scene")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[2] / "docs" / "img")
    parser.add_argument("--only-fleet", action="store_true", help="the fleet scene alone")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.only_fleet:
        await triage_scene(args.storage, args.out)
    await fleet_scene(args.fleet_storage, args.out)
    print(f"screenshots in {args.out}")


async def triage_scene(url: str, out: Path) -> None:
    """Build outage.py's scene on ``url`` and walk the triage."""
    token = secrets.token_urlsafe(24)
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        async with serving(storage, token) as base:
            await build(storage)
            client = rdq.Client(storage, app)
            await client.submit_many(
                [
                    rdq.Submission(
                        "emails.newsletter",
                        {"issue": 12, "seconds": 120},
                        id=f"newsletter-12-{n:03d}",
                    )
                    for n in range(1, 41)
                ]
            )
            await walk(base, token, out)


if __name__ == "__main__":
    asyncio.run(main())
