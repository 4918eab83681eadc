"""The triage walkthrough of docs/operations.md, done for real on every first-party store.

examples/triage builds the gateway outage (500 tasks dead-lettered in three groups) on the
store behind a real node; an operator then triages it the way the walkthrough says, through
the ``rdq`` CLI (against the node, and directly on the store), the HTTP API and the console
in headless Chromium: the overview of every queue, the queue's tasks in every status, the
grouped DLQ, a task's traceback, search by id, cancelling a pending task and revoking a
running one (whose worker must let go of it), a group redriven and another purged, and the
audit trail read back from every side.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import pytest_asyncio
from click.testing import CliRunner

import rdq
from rdq.cli import main

from .conftest import wait_until
from .test_ui_browser import browser as browser  # the fixture: headless Chromium

EXAMPLE = Path(__file__).parents[4] / "examples" / "triage"
TOKEN = "triage-operator-token-0123456789"
BACKENDS = ["memory", "postgres", "redis", "mongo", "sqlite"]
SCALE = {"mongo": 0.1}
"""SecantusDB, the test suite's MongoDB, scans the whole collection for every claim: the
outage is built at a tenth of its size there (31 + 14 + 5 dead), full size elsewhere."""
NEWSLETTER = {"seconds": 600}  # far longer than the test: only a revoke frees its slot


@pytest.fixture(scope="module")
def outage() -> Iterator[Any]:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import outage as module

        yield module
    finally:
        sys.path.remove(str(EXAMPLE))


def _with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | options
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(name, url)`` of an empty store of its own: its own schema, key prefix, database or
    file on the session's server."""
    name: str = request.param
    tag = uuid.uuid4().hex[:10]
    if name == "memory":
        return name, f"memory://triage-{tag}"
    if name == "sqlite":
        return name, f"sqlite:///{tmp_path / 'rdq.db'}"
    server: str = request.getfixturevalue(f"{name}_url")
    if name == "postgres":
        return name, _with_query(server, schema=f"triage_{tag}")
    if name == "redis":
        return name, _with_query(server, prefix=f"triage-{tag}")
    return name, urlunsplit(urlsplit(server)._replace(path=f"/triage_{tag}"))


class Operator:
    """The operator's tools against one node: the ``rdq`` CLI (run on a thread, as it runs
    its own event loop) and the HTTP API."""

    def __init__(self, base_url: str, storage_url: str, http: httpx.AsyncClient) -> None:
        self.base_url = base_url
        self.storage_url = storage_url
        self.http = http

    async def cli(self, *args: str, direct: bool = False) -> Any:
        """``rdq ARGS --json`` through the node (or on the store itself); its JSON answer."""
        where = ["--storage", self.storage_url] if direct else ["--server", self.base_url]
        argv = [*args, *where, "--json"]
        env = {"RDQ_TOKEN": TOKEN, "RDQ_ACTOR": "cli-operator"}
        result = await asyncio.to_thread(
            CliRunner().invoke, main, argv, env=env, catch_exceptions=False
        )
        assert result.exit_code == 0, (argv, result.output)
        return json.loads(result.stdout)

    async def get(self, path: str, **params: Any) -> Any:
        response = await self.http.get(path, params=params)
        assert response.status_code == 200, (path, response.text)
        return response.json()

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        response = await self.http.post(path, json=body)
        assert response.status_code in (200, 201), (path, response.text)
        return response.json()

    async def ids(self, queue: str, status: str) -> list[str]:
        """Every task id of ``queue`` in ``status``, paged through the CLI with small pages
        (so the store's cursors are followed many times)."""
        page = await self.cli("tasks", "list", queue, "--status", status, "--limit", "37", "--all")
        assert page["next_cursor"] is None
        ids = [task["id"] for task in page["tasks"]]
        assert len(ids) == len(set(ids)), "a task listed twice"
        assert all(task["status"] == status.upper() for task in page["tasks"])
        return ids


