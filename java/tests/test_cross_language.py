"""A task crosses languages and back through the DLQ, on one PostgreSQL schema.

Python services submit and operate (CLI, web UI); Java workers (``io.rdq.worker.Worker`` in
``io.rdq.harness.LoopWorker``) and producers use the Java binding directly over JDBC. Each test
reads what the other language wrote, so the schema, the attempt records and the fencing are
checked as a contract between the two."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
import pytest_asyncio
from litestar.testing import AsyncTestClient

from rdq import App, Client, RetryAfter, Worker, open_storage
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq.spi import Envelope, Outcome, RetryOverride, Status, Storage

from ._java import java_worker, run_java

T = TypeVar("T")
PATIENCE = 60.0
ADMIN = "admin-token-0123456789"


@pytest.fixture(autouse=True)
def _built(java_build: str) -> None:
    """The Java programs are built before any test runs them."""


@pytest_asyncio.fixture
async def store(python_url: str) -> AsyncIterator[Storage]:
    """rdq's Python plugin on the module's schema, which it migrates (Java runs on it)."""
    async with open_storage(python_url) as storage:
        await storage.migrate()
        yield storage


@pytest.fixture
def queue() -> str:
    return f"billing-{uuid.uuid4().hex[:8]}"


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while True:
        found = await probe()
        if found is not None:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def task_in(store: Storage, task_id: str, *statuses: Status) -> Envelope:
    async def probe() -> Envelope | None:
        task = await store.get(task_id)
        return task if task.status in statuses else None

    return await eventually(probe, f"{task_id} to be {'/'.join(statuses)}")


def rdq_cli(*args: str) -> str:
    """Run the ``rdq`` command line; its standard output."""
    script = Path(sys.executable).with_name("rdq")
    done = subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"rdq {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def run_python_worker(
    app: App, store: Storage, queue: str, worker_id: str, until: Callable[[], Awaitable[bool]]
) -> None:
    """An rdq (Python) worker on ``queue`` until ``until()`` holds, then stopped gracefully."""
    worker = Worker(app, store, queues=[queue], worker_id=worker_id, poll_min=0.02, poll_max=0.2)
    running = asyncio.create_task(worker.run())
    try:

        async def done() -> bool | None:
            if running.done():
                running.result()
            return True if await until() else None

        await eventually(done, "the Python worker to finish its part")
    finally:
        worker.stop()
        await asyncio.wait_for(running, PATIENCE)


async def ui_pages(storage_url: str, queue: str, task_id: str) -> tuple[str, str]:
    """The DLQ page of ``queue`` and the page of ``task_id`` in rdq's web UI (a node on
    ``storage_url``, which it opens in the test client's own event loop)."""
    settings = msgspec.convert(
        {
            "storage": storage_url,
            "tokens": [TokenSpec(owner="ops", rights=["read", "admin"], token=ADMIN)],
            "queues": [queue],
            "work": False,
            "secure_cookies": False,  # the test client speaks plain HTTP
        },
        ServerSettings,
        from_attributes=True,
    )
    async with AsyncTestClient(app=create_app(settings)) as client:
        form = await client.get("/ui/login")
        nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
        assert nonce is not None, form.text
        login = await client.post(
            "/ui/login",
            data={"token": ADMIN, "login_csrf": nonce.group(1)},
            follow_redirects=False,
        )
        assert login.status_code == 303, login.text
        dlq = await client.get(f"/ui/queues/{queue}", params={"state": "dead"})
        page = await client.get(f"/ui/tasks/{task_id}")
        assert dlq.status_code == 200 and page.status_code == 200
        return dlq.text, page.text


@pytest.mark.asyncio
async def test_python_submits_java_dead_letters_python_redrives_java_succeeds(
    store: Storage, python_url: str, queue: str
) -> None:
    task_id = f"order-{uuid.uuid4().hex[:12]}"
    retry = RetryOverride(max_attempts=3, backoff="fixed", base=0.05)
    await Client(store).submit(
        "billing.charge", {"order": 42}, queue=queue, id=task_id, retry=retry
    )

    # attempt 1: a Python worker, whose handler asks to be retried a little later
    app = App()
    app.queue(queue, max_attempts=3, lease=30.0)

    @app.handler("billing.charge")
    async def charge(payload: dict[str, Any]) -> None:
        raise RetryAfter(1.0, "gateway down (python)")

    async def attempted_once() -> bool:
        return (await store.get(task_id)).attempt_count >= 1

    await run_python_worker(app, store, queue, "python-billing-1", attempted_once)

    # attempts 2 and 3: a Java worker whose handler fails; the third uses up max_attempts
    with java_worker(python_url, queue, "failing", "java-billing-1", "30", "10") as worker:
        dead = await task_in(store, task_id, Status.DEAD)
        worker.wait_for(f"recorded {task_id} 3 FAILED")
    assert [(a.number, a.outcome, a.worker_id) for a in dead.attempts] == [
        (1, Outcome.FAILED, "python-billing-1"),
        (2, Outcome.FAILED, "java-billing-1"),
        (3, Outcome.FAILED, "java-billing-1"),
    ]
    assert dead.attempts[0].error_type == "rdq.RetryAfter"
    java_error = dead.attempts[-1]
    assert java_error.error_type == "java.lang.IllegalStateException"
    assert java_error.error_message == "card processor down (order 42)"
    assert java_error.started_at is not None and java_error.finished_at is not None
    assert java_error.started_at <= java_error.finished_at

    # the Python operator finds it: the CLI (as JSON) and the web UI
    listed = json.loads(rdq_cli("dlq", "list", queue, "--storage", python_url, "--json"))
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    by_type = json.loads(
        rdq_cli(
            "dlq",
            "list",
            queue,
            "--storage",
            python_url,
            "--json",
            "--error-type",
            "java.lang.IllegalStateException",
        )
    )
    assert [t["id"] for t in by_type["tasks"]] == [task_id]
    shown = json.loads(rdq_cli("dlq", "show", task_id, "--storage", python_url, "--json"))
    assert [a["worker_id"] for a in shown["attempts"]] == [
        "python-billing-1",
        "java-billing-1",
        "java-billing-1",
    ]
    dlq_page, task_page = await ui_pages(python_url, queue, task_id)
    assert task_id in dlq_page and "java.lang.IllegalStateException" in dlq_page
    assert "java-billing-1" in task_page and "card processor down (order 42)" in task_page

    # ... and redrives it once the card processor is fixed
    rdq_cli(
        "dlq",
        "redrive",
        queue,
        task_id,
        "--storage",
        python_url,
        "--yes",
        "--reason",
        "card processor fixed",
    )
    assert (await store.get(task_id)).status == Status.PENDING

    with java_worker(python_url, queue, "fixed", "java-billing-2", "30", "10") as worker:
        done = await task_in(store, task_id, Status.SUCCEEDED)
        worker.wait_for(f"recorded {task_id} 1 SUCCEEDED")
    assert (done.attempt_count, done.redrive_count) == (1, 1)
    assert done.dead_lettered_at is None and done.completed_at is not None
    assert [(a.number, a.outcome, a.worker_id) for a in done.attempts] == [
        (1, Outcome.FAILED, "python-billing-1"),
        (2, Outcome.FAILED, "java-billing-1"),
        (3, Outcome.FAILED, "java-billing-1"),
        (1, Outcome.SUCCEEDED, "java-billing-2"),
    ]
    assert done.payload == {"order": 42} and done.retry == retry


