"""Payloads by reference through the surfaces: the API and the console show a payload kept in
the blob store whole (the console links to download it), a submit through the API above the
inline limit is kept by reference, the DLQ's export holds it whole, and ``rdq copy`` carries
the blob to the destination's blob store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from litestar.testing import AsyncTestClient

import rdq
from rdq.blobs import Blobs, DirectoryBlobStore
from rdq.cli import main
from rdq.server import create_app
from rdq.spi import PAYLOAD_REF_HEADER, Attempt, Outcome, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings
from .test_ui import _login

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
BIG = {"rows": [f"row {i:05d} of a large payload" for i in range(2000)]}


def _app(blob_dir: Path) -> rdq.App:
    app = rdq.App(blobs=Blobs(store=DirectoryBlobStore(blob_dir), inline_limit=4096))
    app.queue("q")

    @app.handler("h", queue="q")
    async def h(payload: Any) -> None:
        return None

    return app


async def _dead(store: MemoryStorage, task_id: str) -> None:
    [claim] = await store.claim_due("q", 1, timedelta(seconds=60))
    assert claim.task.id == task_id
    now = datetime.now(UTC)
    attempt = Attempt(
        number=1, outcome=Outcome.FAILED, error_type="Boom", started_at=now, finished_at=now
    )
    await store.dead_letter(task_id, claim.token, attempt)


@pytest.mark.asyncio
async def test_the_api_and_the_console_show_a_payload_kept_by_reference_whole(
    tmp_path: Path,
) -> None:
    async with MemoryStorage() as store:
        app = _app(tmp_path / "blobs")
        task = await rdq.Client(store, app, keys=None).submit("h", BIG)
        assert (await store.get(task.id)).payload is None
        node = create_app(node_settings(queues=["q"]), storage=store, engine_app=app, keys=None)
        async with AsyncTestClient(app=node) as client:
            got = (await client.get(f"/v1/tasks/{task.id}", headers=AUTH)).json()
            assert got["payload"] == BIG and PAYLOAD_REF_HEADER in got["headers"]

            posted = await client.post(
                "/v1/tasks", json={"handler_ref": "h", "payload": BIG, "id": "api-1"}, headers=AUTH
            )
            assert posted.status_code == 201, posted.text
            assert posted.json()["payload"] == BIG
            stored = await store.get("api-1")
            assert stored.payload is None, "the API submits by reference too"
            assert stored.headers[PAYLOAD_REF_HEADER] == got["headers"][PAYLOAD_REF_HEADER]

            await _dead(store, task.id)
            exported = await client.get("/v1/queues/q/dlq/export", headers=AUTH)
            [line] = [json.loads(x) for x in exported.text.splitlines()]
            assert line["id"] == task.id and line["payload"] == BIG, "exported whole"

            await _login(client, ADMIN_TOKEN)
            page = await client.get(f"/ui/tasks/{task.id}")
            assert page.status_code == 200
            assert "Kept in the blob store by reference" in page.text
            assert "row 01999 of a large payload" in page.text
            whole = await client.get(f"/ui/tasks/{task.id}/payload")
            assert whole.status_code == 200 and whole.json() == BIG
            assert "attachment" in whole.headers["content-disposition"]

            for blob in (tmp_path / "blobs").rglob("*"):
                if blob.is_file():
                    blob.unlink()
            missing = await client.get(f"/ui/tasks/{task.id}")
            assert "the blob store does not hold it" in missing.text


def test_rdq_copy_puts_each_blob_in_the_destinations_blob_store(tmp_path: Path) -> None:
    source, destination = tmp_path / "a.db", tmp_path / "b.db"
    app = _app(tmp_path / "blobs-a")

    async def submit() -> str:
        async with rdq.open_storage(f"sqlite:///{source}") as store:
            await store.migrate()
            return (await rdq.Client(store, app, keys=None).submit("h", BIG)).id

    task_id = asyncio.run(submit())
    result = CliRunner().invoke(
        main,
        [
            "copy",
            "--from",
            f"sqlite:///{source}",
            "--to",
            f"sqlite:///{destination}",
            "--blobs",
            str(tmp_path / "blobs-a"),
            "--to-blobs",
            str(tmp_path / "blobs-b"),
            "--state",
            str(tmp_path / "copy.json"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output

    async def copied() -> tuple[Any, Any]:
        async with rdq.open_storage(f"sqlite:///{destination}") as store:
            task = await store.get(task_id)
            blobs = Blobs(store=DirectoryBlobStore(tmp_path / "blobs-b"))
            return task, (await blobs.resolve(task)).payload

    task, payload = asyncio.run(copied())
    assert task.status == Status.PENDING and task.payload is None
    assert PAYLOAD_REF_HEADER in task.headers and payload == BIG
