"""The node's OpenAPI document is its contract: Schemathesis, run as its command line runs it,
over every operation of the document the node serves at ``/schema/openapi.json``, in every
phase the installed version offers (the examples, the coverage phase's boundary values, the
property-based fuzzing, and the stateful phase that chains operations by the document's
links), with every check: no 5xx, no response outside the document, a request the document
calls valid is accepted, one it calls invalid refused, and a method the path does not take
answered 405 with ``Allow``.

One allowance, said here rather than hidden: a page ``cursor`` is opaque (the ``next_cursor``
the node handed out, bound to its queue and filter), so a generated one is answered 400
``stale_cursor`` although no schema can tell it from a real one — 400 counts as a refusal a
valid request may get. The node's other 400 is malformed JSON, which a generated body never
is.

Two nodes are tried: a plain one, and one with an application (``--app``), whose document
also lists the handlers and queues a submit may name. Both are fuzzed; the plain node also
gets the coverage phase's boundary values, the node with an application the stateful chains
(``RDQ_SCHEMATHESIS_PHASES=all`` runs every phase on both). The example count is bounded so each
run takes some 20 seconds; ``RDQ_SCHEMATHESIS_EXAMPLES`` raises it (``-n``) for a longer hunt.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn

from rdq import App
from rdq.server import create_app
from rdq.spi import Attempt, Control, Envelope, Outcome, WorkerInfo
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings

EXAMPLES = int(os.environ.get("RDQ_SCHEMATHESIS_EXAMPLES", "15"))
ALL_PHASES = "examples,coverage,fuzzing,stateful"
PHASES = {"plain": "examples,coverage,fuzzing", "with-app": "examples,fuzzing,stateful"}


async def _scene(name: str) -> None:
    """A store with something behind every operation: dead tasks of two error types, waiting
    ones, a pause, a registered worker that names its handlers and dependency."""
    async with MemoryStorage(name=name) as store:
        for i in range(6):
            await store.enqueue(
                Envelope(id=f"dead-{i}", queue="pay", handler_ref="charge", keys=["dep:psp"])
            )
        for claim in await store.claim_due("pay", 10, timedelta(seconds=30)):
            error = "GatewayDown" if claim.task.id < "dead-3" else "KeyError"
            await store.dead_letter(
                claim.task.id,
                claim.token,
                Attempt(
                    number=1,
                    outcome=Outcome.FAILED,
                    error_type=error,
                    finished_at=datetime.now(UTC),
                ),
            )
        for i in range(3):
            await store.enqueue(
                Envelope(id=f"wait-{i}", queue="pay", handler_ref="refund"),
                delay=timedelta(hours=1),
            )
            await store.enqueue(Envelope(id=f"mail-{i}", queue="mail", handler_ref="send"))
        await store.put_control(
            Control(queue="mail", key="*", paused=True, state={"pause": {"by": "ops"}}),
            expected_version=0,
        )
        await store.heartbeat_worker(
            WorkerInfo(
                id="box:1:w",
                queues=["pay", "mail"],
                concurrency=4,
                extra={"handlers": ["charge", "refund", "send"], "dependencies": ["psp"]},
            )
        )


def _application() -> App:
    app = App()
    app.queue("pay")
    app.queue("mail")

    @app.handler("charge", queue="pay", dependency="psp")
    async def charge(payload: object) -> None: ...

    @app.handler("send", queue="mail")
    async def send(payload: object) -> None: ...

    return app


@pytest.fixture(scope="module", params=["plain", "with-app"])
def node(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The node's URL and the phases to run against it."""
    name = f"schemathesis-{uuid.uuid4().hex}"
    asyncio.run(_scene(name))
    app = create_app(
        node_settings(storage=f"memory://{name}", open_metrics=True, work=False),
        engine_app=_application() if request.param == "with-app" else None,
    )
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
        phases = PHASES[request.param]
        if os.environ.get("RDQ_SCHEMATHESIS_PHASES") == "all":
            phases = ALL_PHASES
        yield f"http://127.0.0.1:{port}", phases
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.mark.slow
def test_schemathesis_finds_no_failure_in_any_phase(node: tuple[str, str], tmp_path: Path) -> None:
    node_url, phases = node
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[checks.positive_data_acceptance]\n"
        'expected-statuses = ["2xx", "400", "401", "403", "404", "409"]\n'
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(config),
            "run",
            f"{node_url}/schema/openapi.json",
            "--header",
            f"Authorization: Bearer {ADMIN_TOKEN}",
            "--phases",
            phases,
            "--checks",
            "all",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            "20261206",
            "--no-shrink",
            "--request-timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"},
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    assert "Selected: " in report and "Tested: " in report
    selected = report.split("Selected: ", 1)[1].split()[0]
    tested = report.split("Tested: ", 1)[1].split()[0]
    assert tested == selected.split("/")[0], f"every operation is tested: {report[-3000:]}"