@pytest.mark.asyncio
async def test_java_submits_and_python_works(store: Storage, python_url: str, queue: str) -> None:
    task_id = f"invoice-{uuid.uuid4().hex[:12]}"
    payload = '{"invoice":7,"lines":[{"sku":"Ä-1","qty":2}],"note":"✓ \\u0000"}'
    assert run_java("Submit", python_url, queue, "billing.invoice", task_id, payload).strip() == (
        "true"
    )
    assert run_java("Submit", python_url, queue, "billing.invoice", task_id, "{}").strip() == (
        "false"
    ), "a second admission of the same id in the same queue changes nothing"
    seen: list[Any] = []
    app = App()
    app.queue(queue, max_attempts=3)

    @app.handler("billing.invoice")
    async def invoice(payload: dict[str, Any]) -> None:
        seen.append(payload)
        if len(seen) == 1:
            raise RetryAfter(0.05, "ledger busy")

    async def succeeded() -> bool:
        return (await store.get(task_id)).status == Status.SUCCEEDED

    await run_python_worker(app, store, queue, "python-invoices", succeeded)
    done = await store.get(task_id)
    expected = {"invoice": 7, "lines": [{"sku": "Ä-1", "qty": 2}], "note": "✓ \u0000"}
    assert seen == [expected, expected]
    assert done.payload == expected and done.headers == {"producer": "java"}
    assert [(a.number, a.outcome, a.worker_id) for a in done.attempts] == [
        (1, Outcome.FAILED, "python-invoices"),
        (2, Outcome.SUCCEEDED, "python-invoices"),
    ]


@pytest.mark.asyncio
async def test_a_java_workers_late_completion_after_a_python_reclaim_is_refused(
    store: Storage, python_url: str, queue: str, tmp_path: Path
) -> None:
    task_id = f"slow-{uuid.uuid4().hex[:12]}"
    release = tmp_path / "release"
    await store.enqueue(
        Envelope(
            id=task_id, queue=queue, handler_ref="billing.slow", payload={"release": str(release)}
        )
    )
    # a one-second lease that the Java worker does not extend (its heartbeat is a minute), and
    # one handler slot, held by that task: the lapsed lease is Python's to reclaim, not Java's
    with java_worker(python_url, queue, "fixed", "java-slow", "1", "60", "1") as worker:
        worker.wait_for(f"claimed {task_id}")
        held = await store.get(task_id)
        assert held.status == Status.IN_FLIGHT and held.lease_expires_at is not None

        app = App()
        app.queue(queue, max_attempts=5, lease=30.0)

        @app.handler("billing.slow")
        async def slow(payload: dict[str, Any]) -> None:
            return None

        async def succeeded() -> bool:
            return (await store.get(task_id)).status == Status.SUCCEEDED

        # the Python worker reclaims the lapsed lease (by the database clock) and completes
        await run_python_worker(app, store, queue, "python-rescuer", succeeded)
        release.touch()  # the Java handler returns now, long after its lease lapsed
        stale = worker.wait_for(f"stale {task_id}")
    assert stale == f"stale {task_id} complete", "the late completion itself was refused"
    assert not any(line.startswith(f"recorded {task_id}") for line in worker.lines)
    done = await store.get(task_id)
    assert done.status == Status.SUCCEEDED
    assert [(a.number, a.outcome) for a in done.attempts] == [
        (1, Outcome.LEASE_EXPIRED),
        (2, Outcome.SUCCEEDED),
    ]
    lapsed, rescued = done.attempts
    assert lapsed.worker_id == "java-slow", "the record names the Java worker whose lease lapsed"
    assert held.claimed_by == "java-slow" and lapsed.started_at == held.claimed_at
    assert lapsed.finished_at is not None and lapsed.finished_at >= held.lease_expires_at
    assert lapsed.started_at == held.lease_expires_at - timedelta(seconds=1)
    assert rescued.worker_id == "python-rescuer"
