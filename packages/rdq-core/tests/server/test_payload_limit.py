"""The payload limit is one rule for the Python client and the HTTP API, on every backend.

A payload encoding to ``limit - 1``, ``limit`` and ``limit + 1`` bytes goes through
``Client.submit`` and through ``POST /v1/tasks`` of a node served over HTTP: the first two are
stored inline and read back unchanged; the third, on a store that keeps payload references, is
kept in the blob store by both and read back unchanged, and elsewhere refused naming
``payload``, by both."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import pytest_asyncio

from rdq import Client, open_storage
from rdq.errors import ValidationError
from rdq.server import create_app
from rdq.spi import Storage
from rdq.spi.bounds import MAX_PAYLOAD_BYTES

from .conftest import ADMIN_TOKEN, auth, node_settings, running_node

SIZES = [MAX_PAYLOAD_BYTES - 1, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES + 1]
BACKENDS = ["memory", "postgres", "redis", "mongo", "sqlite"]


def _with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


@pytest.fixture(params=BACKENDS)
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh store of each backend (real servers started by the kit's fixtures)."""
    tag = uuid.uuid4().hex[:12]
    if request.param == "memory":
        return f"memory://limit-{tag}"
    if request.param == "sqlite":
        pytest.importorskip("rdq_sqlite")
        return f"sqlite:///{tmp_path / 'rdq.db'}"
    pytest.importorskip(f"rdq_{request.param}")
    base: str = request.getfixturevalue(f"{request.param}_url")
    if request.param == "postgres":
        separator = "&" if "?" in base else "?"
        return f"{base}{separator}schema=limit_{tag}"
    if request.param == "redis":
        separator = "&" if "?" in base else "?"
        return f"{base}{separator}prefix=limit-{tag}"
    return _with_path(base, f"/rdq_limit_{tag}")


@pytest_asyncio.fixture
async def storage(storage_url: str) -> AsyncIterator[Storage]:
    async with open_storage(storage_url) as store:
        await store.migrate()
        yield store


def _payload(encoded_bytes: int) -> str:
    """A JSON string whose encoding (with its quotes) is ``encoded_bytes`` long."""
    return "x" * (encoded_bytes - 2)


@pytest.mark.asyncio
async def test_the_client_and_the_api_agree_at_the_payload_limit(
    storage: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RDQ_BLOBS", str(tmp_path / "blobs"))
    by_reference = storage.capabilities().payload_refs
    client = Client(storage)
    app = create_app(node_settings(), storage=storage)
    async with running_node(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as api:
        for size in SIZES:
            payload = _payload(size)
            fits = size <= MAX_PAYLOAD_BYTES or by_reference
            if fits:
                submitted = await client.submit("h", payload, id=f"client-{size}")
                assert submitted.created
                stored = await storage.get(f"client-{size}")
                inline = size <= MAX_PAYLOAD_BYTES
                assert (stored.payload == payload) is inline, "above the limit: by reference"
                assert (await Client(storage).blobs.resolve(stored)).payload == payload
            else:
                with pytest.raises(ValidationError) as info:
                    await client.submit("h", payload, id=f"client-{size}")
                assert info.value.field == "payload"

            body = {"id": f"api-{size}", "handler_ref": "h", "payload": payload}
            response = await api.post("/v1/tasks", json=body, headers=auth(ADMIN_TOKEN))
            if fits:
                assert response.status_code == 201, (size, response.text[:300])
                read = await api.get(f"/v1/tasks/api-{size}", headers=auth(ADMIN_TOKEN))
                assert read.json()["payload"] == payload
                stored = await storage.get(f"api-{size}")
                assert (stored.payload == payload) is (size <= MAX_PAYLOAD_BYTES)
            else:
                assert response.status_code == 422, (size, response.text[:300])
                error = response.json()["error"]
                assert error["field"] == "payload"
                assert f"is {size} bytes encoded" in error["message"]
                missing = await api.get(f"/v1/tasks/api-{size}", headers=auth(ADMIN_TOKEN))
                assert missing.status_code == 404


@pytest.mark.asyncio
async def test_unknown_fields_share_the_limit_with_the_payload() -> None:
    """Unknown fields (which only the API accepts) count as the JSON object they form."""
    unknown = {"note": "kept"}
    unknown_bytes = len(b'{"note":"kept"}')
    async with open_storage("memory://limit-unknown") as storage:
        app = create_app(node_settings(), storage=storage)
        async with running_node(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as api:
            for size in SIZES:
                payload = _payload(size - unknown_bytes)
                body = {"id": f"u-{size}", "handler_ref": "h", "payload": payload, **unknown}
                response = await api.post("/v1/tasks", json=body, headers=auth(ADMIN_TOKEN))
                if size <= MAX_PAYLOAD_BYTES:
                    assert response.status_code == 201, (size, response.text[:300])
                    assert response.json()["note"] == "kept"
                else:
                    assert response.status_code == 422, (size, response.text[:300])
                    message = response.json()["error"]["message"]
                    assert message.startswith(f"with the unknown fields, is {size} bytes")
