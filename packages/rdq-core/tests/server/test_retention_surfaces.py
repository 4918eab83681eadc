"""Retention through every surface: ``rdq dlq export`` and ``rdq dlq import`` (on a store and
through a node), their API endpoints, ``GET /v1/queues/{q}/retention`` and ``rdq stats``, and a
purge that archives what it deletes and reports matched / done / already gone."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from litestar.testing import AsyncTestClient

import rdq
from rdq.cli import main
from rdq.retention import DirectoryArchive, Expiry, read_tasks, retain
from rdq.server import create_app
from rdq.spi import Attempt, AuditFilter, Envelope, Outcome, Page, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, READ_TOKEN, node_settings
from .test_cli_dlq import _fill
from .test_cli_dlq import node_url as node_url  # the same fixture: a real node on the store

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def rdq_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def store_url() -> str:
    name = f"ret-{uuid.uuid4().hex}"
    asyncio.run(_fill(name, 5))
    return f"memory://{name}"


@pytest.fixture(params=["store", "node"])
def where(request: pytest.FixtureRequest, store_url: str) -> Iterator[tuple[str, ...]]:
    if request.param == "store":
        yield ("--storage", store_url)
    else:
        yield ("--server", request.getfixturevalue("node_url"), "--token", ADMIN_TOKEN)


def test_export_then_purge_then_import_puts_every_dead_task_back_as_it_was(
    store_url: str, where: tuple[str, ...], tmp_path: Path
) -> None:
    name = store_url.removeprefix("memory://")
    before = asyncio.run(_tasks(name))
    exported = tmp_path / "dlq.jsonl.gz"
    code, out = rdq_cli("dlq", "export", "q", "--to", str(exported), *where)
    assert code == 0 and "5 dead task(s) of queue q written" in out, out
    lines = gzip.decompress(exported.read_bytes()).splitlines()
    assert len(lines) == 5 and all(json.loads(line)["attempts"] for line in lines)
    code, out = rdq_cli("dlq", "purge", "q", "--all", "--yes", *where, "--json")
    assert code == 0, out
    assert (json.loads(out)["matched"], json.loads(out)["gone"]) == (5, 0)
    assert asyncio.run(_tasks(name)) == {}
    code, out = rdq_cli("dlq", "import", str(exported), "--reason", "replay", *where)
    assert code == 0 and "5 dead task(s) imported, 0 already there, 0 skipped" in out, out
    assert asyncio.run(_tasks(name)) == before, "ids, attempts and times kept"
    code, out = rdq_cli("dlq", "import", str(exported), *where, "--json")
    assert code == 0 and json.loads(out)["existing"] == 5, "idempotent"
    assert json.loads(out)["imported"] == 0


def test_an_export_by_filter_holds_only_that_group(store_url: str, tmp_path: Path) -> None:
    out_file = tmp_path / "timeouts.jsonl"
    code, out = rdq_cli(
        "dlq",
        "export",
        "q",
        "--error-type",
        "Timeout",
        "--to",
        str(out_file),
        "--storage",
        store_url,
    )
    assert code == 0, out
    assert sorted(t.id for t in read_tasks(out_file)) == ["t0", "t1", "t2"]
    code, out = rdq_cli(
        "dlq", "export", "q", "--error-type", "Nope", "--to", str(out_file), "--storage", store_url
    )
    assert code == 3, "nothing matched: exit 3"


def test_import_skips_what_is_not_dead_and_names_it(store_url: str, tmp_path: Path) -> None:
    file = tmp_path / "mixed.jsonl"
    alive = Envelope(id="alive-1", queue="q", handler_ref="h", status=Status.PENDING)
    file.write_text(rdq.spi.encode_envelope(alive).decode() + "\nnot json at all\n")
    code, out = rdq_cli("dlq", "import", str(file), "--storage", store_url, "--json")
    assert code == 3, out
    answer = json.loads(out)
    assert answer["skipped"] == [
        {"id": "alive-1", "why": "PENDING, not DEAD: only dead tasks go back"}
    ]
    assert len(answer["problems"]) == 1 and "not a task" in answer["problems"][0]


def test_a_purge_on_a_store_archives_first_and_says_where(store_url: str, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    code, out = rdq_cli(
        "dlq", "purge", "q", "t0", "t1", "--yes", "--storage", store_url, "--archive", str(archive)
    )
    assert code == 0, out
    assert "2 task(s) of queue q purged (matched 2, already gone 0)" in out
    assert f"archived 2 first: {archive}" in out
    assert sorted(t.id for t in read_tasks(archive)) == ["t0", "t1"]
    code, out = rdq_cli("dlq", "purge", "q", "t2", "--yes", "--storage", store_url, "--no-archive")
    assert code == 0 and "archived" not in out


async def _tasks(name: str) -> dict[str, dict[str, object]]:
    async with MemoryStorage(name=name) as store:
        tasks, _ = await store.dlq_list("q", None, Page(limit=100, include_attempts=True))
        return {t.id: rdq.spi.envelope_to_builtins(t) for t in tasks}


@pytest.mark.asyncio
async def test_the_api_exports_imports_and_says_what_retention_did(tmp_path: Path) -> None:
    async with MemoryStorage() as store:
        for i in range(3):
            await store.enqueue(Envelope(id=f"x{i}", queue="q", handler_ref="h", payload=i))
        for claim in await store.claim_due("q", 3, timedelta(seconds=60)):
            attempt = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="Boom")
            await store.dead_letter(claim.task.id, claim.token, attempt)
        app = rdq.App()
        app.queue("q", dead_ttl=86400.0)
        node = create_app(node_settings(queues=["q"]), storage=store, engine_app=app)
        async with AsyncTestClient(app=node) as client:
            exported = await client.get("/v1/queues/q/dlq/export", headers=AUTH)
            assert exported.status_code == 200, exported.text
            assert exported.headers["content-type"].startswith("application/x-ndjson")
            lines = [json.loads(line) for line in exported.text.splitlines()]
            assert [t["id"] for t in lines] == ["x0", "x1", "x2"]
            assert all(t["attempts"] for t in lines)

            now = await store.now() + timedelta(seconds=1)
            archive = DirectoryArchive(tmp_path)
            expiry = [Expiry(Status.DEAD, now, "dead_ttl 1d")]
            await retain(store, archive, "q", expiry, runner="w-1", now=now)
            kept = (await client.get("/v1/queues/q/retention", headers=AUTH)).json()
            assert kept["dead_ttl"] == 86400.0 and kept["recorded"] is True
            assert kept["archived"] == {"DEAD": 3} and kept["expired"] == {"DEAD": 3}
            assert kept["archive"].startswith(str(tmp_path)) and kept["runner"] is None

            body = {"tasks": [*lines, {"id": "x9", "queue": "q"}], "reason": "replay"}
            answer = await client.post("/v1/queues/q/dlq/import", json=body, headers=AUTH)
            assert answer.status_code == 200, answer.text
            result = answer.json()
            assert (result["imported"], result["existing"]) == (3, 0)
            assert result["skipped"][0]["id"] == "x9" and "invalid" in result["skipped"][0]["why"]
            assert (await store.get("x1")).payload == 1
            again = await client.post("/v1/queues/q/dlq/import", json=body, headers=AUTH)
            assert again.json()["existing"] == 3
            reader = {"Authorization": f"Bearer {READ_TOKEN}"}
            refused = await client.post("/v1/queues/q/dlq/import", json=body, headers=reader)
            assert refused.status_code == 403
        entries, _ = await store.list_audit(AuditFilter(action="import"), Page())
        assert [(e.actor, e.count, e.reason) for e in entries] == [("alice (admin)", 3, "replay")]


@pytest.mark.asyncio
async def test_the_api_and_the_console_say_a_queue_does_not_keep_succeeded_tasks() -> None:
    from .test_ui import _login

    async with MemoryStorage() as store:
        app = rdq.App()
        app.queue("fast", keep_succeeded=False)
        app.queue("kept")
        node = create_app(node_settings(queues=["fast", "kept"]), storage=store, engine_app=app)
        async with AsyncTestClient(app=node) as client:
            fast = (await client.get("/v1/queues/fast/retention", headers=AUTH)).json()
            kept = (await client.get("/v1/queues/kept/retention", headers=AUTH)).json()
            assert (fast["keep_succeeded"], kept["keep_succeeded"]) == (False, True)
            await _login(client, ADMIN_TOKEN)
            said = "each is deleted as it completes"
            fast_page = await client.get("/ui/queues/fast", params={"state": "succeeded"})
            kept_page = await client.get("/ui/queues/kept", params={"state": "succeeded"})
            assert fast_page.status_code == kept_page.status_code == 200
            assert said in fast_page.text and said not in kept_page.text


def test_stats_shows_what_retention_archived_and_removed(store_url: str, tmp_path: Path) -> None:
    name = store_url.removeprefix("memory://")

    async def round_() -> None:
        async with MemoryStorage(name=name) as store:
            now = await store.now() + timedelta(seconds=1)
            await retain(
                store,
                DirectoryArchive(tmp_path),
                "q",
                [Expiry(Status.DEAD, now, "dead_ttl 1s")],
                runner="w-1",
                now=now,
            )

    asyncio.run(round_())
    code, out = rdq_cli("stats", "q", "--storage", store_url, "--json")
    assert code == 0, out
    [row] = json.loads(out)["queues"]
    assert row["retention"]["expired"] == {"DEAD": 5}
    code, out = rdq_cli("stats", "q", "--storage", store_url)
    assert "archiv" in out and "expir" in out  # the headers (cut to the terminal's width)
    assert asyncio.run(_dead_count(name)) == 0


async def _dead_count(name: str) -> int:
    async with MemoryStorage(name=name) as store:
        return (await store.stats("q")).dlq_depth


@pytest.mark.asyncio
async def test_the_console_shows_retention_exports_and_purges_with_a_report(
    client: AsyncTestClient[Any], memory_store: MemoryStorage
) -> None:
    from .test_ui import _csrf, _dead, _login

    await _dead(memory_store, "t1")
    await _dead(memory_store, "t2")
    await _login(client, ADMIN_TOKEN)
    page = await client.get("/ui/queues/default", params={"state": "dead"})
    assert page.status_code == 200
    assert 'id="retention"' in page.text and "until they are redriven or purged" not in page.text
    assert 'href="/ui/queues/default/export"' in page.text
    exported = await client.get("/ui/queues/default/export")
    assert exported.status_code == 200
    assert "attachment" in exported.headers["content-disposition"]
    assert sorted(json.loads(line)["id"] for line in exported.text.splitlines()) == ["t1", "t2"]
    confirm = await client.get(
        "/ui/queues/default/confirm", params={"action": "purge", "ids": "t1", "state": "dead"}
    )
    data = {"ids": "t1", "scope": "ids", "state": "dead", "action": "purge", "reason": "junk"}
    done = await client.post(
        "/ui/queues/default/act",
        data={**data, "csrf": _csrf(confirm.text)},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    landing = await client.get(done.headers["location"])
    assert "1 task(s) purged. Matched 1, already gone 0." in landing.text
    assert "written to the archive before it was deleted" in landing.text
    assert [t.id for t in read_tasks(os.environ["RDQ_ARCHIVE"]) if t.id == "t1"]


def test_export_purge_and_import_on_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/rdq.db"

    async def seed() -> None:
        async with rdq.open_storage(url) as store:
            await store.migrate()
            for i in range(3):
                await store.enqueue(Envelope(id=f"s{i}", queue="q", handler_ref="h", payload=[i]))
            for claim in await store.claim_due("q", 3, timedelta(seconds=60)):
                attempt = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="Boom")
                await store.dead_letter(claim.task.id, claim.token, attempt)

    asyncio.run(seed())
    file = tmp_path / "out.jsonl"
    assert rdq_cli("dlq", "export", "q", "--to", str(file), "--storage", url)[0] == 0
    code, out = rdq_cli(
        "dlq", "purge", "q", "--all", "--yes", "--storage", url, "--archive", str(tmp_path / "a")
    )
    assert code == 0 and "(matched 3, already gone 0)" in out, out
    assert sorted(t.id for t in read_tasks(tmp_path / "a")) == ["s0", "s1", "s2"]
    code, out = rdq_cli("dlq", "import", str(file), "--storage", url)
    assert code == 0 and "3 dead task(s) imported" in out, out
    code, out = rdq_cli("dlq", "list", "q", "--storage", url, "--json", "--attempts")
    listed = json.loads(out)["tasks"]
    assert [t["payload"] for t in listed] == [[0], [1], [2]] and all(t["attempts"] for t in listed)
