"""Payloads by reference, end to end through the public API: a payload above the inline limit
goes to the blob store and the task carries its reference; the handler, ``TaskAdmin.get`` and a
purge's archive see the payload whole; the sweep deletes a blob only once no task refers to
it; a store without the capability keeps payloads inline. And with sealed payloads: the
client seals first and offloads the sealed bytes, so the blob store never holds clear text."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rdq
from rdq.admin import TaskAdmin
from rdq.blobs import PAYLOAD_SIZE_HEADER, Blobs, DirectoryBlobStore, digest_of, sweep
from rdq.keys import Keyring, is_sealed
from rdq.retention import DirectoryArchive, read_tasks
from rdq.spi import PAYLOAD_REF_HEADER, Selector, Status, Storage

from .conftest import fast_worker, running, wait_status

INLINE_LIMIT = 4096
BIG = {"rows": [f"card 4111 1111 1111 1111, row {i:05d}" for i in range(2000)]}
"""About 80 KiB of JSON: above the inline limit of these tests."""


@pytest.fixture(autouse=True)
def _big_of_its_own() -> Iterator[None]:
    """A payload of this test's own: a blob is held by any task of any queue carrying its
    reference, and the tests of one backend share a database."""
    global BIG
    kept = BIG
    BIG = {**kept, "test": uuid.uuid4().hex}
    yield
    BIG = kept


def _app(queue: str, blob_dir: Path, seen: list[Any], *, fail: bool = False) -> rdq.App:
    app = rdq.App(blobs=Blobs(store=DirectoryBlobStore(blob_dir), inline_limit=INLINE_LIMIT))
    app.queue(queue, max_attempts=1)

    @app.handler("take", queue=queue)
    async def take(payload: Any) -> None:
        seen.append(payload)
        if fail:
            raise rdq.Permanent("refused")

    return app


def _blob_files(blob_dir: Path) -> list[Path]:
    return [p for p in blob_dir.rglob("*") if p.is_file() and ".partial" not in p.name]


@pytest.mark.asyncio
async def test_a_large_payload_is_kept_by_reference_and_the_handler_sees_it_whole(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    seen: list[Any] = []
    app = _app(queue, tmp_path / "blobs", seen)
    client = rdq.Client(storage, app, keys=None)
    small = await client.submit("take", {"n": 1})
    big = await client.submit("take", BIG)
    stored = await storage.get(big.id)
    if not storage.capabilities().payload_refs:  # the engine keeps it inline, as before
        assert stored.payload == BIG and PAYLOAD_REF_HEADER not in stored.headers
        assert _blob_files(tmp_path / "blobs") == []
        return
    assert stored.payload is None
    reference = stored.headers[PAYLOAD_REF_HEADER]
    assert int(stored.headers[PAYLOAD_SIZE_HEADER]) == len(msgspec.json.encode(BIG))
    [blob] = _blob_files(tmp_path / "blobs")
    assert blob.name == digest_of(reference)
    assert (await storage.get(small.id)).payload == {"n": 1}, "a small payload stays inline"
    whole = await TaskAdmin(storage, blobs=app.blobs).get(big.id)
    assert whole.payload == BIG
    async with running(fast_worker(app, storage)):
        await wait_status(storage, big.id, Status.SUCCEEDED)
        await wait_status(storage, small.id, Status.SUCCEEDED)
    assert BIG in seen and {"n": 1} in seen


@pytest.mark.asyncio
async def test_a_purge_archives_the_payload_whole_and_the_sweep_then_releases_its_blob(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    if not storage.capabilities().payload_refs:
        pytest.skip("payloads stay inline in this store")
    seen: list[Any] = []
    app = _app(queue, tmp_path / "blobs", seen, fail=True)
    client = rdq.Client(storage, app, keys=None)
    dead = await client.submit("take", BIG)
    async with running(fast_worker(app, storage)):
        await wait_status(storage, dead.id, Status.DEAD)
    twin = await client.submit("take", BIG, delay=3600)  # the same bytes: the same blob
    [blob] = _blob_files(tmp_path / "blobs")
    # a grace of nothing: only the references decide
    assert (await sweep(storage, app.blobs.store, grace=0.0)).deleted == 0
    admin = TaskAdmin(storage, archive=DirectoryArchive(tmp_path / "archive"), blobs=app.blobs)
    assert await admin.purge(queue, Selector(ids=[dead.id]), actor="test") == 1
    [archived] = read_tasks(tmp_path / "archive")
    assert archived.id == dead.id and archived.payload == BIG, "the archive holds it whole"
    swept = await sweep(storage, app.blobs.store, grace=0.0)
    assert (swept.held, swept.deleted) == (1, 0), "the twin still refers to it"
    assert blob.exists()
    await storage.cancel(queue, [twin.id])
    assert await admin.purge(queue, Selector(ids=[twin.id]), actor="test") == 1
    assert (await sweep(storage, app.blobs.store, grace=0.0)).deleted == 1
    assert _blob_files(tmp_path / "blobs") == []


@pytest.mark.asyncio
async def test_an_import_of_a_large_payload_puts_it_back_in_the_blob_store(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    if not storage.capabilities().payload_refs:
        pytest.skip("payloads stay inline in this store")
    seen: list[Any] = []
    app = _app(queue, tmp_path / "blobs", seen, fail=True)
    client = rdq.Client(storage, app, keys=None)
    dead = await client.submit("take", BIG)
    async with running(fast_worker(app, storage)):
        await wait_status(storage, dead.id, Status.DEAD)
    admin = TaskAdmin(storage, archive=DirectoryArchive(tmp_path / "archive"), blobs=app.blobs)
    await admin.purge(queue, Selector(ids=[dead.id]), actor="test")
    await sweep(storage, app.blobs.store, grace=0.0)
    assert _blob_files(tmp_path / "blobs") == []
    report = await admin.import_dead(read_tasks(tmp_path / "archive"), actor="test")
    assert report.queues == {queue: 1}
    back = await storage.get(dead.id)
    assert back.status == Status.DEAD and back.payload is None
    assert len(_blob_files(tmp_path / "blobs")) == 1
    assert (await admin.get(dead.id)).payload == BIG


@pytest.mark.asyncio
async def test_a_sealed_payload_is_offloaded_sealed_and_the_worker_opens_it(
    storage: Storage, queue: str, tmp_path: Path
) -> None:
    """Sealing and references compose in one order: the client seals, then keeps the sealed
    bytes by reference; the worker reads the reference back, then opens the seal. The blob
    store holds ciphertext only."""
    if not storage.capabilities().payload_refs:
        pytest.skip("payloads stay inline in this store")
    keys = Keyring({"v1": secrets.token_bytes(32)}, "v1")
    seen: list[Any] = []
    app = _app(queue, tmp_path / "blobs", seen)
    client = rdq.Client(storage, app, keys=keys)
    task = await client.submit("take", BIG)
    stored = await storage.get(task.id)
    assert is_sealed(stored) and stored.payload is None and PAYLOAD_REF_HEADER in stored.headers
    [blob] = _blob_files(tmp_path / "blobs")
    data = blob.read_bytes()
    assert b"4111" not in data and b"row 0" not in data, "no clear text in the blob store"
    read_back = await TaskAdmin(storage, blobs=app.blobs).get(task.id)
    assert is_sealed(read_back) and isinstance(read_back.payload, str), "read back, still sealed"
    async with running(fast_worker(app, storage, keys=None)):  # without the key: it waits
        await wait_status(storage, task.id, Status.PENDING)
    assert seen == []
    async with running(fast_worker(app, storage, keys=keys)):
        await wait_status(storage, task.id, Status.SUCCEEDED)
    assert seen == [BIG]
