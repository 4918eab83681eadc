"""The console commands (``rdq stats``, ``tasks``, ``dlq groups``, ``audit``, ``migrate``) and
the CLI's edges: JSON errors, a --server that is not rdq, and actions named exactly."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import uvicorn
from click.testing import CliRunner

from rdq.cli import main
from rdq.cli._direct_target import DirectTarget
from rdq.cli._targets import Action
from rdq.errors import ValidationError
from rdq.server import create_app
from rdq.spi import Attempt, Envelope, Outcome, Selector, Status
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings

TRACEBACK = (
    'Traceback (most recent call last):\n  File "shop.py", line 9, in ship\nKeyError: "sku"\n'
)


def rdq(*args: str) -> tuple[int, str]:
    """Run ``rdq ARGS``; return the exit code and stdout (stderr too when it failed)."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


async def _seed(name: str) -> None:
    async with MemoryStorage(name=name) as store:
        for i in range(4):
            handler = "ship" if i < 3 else "mail"
            await store.enqueue(Envelope(id=f"d{i}", queue="shop", handler_ref=handler))
        for claim in await store.claim_due("shop", 10, timedelta(seconds=60)):
            now = datetime.now(UTC)
            attempt = Attempt(
                number=1,
                outcome=Outcome.FAILED,
                error_type="KeyError",
                error_message="'sku'",
                traceback=TRACEBACK,
                started_at=now,
                finished_at=now,
                worker_id="w-1",
            )
            await store.dead_letter(claim.task.id, claim.token, attempt)
        for i in range(3):
            await store.enqueue(Envelope(id=f"p{i}", queue="mail", handler_ref="send"))


@pytest.fixture
def store_url() -> str:
    name = f"console-{uuid.uuid4().hex}"
    asyncio.run(_seed(name))
    return f"memory://{name}"


async def _status(url: str, task_id: str) -> Status:
    async with MemoryStorage(name=url.removeprefix("memory://")) as store:
        return (await store.get(task_id)).status


def test_stats_without_queues_shows_every_queue(store_url: str) -> None:
    code, out = rdq("stats", "--storage", store_url, "--json")
    assert code == 0, out
    rows = {q["queue"]: q for q in json.loads(out)["queues"]}
    assert set(rows) == {"mail", "shop"}
    assert (rows["shop"]["dlq_depth"], rows["mail"]["pending"]) == (4, 3)
    code, out = rdq("stats", "--storage", store_url)
    assert code == 0 and "mail" in out and "shop" in out


def test_dlq_list_json_has_attempts_only_when_asked(store_url: str) -> None:
    dead = ["d0", "d1", "d2", "d3"]
    code, out = rdq("dlq", "list", "shop", "--storage", store_url, "--json")
    assert code == 0
    tasks = json.loads(out)["tasks"]
    assert sorted(t["id"] for t in tasks) == dead
    assert all("attempts" not in t for t in tasks)
    code, out = rdq("dlq", "list", "shop", "--storage", store_url, "--json", "--attempts")
    tasks = json.loads(out)["tasks"]
    assert sorted(t["id"] for t in tasks) == dead
    assert all(t["attempts"][-1]["error_type"] == "KeyError" for t in tasks)


def test_show_prints_the_traceback(store_url: str) -> None:
    code, out = rdq("dlq", "show", "d0", "--storage", store_url)
    assert code == 0, out
    assert 'KeyError: "sku"' in out and "traceback of attempt 1" in out


def test_errors_under_json_are_json(store_url: str) -> None:
    code, out = rdq("dlq", "show", "nope", "--storage", store_url, "--json")
    assert code == 1
    assert json.loads(out) == {
        "error": {"type": "NotFound", "message": "task 'nope' not found", "field": None}
    }
    code, out = rdq("tasks", "list", "bad queue", "--storage", store_url, "--json")
    assert code == 1 and json.loads(out)["error"]["field"] == "queue"
    code, out = rdq("dlq", "purge", "shop", "--storage", store_url, "--json", "--yes")
    assert code == 2 and json.loads(out)["error"]["type"] == "UsageError"


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_times_out_of_range_are_usage_errors(store_url: str, when: str) -> None:
    code, out = rdq("dlq", "list", "shop", "--after", when, "--storage", store_url)
    assert code == 2 and "out of range" in out


