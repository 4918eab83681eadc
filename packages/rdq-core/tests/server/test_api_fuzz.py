"""Fuzz the API from its own OpenAPI document (schemathesis): no 5xx, every response matches
the schema and content type the document declares for it, and a request the document calls
invalid is refused (the API neither converts nor ignores what the document forbids)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection, not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from rdq.server import create_app
from rdq.spi import Attempt, Envelope, Outcome
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings


async def _seed(name: str) -> None:
    async with MemoryStorage(name=name) as store:
        for i in range(3):
            await store.enqueue(Envelope(id=f"seed-{i}", queue="default", handler_ref="h"))
        for claim in await store.claim_due("default", 10, timedelta(seconds=30)):
            now = datetime.now(UTC)
            await store.dead_letter(
                claim.task.id,
                claim.token,
                Attempt(number=1, outcome=Outcome.FAILED, error_type="Boom", finished_at=now),
            )


@pytest.fixture(scope="module")
def node_url() -> Iterator[str]:
    name = f"fuzz-{uuid.uuid4().hex}"
    asyncio.run(_seed(name))
    app = create_app(node_settings(storage=f"memory://{name}", open_metrics=True))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        thread.join(0.05)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def _document() -> dict[str, Any]:
    """The node's OpenAPI document (the same one it serves at /schema/openapi.json)."""
    app = create_app(node_settings(storage="memory://", open_metrics=True))
    document: dict[str, Any] = msgspec.json.decode(
        msgspec.json.encode(app.openapi_schema.to_schema())
    )
    return document


schema = schemathesis.openapi.from_dict(_document())


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_keeps_its_own_contract(case: Any, node_url: str) -> None:
    case.call_and_validate(
        base_url=node_url,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        checks=[
            not_a_server_error,
            negative_data_rejection,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        timeout=30,
    )
