"""Walk the triage of docs/operations.md in a real browser and save its screenshots.

    python examples/triage/screenshots.py [--storage URL] [--out docs/img]

Builds the gateway outage (outage.py) on the store, serves the console, and drives headless
Chromium (Debian's /usr/bin/chromium, through Playwright) through the walkthrough: the
overview, the grouped DLQ, a task's traceback, the group redrive's confirmation, the DLQ after
it, the purge of another group, and the audit page — plus the DLQ at phone width.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

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
        context = await browser.new_context(viewport={"width": 1440, "height": 900})
        page = await context.new_page()
        page.set_default_timeout(30_000)
        await page.goto(f"{base}/ui/login")
        await page.fill("#token", token)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{base}/ui")
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
        await page.goto(f"{base}/ui/queues/{QUEUE}?state=dead")
        await page.screenshot(path=out / "console-phone.png")
        await browser.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="memory://")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[2] / "docs" / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    async with rdq.open_storage(args.storage) as storage:
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
            await walk(base, token, args.out)
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
