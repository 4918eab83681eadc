"""Operator actions as OpenTelemetry spans (``rdq-core[otel]``): every redrive, purge and
cancel, dry runs and failures included, through the admin and through the HTTP API; and
without OpenTelemetry nothing is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rdq.admin import TaskAdmin, TaskSelector
from rdq.errors import StorageUnavailable
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq.spi import DLQFilter, Envelope, Selector, Status, Storage
from rdq_memory import MemoryStorage

EXPORTER = InMemorySpanExporter()
_EXPORTING: list[TracerProvider] = []


@pytest.fixture(autouse=True)
def exporter() -> InMemorySpanExporter:
    """The process's SDK provider (OpenTelemetry allows one; another test module may have
    installed it first) exporting to ``EXPORTER``, emptied for each test."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    installed = trace.get_tracer_provider()
    assert isinstance(installed, TracerProvider)
    if installed not in _EXPORTING:
        installed.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _EXPORTING.append(installed)
    EXPORTER.clear()
    return EXPORTER


def admin_spans() -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name.startswith("rdq ")]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.asyncio
async def test_redrive_purge_and_cancel_are_spans_with_what_they_did(
    storage: Storage, dead_letter: Any
) -> None:
    for i in range(3):
        await dead_letter(storage, f"d{i}", error_type="Boom" if i < 2 else "Other")
    await storage.enqueue(Envelope(id="p0", queue="q", handler_ref="h"))
    admin = TaskAdmin(storage)

    boom = Selector(filter=DLQFilter(error_type="Boom"))
    assert await admin.redrive("q", boom, actor="alice", dry_run=True) == 2
    assert await admin.redrive("q", boom, actor="alice", reason="fixed") == 2
    assert await admin.purge("q", Selector(ids=["d2", "nope"]), actor="bob") == 1
    assert await admin.cancel("q", TaskSelector(ids=["p0"]), actor="carol") == 1

    counted, redriven, purged, cancelled = admin_spans()
    assert [s.name for s in (counted, redriven, purged, cancelled)] == [
        "rdq redrive",
        "rdq redrive",
        "rdq purge",
        "rdq cancel",
    ]
    assert attributes(counted) == {
        "rdq.queue": "q",
        "rdq.action": "redrive",
        "rdq.selector": "filter",
        "rdq.dry_run": True,
        "rdq.actor": "alice",
        "rdq.count": 2,
        "rdq.matched": 2,
        "rdq.outcome": "done",
    }
    assert attributes(redriven) == attributes(counted) | {"rdq.dry_run": False}
    assert attributes(purged) == {
        "rdq.queue": "q",
        "rdq.action": "purge",
        "rdq.selector": "ids",
        "rdq.dry_run": False,
        "rdq.actor": "bob",
        "rdq.count": 1,
        "rdq.matched": 1,
        "rdq.outcome": "done",
    }
    assert attributes(cancelled)["rdq.action"] == "cancel"
    assert attributes(cancelled)["rdq.actor"] == "carol"
    assert attributes(cancelled)["rdq.count"] == 1
    assert all(s.status.status_code is not StatusCode.ERROR for s in admin_spans())
    assert (await storage.get("p0")).status == Status.CANCELLED


class FailingSecondCancel(MemoryStorage):
    """Cancels the first chunk of ids, then the store goes away."""

    calls = 0

    async def cancel(self, queue: str, ids: list[str]) -> int:
        self.calls += 1
        if self.calls > 1:
            raise StorageUnavailable("connection lost")
        return await super().cancel(queue, ids)


@pytest.mark.asyncio
async def test_an_action_failing_part_way_is_an_error_span_with_the_count_done() -> None:
    async with FailingSecondCancel() as storage:
        ids = [f"p{i:04d}" for i in range(501)]  # two chunks of at most 500
        for task_id in ids:
            await storage.enqueue(Envelope(id=task_id, queue="q", handler_ref="h"))
        admin = TaskAdmin(storage)
        with pytest.raises(StorageUnavailable):
            await admin.cancel("q", TaskSelector(ids=ids), actor="carol", reason="stop")

    [failed] = admin_spans()
    assert failed.name == "rdq cancel"
    assert attributes(failed) == {
        "rdq.queue": "q",
        "rdq.action": "cancel",
        "rdq.selector": "ids",
        "rdq.dry_run": False,
        "rdq.actor": "carol",
        "rdq.count": 500,
        "rdq.outcome": "failed",
        "rdq.error_type": "StorageUnavailable",
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]


@pytest.mark.asyncio
async def test_an_action_through_the_api_is_a_span_naming_the_token_owner(
    dead_letter: Any,
) -> None:
    token = "tracing-admin-token-0123"
    settings = ServerSettings(
        tokens=[TokenSpec(owner="ops", rights=["read", "admin"], token=token)],
        work=False,
        secure_cookies=False,
    )
    async with MemoryStorage() as storage:
        await dead_letter(storage, "d0")
        app = create_app(settings, storage=storage)
        async with AsyncTestClient(app=app) as http:
            response = await http.post(
                "/v1/queues/q/dlq/redrive",
                headers={"Authorization": f"Bearer {token}"},
                json={"ids": ["d0"], "reason": "fixed"},
            )
            assert response.status_code == 200, response.text
    [redriven] = admin_spans()
    assert redriven.name == "rdq redrive"
    assert attributes(redriven)["rdq.actor"] == "ops (admin)"
    assert attributes(redriven)["rdq.count"] == 1


WITHOUT_OTEL = """
import asyncio, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("not installed")
        return None

sys.meta_path.insert(0, Block())
from rdq.admin import TaskAdmin, TaskSelector
from rdq.spi import Envelope, Selector, Status
from rdq_memory import MemoryStorage

async def main():
    async with MemoryStorage() as storage:
        for task_id in ("a", "b"):
            await storage.enqueue(Envelope(id=task_id, queue="q", handler_ref="h"))
        admin = TaskAdmin(storage)
        assert await admin.cancel("q", TaskSelector(ids=["a"]), actor="x", dry_run=True) == 1
        assert await admin.cancel("q", TaskSelector(ids=["a", "b"]), actor="x") == 2
        assert await admin.purge("q", Selector(ids=["a"]), actor="x") == 1
        assert await admin.redrive("q", Selector(ids=["b"]), actor="x") == 0

asyncio.run(main())
assert not any(name.startswith("opentelemetry") for name in sys.modules)
print("ok")
"""


def test_without_opentelemetry_actions_work_and_import_nothing(tmp_path: Any) -> None:
    script = tmp_path / "no_otel_admin.py"
    script.write_text(textwrap.dedent(WITHOUT_OTEL))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