@pytest_asyncio.fixture
async def built(
    outage: Any, backend: tuple[str, str]
) -> AsyncIterator[tuple[Operator, dict[str, int]]]:
    """The outage built on the backend behind a node working its queues."""
    name, url = backend
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        async with outage.serving(storage, TOKEN) as base_url:
            scale = SCALE.get(name, 1.0)
            await outage.build(storage, scale=scale)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
                yield Operator(base_url, url, http), outage.sizes(scale)


async def console(browser: Any, base_url: str) -> Any:
    """A console page in Chromium, logged in with the operator's token."""
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(60_000)
    await page.goto(f"{base_url}/ui/login")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}/ui")
    return page


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.asyncio
async def test_an_operator_triages_the_outage(
    built: tuple[Operator, dict[str, int]], browser: Any
) -> None:
    from playwright.async_api import expect

    op, size = built
    dead = size["charges"] + size["refunds"] + size["receipts"]

    # Newsletters start on the emails queue (5 slots): 5 run, 2 wait.
    newsletters = [f"newsletter-{n}" for n in range(7)]
    for task_id in newsletters:
        body = {"id": task_id, "queue": "emails", "handler_ref": "emails.newsletter"}
        await op.post("/v1/tasks", body | {"payload": NEWSLETTER})

    async def five_run() -> bool:
        page = await op.get("/v1/queues/emails/tasks", status="IN_FLIGHT")
        return len(page["tasks"]) == 5

    await wait_until(five_run, what="five newsletters running")

    # 1. The overview: every queue the store holds.
    overview = {q["queue"]: q for q in (await op.cli("stats"))["queues"]}
    assert set(overview) == {"payments", "emails"}
    payments = overview["payments"]
    assert (payments["dlq_depth"], payments["succeeded"]) == (dead, size["healthy"])
    assert (payments["pending"], payments["in_flight"], payments["cancelled"]) == (0, 0, 0)
    assert (overview["emails"]["in_flight"], overview["emails"]["pending"]) == (5, 2)
    assert {q["queue"] for q in (await op.get("/v1/queues"))["queues"]} >= set(overview)

    # 2. The DLQ grouped: three groups, not 500 rows (the CLI and the API agree).
    expected = {
        ("payments.charge_card", "shop.GatewayDown"): size["charges"],
        ("payments.refund", "shop.GatewayTimeout"): size["refunds"],
        ("payments.send_receipt", "KeyError"): size["receipts"],
    }
    for groups in (
        (await op.cli("dlq", "groups", "payments"))["groups"],
        (await op.get("/v1/queues/payments/dlq/groups"))["groups"],
    ):
        assert {(g["handler_ref"], g["error_type"]): g["count"] for g in groups} == expected
        # as times, not text: a time on a whole second is written without a fraction, and
        # "…:01Z" sorts after "…:01.004Z" as text
        assert all(
            datetime.fromisoformat(g["first_dead_lettered_at"])
            <= datetime.fromisoformat(g["last_dead_lettered_at"])
            for g in groups
        )

    # 3. Every status tab lists exactly its tasks, paged.
    dead_ids = await op.ids("payments", "dead")
    assert len(dead_ids) == dead
    assert len(await op.ids("payments", "succeeded")) == size["healthy"]
    assert await op.ids("payments", "pending") == []
    running = await op.ids("emails", "in_flight")
    waiting = await op.ids("emails", "pending")
    assert (len(running), len(waiting)) == (5, 2)
    assert await op.ids("emails", "cancelled") == []
    lease_page = await op.get("/v1/queues/emails/tasks", status="IN_FLIGHT")
    assert all(t["claimed_by"] and t["lease_expires_at"] for t in lease_page["tasks"])
    receipts = (
        await op.cli("dlq", "list", "payments", "--error-type", "KeyError", "--all", "--attempts")
    )["tasks"]
    assert len(receipts) == size["receipts"]
    # A time window on the dead-letter time: from the group's first (inclusive), before it.
    (group,) = [g for g in groups if g["error_type"] == "KeyError"]
    window = ["dlq", "list", "payments", "--error-type", "KeyError", "--all"]
    since = await op.cli(*window, "--after", group["first_dead_lettered_at"])
    assert len(since["tasks"]) == size["receipts"]
    assert (await op.cli(*window, "--before", group["first_dead_lettered_at"]))["tasks"] == []

    # 4. The cause, from the traceback: the CLI, the API and the store directly agree.
    receipt = receipts[0]["id"]
    for task in (
        await op.cli("tasks", "show", receipt),
        await op.cli("dlq", "show", receipt, direct=True),
        await op.get(f"/v1/tasks/{receipt}"),
    ):
        attempts = task["attempts"]
        assert [a["outcome"] for a in attempts] == ["FAILED"] * 3
        assert all('order["customer"]["email"]' in a["traceback"] for a in attempts)
        assert attempts[-1]["traceback"].rstrip().endswith("KeyError: 'email'")
        assert task["payload"]["customer"] == receipts[0]["payload"]["customer"]

    # The console shows the same: overview, groups, a traceback, a running task found by id.
    page = await console(browser, op.base_url)
    row = page.locator("#queues tr[data-queue='payments']")
    await expect(row.locator("a.dlq-link")).to_have_text(str(dead))
    await row.locator("a.dlq-link").click()
    groups_ui = page.locator("#groups tbody tr")
    await expect(groups_ui).to_have_count(3)
    await groups_ui.filter(has_text="KeyError").locator("a", has_text="Show").click()
    await page.locator("a.task-link").first.click()
    await expect(page.locator("h1")).to_contain_text("receipt-")
    trace = page.locator("#attempts details.tb").first
    await trace.locator("summary").click()
    await expect(trace.locator("pre")).to_contain_text('order["customer"]["email"]')
    await page.keyboard.press("/")
    await page.keyboard.type(running[1])
    await page.keyboard.press("Enter")
    await expect(page.locator("h1")).to_contain_text(running[1])
    await expect(page.locator("#now")).to_contain_text("Running on")

    # 5. Cancel a waiting newsletter (CLI) and revoke a running one (API).
    withdrawn, still_waiting = waiting
    revoked = running[0]
    await op.cli("tasks", "cancel", "emails", withdrawn, "--reason", "duplicate", "--yes")
    done = await op.post(
        "/v1/queues/emails/tasks/cancel", {"ids": [revoked], "reason": "stuck send"}
    )
    assert done["count"] == 1
    cancelled = await op.ids("emails", "cancelled")
    assert sorted(cancelled) == sorted([withdrawn, revoked])
    assert (await op.get(f"/v1/tasks/{revoked}"))["claimed_by"] is None

    # 6. Redrive the charges (dry run first), purge the receipts, by group.
    charges = ["--handler-ref", "payments.charge_card", "--error-type", "shop.GatewayDown"]
    dry = await op.cli("dlq", "redrive", "payments", *charges, "--dry-run")
    assert dry["count"] == size["charges"]
    redriven = await op.cli(
        "dlq", "redrive", "payments", *charges, "--reason", "PSP outage over, INC-812", "--yes"
    )
    assert redriven["count"] == size["charges"]
    receipts_group = {"handler_ref": "payments.send_receipt", "error_type": "KeyError"}
    counted = await op.post(
        "/v1/queues/payments/dlq/purge", {"filter": receipts_group, "dry_run": True}
    )
    assert counted["count"] == size["receipts"]
    await page.goto(f"{op.base_url}/ui/queues/payments?state=dead")  # purge from the console
    await (
        page.locator("#groups tbody tr", has_text="KeyError").locator("a", has_text="Purge").click()
    )
    await expect(page.locator("#summary")).to_contain_text(str(size["receipts"]))
    await page.fill("#reason", "paper receipts")
    await page.click("#confirm button[type=submit]")
    purged = size["receipts"]
    await expect(page.locator(".flash")).to_contain_text(
        f"{purged} task(s) purged. Matched {purged}, already gone 0."
    )

    # The gateway is back: the redriven charges succeed, with their history kept.
    async def charges_done() -> bool:
        stats = await op.get("/v1/queues/payments/stats")
        return bool(stats["pending"] == 0 and stats["in_flight"] == 0)

    await wait_until(charges_done, timeout=300, what="the redriven charges run")
    stats = await op.get("/v1/queues/payments/stats")
    assert stats["succeeded"] == size["healthy"] + size["charges"]
    assert stats["dlq_depth"] == size["refunds"]
    groups = (await op.cli("dlq", "groups", "payments"))["groups"]
    assert [(g["error_type"], g["count"]) for g in groups] == [
        ("shop.GatewayTimeout", size["refunds"])
    ]
    charge = await op.get(f"/v1/tasks/{next(i for i in dead_ids if i.startswith('charge-'))}")
    assert [a["outcome"] for a in charge["attempts"]] == ["FAILED"] * 3 + ["SUCCEEDED"]
    assert (charge["status"], charge["redrive_count"]) == ("SUCCEEDED", 1)

    # The revoked newsletter's worker let go of it: its slot went to the one still waiting
    # (no other newsletter ends within the test).
    async def slot_reused() -> bool:
        task = await op.get(f"/v1/tasks/{still_waiting}")
        return bool(task["status"] == "IN_FLIGHT")

    await wait_until(slot_reused, what="the revoked newsletter's slot is used again")
    assert (await op.get(f"/v1/tasks/{revoked}"))["status"] == "CANCELLED"
    # Cancel every running newsletter by filter, so the node stops without waiting for them.
    stopped = await op.cli(
        "tasks", "cancel", "emails", "--status", "in_flight", "--all",
        "--reason", "campaign withdrawn", "--yes",
    )  # fmt: skip
    assert stopped["count"] == 5
    # A cancelled task stays visible until it is purged by id.
    gone = await op.cli("dlq", "purge", "emails", withdrawn, "--reason", "cleanup", "--yes")
    assert gone["count"] == 1
    assert (await op.http.get(f"/v1/tasks/{withdrawn}")).status_code == 404

    # 7. The audit trail, newest first, the same from the node, the store and the API.
    trail = [
        ("purge", "emails", 1, "cleanup"),
        ("cancel", "emails", 5, "campaign withdrawn"),
        ("purge", "payments", size["receipts"], "paper receipts"),
        ("redrive", "payments", size["charges"], "PSP outage over, INC-812"),
        ("cancel", "emails", 1, "stuck send"),
        ("cancel", "emails", 1, "duplicate"),
    ]
    for entries in (
        (await op.cli("audit"))["entries"],
        (await op.cli("audit", direct=True))["entries"],
        (await op.get("/v1/audit"))["entries"],
    ):
        assert [(e["action"], e["queue"], e["count"], e["reason"]) for e in entries] == trail
        assert {e["actor"] for e in entries} == {
            "alice (admin)"
        }  # the node's token: its owner and role
    only = (await op.cli("audit", "--queue", "payments", "--action", "purge"))["entries"]
    assert [e["selector"] for e in only] == [{"filter": receipts_group}]
    emails = await op.get("/v1/audit", queue="emails", limit=2)
    assert [e["count"] for e in emails["entries"]] == [1, 5] and emails["next_cursor"]
    await page.click("nav.nav a:text-is('Audit')")
    rows = page.locator("#audit tbody tr")
    await expect(rows).to_have_count(len(trail))
    for row_ui, entry in zip(await rows.all(), trail, strict=True):
        await expect(row_ui).to_contain_text(entry[3])  # its reason