def test_a_server_that_is_not_rdq_is_one_line() -> None:
    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        for args in (("stats",), ("dlq", "list", "q"), ("dlq", "show", "x"), ("audit",)):
            code, out = rdq(*args, "--server", url, "--token", "t" * 20)
            assert code == 1, out
            assert out.strip().splitlines() == [
                f"Error: {url} does not answer like an rdq server node"
                + out.strip().split("rdq server node", 1)[1]
            ]
            assert "Traceback" not in out and "text/html" in out
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.asyncio
@pytest.mark.parametrize("verb", ["Redrive", "redrive ", "delete", "", "CANCEL"])
async def test_an_action_is_named_exactly_or_refused(verb: str) -> None:
    name = f"verb-{uuid.uuid4().hex}"
    await _seed(name)
    with pytest.raises(ValidationError) as info:
        Action(verb, "shop", Selector.by_ids("d0"), dry_run=False)  # type: ignore[arg-type]
    assert info.value.field == "action"
    async with DirectTarget(f"memory://{name}", actor="ops") as target:
        redrive = Action("redrive", "shop", Selector.by_ids("d0"), dry_run=False)
        assert (await target.act(redrive))["done"] == 1
    assert await _status(f"memory://{name}", "d0") == Status.PENDING
    assert await _status(f"memory://{name}", "d1") == Status.DEAD


def test_tasks_list_and_cancel_with_a_reason(store_url: str) -> None:
    code, out = rdq("tasks", "list", "mail", "--storage", store_url, "--json")
    assert code == 0
    assert [t["id"] for t in json.loads(out)["tasks"]] == ["p0", "p1", "p2"]
    code, out = rdq(
        "tasks", "cancel", "mail", "--handler-ref", "send", "--dry-run", "--storage", store_url
    )
    assert code == 0 and "3" in out
    code, out = rdq(
        "tasks",
        "cancel",
        "mail",
        "p0",
        "p1",
        "--reason",
        "sent by hand",
        "--yes",
        "--actor",
        "ops@desk",
        "--storage",
        store_url,
    )
    assert code == 0 and "2 task(s) of queue mail cancelled" in out, out
    code, out = rdq("tasks", "list", "mail", "--status", "cancelled", "--storage", store_url)
    assert code == 0 and "p0" in out and "p1" in out and "p2" not in out
    code, out = rdq("audit", "--storage", store_url, "--json")
    (entry,) = json.loads(out)["entries"]
    assert (entry["actor"], entry["action"], entry["count"], entry["reason"]) == (
        "ops@desk",
        "cancel",
        2,
        "sent by hand",
    )


def test_groups_and_a_group_purge(store_url: str) -> None:
    code, out = rdq("dlq", "groups", "shop", "--storage", store_url, "--json")
    assert code == 0
    groups = [(g["handler_ref"], g["error_type"], g["count"]) for g in json.loads(out)["groups"]]
    assert groups == [("ship", "KeyError", 3), ("mail", "KeyError", 1)]
    code, out = rdq(
        "dlq",
        "purge",
        "shop",
        "--handler-ref",
        "ship",
        "--error-type",
        "KeyError",
        "--reason",
        "bad SKUs",
        "--yes",
        "--storage",
        store_url,
    )
    assert code == 0 and "3 task(s) of queue shop purged" in out
    code, out = rdq("audit", "--storage", store_url, "--action", "purge")
    assert code == 0 and "bad SKUs" in out


@pytest.fixture
def node_url(store_url: str) -> Iterator[str]:
    app = create_app(node_settings(storage=store_url))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
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


def test_the_console_commands_through_a_node(node_url: str, store_url: str) -> None:
    remote = ("--server", node_url, "--token", ADMIN_TOKEN)
    code, out = rdq("tasks", "list", "mail", *remote, "--json")
    assert code == 0, out
    assert [t["id"] for t in json.loads(out)["tasks"]] == ["p0", "p1", "p2"]
    code, out = rdq("tasks", "cancel", "mail", "--all", "--reason", "r", "--yes", *remote)
    assert code == 0 and "3 task(s)" in out, out
    code, out = rdq("dlq", "groups", "shop", *remote, "--json")
    assert json.loads(out)["groups"][0]["count"] == 3
    code, out = rdq("tasks", "show", "d0", *remote)
    assert 'KeyError: "sku"' in out
    code, out = rdq("audit", *remote, "--json")
    (entry,) = json.loads(out)["entries"]
    assert (entry["actor"], entry["action"], entry["count"]) == ("alice (admin)", "cancel", 3)


class _Migrating:
    """Reports the steps it applied, as a store with numbered migrations does."""

    async def __aenter__(self) -> _Migrating:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def migrate(self) -> list[str]:
        return ["0001_init", "0002_id_conflict"]


def test_migrate_says_what_it_applied(monkeypatch: pytest.MonkeyPatch, store_url: str) -> None:
    code, out = rdq("migrate", "--storage", store_url)
    assert code == 0 and out.strip() == "the schema was already up to date: nothing applied"
    monkeypatch.setattr("rdq.cli._migrate.open_storage", lambda url: _Migrating())
    code, out = rdq("migrate", "--storage", "whatever://")
    assert code == 0, out
    assert out.splitlines() == [
        "applied 2 migration(s): 0001_init, 0002_id_conflict",
        "the schema is now up to date",
    ]
