"""Trace propagation with OpenTelemetry (``rdq-core[otel]``): submit carries the trace context
in the task's headers, each attempt is a span linked to it, and without the package nothing
changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import rdq
from rdq.spi import Status
from rdq.tracing import span

from .conftest import fast_worker, running, wait_status

EXPORTER = InMemorySpanExporter()
_EXPORTING: list[TracerProvider] = []


@pytest.fixture(autouse=True)
def provider() -> TracerProvider:
    """The SDK's provider, installed once for the process (OpenTelemetry allows one, so
    another test module may have installed it first), exporting to ``EXPORTER``."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    installed = trace.get_tracer_provider()
    assert isinstance(installed, TracerProvider)
    if installed not in _EXPORTING:
        installed.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _EXPORTING.append(installed)
    EXPORTER.clear()
    return installed


def spans_named(name: str) -> list:  # type: ignore[type-arg]
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


@pytest.mark.asyncio
async def test_each_attempt_is_a_span_linked_to_the_submitter(storage, queue):
    app = rdq.App()
    app.queue(queue, max_attempts=2, backoff=rdq.Backoff.fixed(0.05))
    tracer = trace.get_tracer("test")
    inner_threads: list[int] = []

    @app.handler("charge", queue=queue)
    async def charge(payload: object, ctx: rdq.TaskContext) -> None:
        with tracer.start_as_current_span("call gateway"):
            if ctx.attempt == 1:
                raise ConnectionError("gateway reset")

    @app.handler("receipt", queue=queue)
    def receipt(payload: object) -> None:  # a plain function: in a thread
        inner_threads.append(threading.get_ident())
        with tracer.start_as_current_span("render receipt"):
            pass

    client = rdq.Client(storage, app)
    with tracer.start_as_current_span("POST /orders") as request:
        charged = await client.submit("charge", {"order": 1})
        [receipted] = await client.submit_many([rdq.Submission("receipt", {"order": 1})])
    submitter = request.get_span_context()
    task = await client.get(charged.id)
    assert task.headers["traceparent"].split("-")[1] == f"{submitter.trace_id:032x}"
    async with running(fast_worker(app, storage)):
        await wait_status(storage, charged.id, Status.SUCCEEDED)
        await wait_status(storage, receipted.id, Status.SUCCEEDED)

    attempts = spans_named(f"process {queue}")
    by_task: dict[str, list] = {}  # type: ignore[type-arg]
    for s in attempts:
        by_task.setdefault(s.attributes["messaging.message.id"], []).append(s)
    failed, succeeded = sorted(by_task[charged.id], key=lambda s: s.attributes["rdq.attempt"])
    for s in (failed, succeeded):
        assert s.kind is SpanKind.CONSUMER
        assert [link.context.span_id for link in s.links] == [submitter.span_id]
        assert s.attributes["messaging.system"] == "rdq"
        assert s.attributes["messaging.destination.name"] == queue
        assert s.attributes["rdq.handler"] == "charge"
    assert failed.attributes["rdq.outcome"] == "FAILED"
    assert failed.attributes["rdq.error_type"] == "ConnectionError"
    assert failed.status.status_code is StatusCode.ERROR
    assert succeeded.attributes["rdq.outcome"] == "SUCCEEDED"
    assert succeeded.status.status_code is not StatusCode.ERROR
    # the handler's own spans are children of its attempt, in a thread too
    [thread_attempt] = by_task[receipted.id]
    children = {s.name: s for s in EXPORTER.get_finished_spans() if s.parent is not None}
    assert children["render receipt"].parent.span_id == thread_attempt.context.span_id
    assert inner_threads and inner_threads[0] != threading.get_ident()
    gateway = [s for s in EXPORTER.get_finished_spans() if s.name == "call gateway"]
    assert {s.parent.span_id for s in gateway} == {
        failed.context.span_id,
        succeeded.context.span_id,
    }


@pytest.mark.asyncio
async def test_headers_are_left_alone_without_a_current_span(storage, queue):
    sub = await rdq.Client(storage).submit("job", None, queue=queue, headers={"x": "1"})
    assert (await storage.get(sub.id)).headers == {"x": "1"}


def test_the_tracing_helper_makes_a_span_for_admin_operations():
    with span("rdq redrive", {"rdq.queue": "payments", "rdq.count": 3}) as current:
        assert current is not None
    [done] = spans_named("rdq redrive")
    assert done.attributes["rdq.count"] == 3


WITHOUT_OTEL = """
import asyncio, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("not installed")
        return None

sys.meta_path.insert(0, Block())
import rdq
from rdq.tracing import span

app = rdq.App()

@app.handler("job", queue="q")
async def job(payload):
    return None

async def main():
    async with rdq.open_storage("memory://no-otel") as storage:
        sub = await rdq.Client(storage, app).submit("job")
        worker = rdq.Worker(app, storage, maintenance=False)
        running = asyncio.create_task(worker.run())
        while (await storage.get(sub.id)).status != "SUCCEEDED":
            await asyncio.sleep(0.02)
        worker.stop()
        await running
        assert (await storage.get(sub.id)).headers == {}
    with span("x") as nothing:
        assert nothing is None

asyncio.run(main())
assert not any(name.startswith("opentelemetry") for name in sys.modules)
print("ok")
"""


def test_without_opentelemetry_nothing_is_imported_and_everything_works(tmp_path):
    script = tmp_path / "no_otel.py"
    script.write_text(textwrap.dedent(WITHOUT_OTEL))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
