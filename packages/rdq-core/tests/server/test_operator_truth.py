"""The operator is never misled (issue 51), each bullet replayed through the CLI and the API:
a read never creates a store; a typo'd queue, handler or dependency is refused with the
closest known name (``--force`` / ``"force": true`` for a name meant for the future); named
ids are sorted (not found, in another queue, wrong status) and nothing matched is exit 3, done
in part exit 4, never "(dry run)"; the terminal says what holds a queue and a task and what
happens next; config keys, metrics and the audit trail tell the truth."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from litestar.testing import AsyncTestClient

from rdq import App, flow
from rdq.cli import main
from rdq.config import Breaker
from rdq.errors import ConfigError
from rdq.flow import BreakerState, Outage, State, trail_reason
from rdq.server import create_app, load_settings
from rdq.spi import Attempt, Control, Envelope, Outcome, Storage, WorkerInfo
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, node_settings

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _scene(store: Storage) -> None:
    """Dead charges (two error types), a waiting refund with DEFERRED attempts, emails of
    another queue, a tripped breaker, a paused queue, a live worker and a silent one holding
    tasks with lapsed leases."""
    for n in range(6):
        await store.enqueue(Envelope(id=f"c{n}", queue="payments", handler_ref="charge_card"))
    for claim in await store.claim_due("payments", 10, timedelta(seconds=30)):
        error = "GatewayDown" if claim.task.id < "c4" else "rdq.Permanent"
        now = datetime.now(UTC)
        attempt = Attempt(number=1, outcome=Outcome.FAILED, error_type=error, finished_at=now)
        await store.dead_letter(claim.task.id, claim.token, attempt)
    await store.enqueue(Envelope(id="r0", queue="payments", handler_ref="refund"))
    for number in (1, 2):
        (claim,) = await store.claim_due("payments", 1, timedelta(seconds=30))
        outcome = Outcome.DEFERRED if number == 1 else Outcome.FAILED
        now = datetime.now(UTC)
        attempt = Attempt(number=number, outcome=outcome, error_type="X", finished_at=now)
        due = now if number == 1 else now + timedelta(hours=1)
        await store.reschedule(claim.task.id, claim.token, attempt, due)
    for n in range(2):
        await store.enqueue(
            Envelope(id=f"e{n}", queue="emails", handler_ref="send", keys=["dep:smtp"])
        )
    await store.enqueue(Envelope(id="x0", queue="exports", handler_ref="export"))
    await store.claim_due("exports", 1, timedelta(seconds=0.05))
    now = await store.now()
    tripped = flow.trip(
        Control(queue="emails", key="dep:smtp"),
        now - timedelta(minutes=5),
        Breaker(cooldown=3600),
        started=now - timedelta(minutes=5),
        error_types=["SmtpDown"],
        error_type="SmtpDown",
        error_message="down",
        sample_task="e0",
    )
    await store.put_control(tripped, expected_version=0)
    await store.put_control(
        Control(queue="payments", key="handler:refund", paused=True, state={"pause": {}}),
        expected_version=0,
    )
    await store.heartbeat_worker(
        WorkerInfo(
            id="w-live",
            queues=["payments", "emails"],
            concurrency=4,
            heartbeat=3600,
            extra={
                "handlers": ["charge_card", "refund", "send"],
                "dependencies": ["smtp"],
                "max_attempts": {"payments": 5},
            },
        )
    )


@pytest.fixture
def store_url() -> str:
    name = f"truth-{uuid.uuid4().hex}"

    async def fill() -> None:
        async with MemoryStorage(name=name) as store:
            await _scene(store)

    asyncio.run(fill())
    return f"memory://{name}"


def rdq(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


# --- 1. reads never create a store ------------------------------------------------------------


def test_a_read_never_creates_a_store_and_names_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RDQ_STORAGE", raising=False)
    monkeypatch.delenv("RDQ_STORAGE_URL", raising=False)
    for args in (
        ("stats", "--storage", "sqlite:///rdg.db"),
        ("dlq", "list", "payments", "--storage", "sqlite:///rdg.db"),
        ("dlq", "groups", "--storage", "sqlite:///rdg.db"),
        ("tasks", "show", "x", "--storage", "sqlite:///rdg.db"),
        ("audit", "--storage", "sqlite:///rdg.db"),
        ("breakers", "--storage", "sqlite:///rdg.db"),
        ("workers", "--storage", "sqlite:///rdg.db"),
        ("queue", "status", "--storage", "sqlite:///rdg.db"),
        ("stats",),
    ):
        code, out = rdq(*args)
        assert code == 1, (args, out)
        assert "no store at " in out and "rdq migrate" in out, (args, out)
        assert str(tmp_path) in out, "the path it used is named"
    assert list(tmp_path.iterdir()) == [], "nothing was created"
    code, out = rdq("migrate", "--storage", "sqlite:///rdg.db")
    assert code == 0 and (tmp_path / "rdg.db").exists(), "a writer still creates it"
    code, out = rdq("stats", "--storage", "sqlite:///rdg.db")
    assert code == 0 and "no queue holds a task yet" in out


# --- 2. names are checked ---------------------------------------------------------------------


def test_a_typo_is_refused_with_the_closest_name(store_url: str) -> None:
    where = ("--storage", store_url)
    for args, said in (
        (("queue", "pause", "paymnets", "--reason", "x"), "unknown queue 'paymnets'"),
        (("queue", "pause", "payments", "--handler", "refnud"), "unknown handler 'refnud'"),
        (("queue", "pause", "emails", "--dependency", "smpt"), "unknown dependency 'smpt'"),
        (("breaker", "open", "handler:chrage_card", "--queue", "payments", "--yes"), "chrage"),
        (("dlq", "redrive", "paymnets", "--all", "--yes"), "unknown queue 'paymnets'"),
        (("dlq", "purge", "paymnets", "--all", "--yes"), "unknown queue"),
        (("tasks", "cancel", "paymnets", "c1", "--yes"), "unknown queue"),
        (("tasks", "retry-now", "paymnets", "--all", "--yes"), "unknown queue"),
    ):
        code, out = rdq(*args, *where)
        assert code == 1 and said in out and "did you mean" in out, (args, out)
        assert "--force" in out
    code, out = rdq("queue", "pause", "reports", "--reason", "soon", "--force", *where)
    assert code == 0 and "paused the whole queue reports" in out, out
    code, out = rdq("queue", "status", "reports", *where, "--json")
    assert json.loads(out)["queues"][0]["flags"] == ["paused"]
    code, out = rdq("stats", *where, "--json")
    assert "reports" in {q["queue"] for q in json.loads(out)["queues"]}, "shown, though empty"
    code, out = rdq("queue", "resume", "reports", "--reason", "not yet", *where)
    assert code == 0
    code, out = rdq("queue", "pause", "reports", *where)
    assert code == 1 and "unknown queue 'reports'" in out, "the resume left no phantom record"


READS = (
    ("stats", "paymnets"),
    ("queue", "status", "paymnets"),
    ("dlq", "list", "paymnets"),
    ("dlq", "groups", "paymnets"),
    ("dlq", "redrives", "paymnets"),
    ("tasks", "list", "paymnets"),
    ("breakers", "paymnets"),
    ("limits", "paymnets"),
)


def test_a_read_of_a_typo_is_refused_not_answered_empty(store_url: str, tmp_path: Path) -> None:
    """An empty listing of a queue nobody serves says "nothing is wrong": every read that
    names a queue refuses a typo with the closest name, and an export writes no file."""
    where = ("--storage", store_url)
    for args in READS:
        code, out = rdq(*args, *where)
        assert code == 1 and "unknown queue 'paymnets'" in out, (args, out)
        assert "did you mean 'payments'?" in out and "nothing was read" in out, (args, out)
        assert "--force" not in out, "a read has nothing to force"
    exported = tmp_path / "dead.jsonl"
    code, out = rdq("dlq", "export", "paymnets", "--to", str(exported), *where)
    assert code == 1 and "did you mean 'payments'?" in out, out
    assert not exported.exists(), "no empty file left behind"
    code, out = rdq("dlq", "list", "exports", *where)
    assert code == 0 and "DLQ of exports" in out, "a known queue with an empty DLQ lists it"
    code, out = rdq("dlq", "list", "payments", *where, "--json")
    assert code == 0 and len(json.loads(out)["tasks"]) == 6


@pytest.mark.asyncio
async def test_the_api_refuses_a_read_of_a_typo() -> None:
    store, engine_app = await _api_scene()
    node = create_app(node_settings(), storage=store, engine_app=engine_app)
    async with AsyncTestClient(app=node) as client:
        for path in (
            "/v1/queues/paymnets/stats",
            "/v1/queues/paymnets/dlq",
            "/v1/queues/paymnets/dlq/groups",
            "/v1/queues/paymnets/dlq/export",
            "/v1/queues/paymnets/tasks?status=PENDING",
            "/v1/queues/paymnets/controls",
            "/v1/queues/paymnets/limits",
            "/v1/queues/paymnets/redrives",
            "/v1/breakers?queue=paymnets",
            "/v1/pauses?queue=paymnets",
        ):
            got = await client.get(path, headers=ADMIN)
            assert got.status_code == 404, (path, got.text)
            error = got.json()["error"]
            assert error["code"] == "unknown_name" and error["field"] == "queue", path
            assert "did you mean 'payments'?" in error["message"], path
            assert "force" not in error["message"], path
        known = await client.get("/v1/queues/exports/dlq", headers=ADMIN)
        assert known.status_code == 200 and known.json()["tasks"] == []


def test_named_ids_are_sorted_and_nothing_matched_is_never_a_dry_run(store_url: str) -> None:
    where = ("--storage", store_url)
    code, out = rdq("dlq", "redrive", "payments", "nope", "e0", "r0", "--yes", *where)
    assert code == 3 and "0 tasks match; nothing done" in out and "dry run" not in out
    assert "nope: not found" in out and "e0: in queue emails" in out
    assert "r0: not DEAD (PENDING)" in out
    code, out = rdq("dlq", "redrive", "payments", "c0", "nope", "--yes", *where)
    assert code == 4 and "1 task(s) of queue payments redriven" in out and "nope" in out
    code, out = rdq("dlq", "redrive", "payments", "--error-type", "rdq.Permanet", "--yes", *where)
    assert code == 3 and "did you mean 'rdq.Permanent'? 2 task(s)" in out, out
    code, out = rdq("dlq", "purge", "payments", "--error-type", "Nope", "--dry-run", *where)
    assert code == 3 and "0 tasks match" in out and "the DLQ holds: GatewayDown (3)" in out
    code, out = rdq("dlq", "redrive", "payments", "--all", "--dry-run", *where, "--json")
    assert code == 0 and json.loads(out)["count"] == 5 and json.loads(out)["done"] is False


# --- 4. the terminal answers the incident's questions -----------------------------------------


def test_the_terminal_shows_pauses_breakers_held_tasks_and_charged_attempts(
    store_url: str,
) -> None:
    where = ("--storage", store_url)
    code, out = rdq("stats", *where, "--json")
    flags = {q["queue"]: q["flags"] for q in json.loads(out)["queues"]}
    assert flags["emails"] == ["breaker open: dep:smtp"]
    assert flags["payments"] == ["paused: handler:refund", "held 1"]
    assert flags["exports"] == ["no live worker"]
    code, out = rdq("queue", "status", "emails", *where)
    assert "breaker dep:smtp: open, down since 5m ago (outage 5m)" in out, out
    assert "served by 1 live worker(s): w-live" in out
    code, out = rdq("tasks", "show", "r0", *where)
    assert "held: handler:refund is paused" in out
    assert "attempts: 2 since the last redrive, 1 charged" in out
    assert "4 of max_attempts 5 left" in out
    code, out = rdq("tasks", "list", "payments", *where, "--json")
    (outlook,) = json.loads(out)["outlook"]
    assert outlook["attempts"] == {
        "recorded": 2,
        "charged": 1,
        "uncharged": 1,
        "max": 5,
        "left": 4,
    }
    code, out = rdq("dlq", "groups", *where, "--json")
    assert code == 0
    groups = json.loads(out)["groups"]
    assert {(g["queue"], g["error_type"], g["count"]) for g in groups} == {
        ("payments", "GatewayDown", 4),
        ("payments", "rdq.Permanent", 2),
    }


@pytest.mark.asyncio
async def test_a_silent_worker_s_held_tasks_fall_as_they_are_reclaimed() -> None:
    from rdq.admin import TaskAdmin

    async with MemoryStorage() as store:
        for n in range(3):
            await store.enqueue(Envelope(id=f"t{n}", queue="q", handler_ref="h"))
        await store.heartbeat_worker(
            WorkerInfo(id="dead", queues=["q"], concurrency=5, held=3, heartbeat=0.01)
        )
        claims = await store.claim_due("q", 3, timedelta(seconds=0.2), worker_id="dead")
        assert len(claims) == 3
        await asyncio.sleep(0.3)
        admin = TaskAdmin(store)
        _, (dead,) = await admin.workers()
        assert (dead.status, dead.held, dead.lapsed) == ("silent", 3, 3)
        (seen,) = await admin.outlook([await store.get("t0")])
        assert seen.holder is not None and seen.holder.lease_in is not None
        assert seen.holder.lease_in < 0 and "lapsed" in seen.next
        await store.claim_due("q", 2, timedelta(seconds=30), worker_id="alive")
        _, (dead,) = await admin.workers()
        assert dead.held == 1, "two were reclaimed by another worker"


# --- 2 and 6, through the API -----------------------------------------------------------------


async def _api_scene() -> tuple[MemoryStorage, App]:
    store = MemoryStorage()
    await store.connect()
    await _scene(store)
    app = App()
    app.queue("payments")

    @app.handler("charge_card", queue="payments")
    async def charge(payload: Any) -> None: ...

    return store, app


@pytest.mark.asyncio
async def test_the_api_refuses_typos_names_skipped_ids_and_hints() -> None:
    store, engine_app = await _api_scene()
    node = create_app(node_settings(), storage=store, engine_app=engine_app)
    async with AsyncTestClient(app=node) as client:
        typo = await client.post("/v1/queues/paymnets/pause", json={}, headers=ADMIN)
        assert typo.status_code == 404 and typo.json()["error"]["code"] == "unknown_name"
        assert "did you mean 'payments'?" in typo.json()["error"]["message"]
        forced = await client.post(
            "/v1/queues/reports/pause", json={"force": True, "reason": "soon"}, headers=ADMIN
        )
        assert forced.status_code == 200 and forced.json()["paused"] is True
        ids = await client.post(
            "/v1/queues/payments/dlq/redrive", json={"ids": ["c0", "nope", "e0"]}, headers=ADMIN
        )
        assert ids.json()["count"] == 1
        assert ids.json()["skipped"] == [
            {"id": "nope", "reason": "not_found"},
            {"id": "e0", "reason": "other_queue", "queue": "emails"},
        ]
        typo_filter = await client.post(
            "/v1/queues/payments/dlq/purge",
            json={"filter": {"error_type": "rdq.Permanet"}, "dry_run": True},
            headers=ADMIN,
        )
        assert typo_filter.json()["count"] == 0
        assert "did you mean 'rdq.Permanent'?" in typo_filter.json()["hint"]
        crad = await client.post(
            "/v1/tasks", json={"handler_ref": "charge_crad", "queue": "payments"}, headers=ADMIN
        )
        assert crad.status_code == 422 and crad.json()["error"]["field"] == "handler_ref"
        assert "did you mean 'charge_card'?" in crad.json()["error"]["message"]
        queue = await client.post(
            "/v1/tasks", json={"handler_ref": "charge_card", "queue": "paymnets"}, headers=ADMIN
        )
        assert queue.status_code == 422 and "did you mean 'payments'?" in queue.text
        routed = await client.post("/v1/tasks", json={"handler_ref": "charge_card"}, headers=ADMIN)
        assert routed.status_code == 201 and routed.json()["queue"] == "payments"
        assert "force" not in routed.json(), "force is read, never stored"
        other = await client.post(
            "/v1/tasks",
            json={"handler_ref": "billing.run", "queue": "billing", "force": True},
            headers=ADMIN,
        )
        assert other.status_code == 201
        wrong = await client.delete("/v1/queues", headers=ADMIN)
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, OPTIONS"
        outlook = await client.get("/v1/tasks/r0/outlook", headers=ADMIN)
        assert outlook.json()["holds"][0]["key"] == "handler:refund"
        pauses = await client.get("/v1/pauses", headers=ADMIN)
        assert {(p["queue"], p["key"]) for p in pauses.json()["pauses"]} == {
            ("payments", "handler:refund"),
            ("reports", "*"),
        }
    await store.aclose()


# --- 5. config, metrics, the audit trail ------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "key", "close"),
    [
        ("[server]\nprot = 8080\n", "server.prot", "port"),
        ("[server.callbacks]\nallow_host = ['x']\n", "server.callbacks.allow_host", "allow_hosts"),
        (
            "[[server.tokens]]\nowner = 'a'\nright = ['read']\ntoken = '0123456789abcdefgh'\n",
            "server.tokens[0].right",
            "rights",
        ),
        ("[sever]\nport = 1\n", "sever", "server"),
        ("[queues.a]\nmax_atempts = 3\n", "queues.a.max_atempts", "max_attempts"),
    ],
)
def test_an_unknown_config_key_is_refused_naming_it(
    tmp_path: Path, toml: str, key: str, close: str
) -> None:
    path = tmp_path / "rdq.toml"
    path.write_text(toml)

    def load() -> None:
        _, engine = load_settings(path, env={})
        App().configure(engine)

    with pytest.raises(ConfigError) as raised:
        load()
    assert raised.value.key == key and f"did you mean '{close}'?" in raised.value.message


@pytest.mark.asyncio
async def test_an_api_only_node_serves_the_queue_gauges_from_the_store() -> None:
    store, _ = await _api_scene()
    node = create_app(node_settings(open_metrics=True), storage=store)
    async with AsyncTestClient(app=node) as client:
        text = (await client.get("/metrics")).text
    lines = set(text.splitlines())
    assert 'rdq_dlq_depth{queue="payments"} 6.0' in lines
    assert 'rdq_pending{queue="payments"} 1.0' in lines
    assert 'rdq_breaker_state{key="dep:smtp",queue="emails"} 2.0' in lines
    assert 'rdq_paused{key="handler:refund",queue="payments"} 1.0' in lines
    assert any(line.startswith('rdq_held{by="pause",key="handler:refund"') for line in lines)
    await store.aclose()


def test_the_trail_keeps_an_outage_s_start_and_end_not_every_probe() -> None:
    start = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    closed = BreakerState()
    opened = BreakerState(state=State.OPEN, trips=1, outages=[Outage(start=start)])
    probing = BreakerState(state=State.HALF_OPEN, trips=1, outages=[Outage(start=start)])
    reopened = BreakerState(state=State.OPEN, trips=58, outages=[Outage(start=start)])
    ended = BreakerState(outages=[Outage(start=start, end=start + timedelta(hours=1, minutes=2))])
    assert trail_reason("breaker.open", closed, opened, "tripped") == "tripped"
    assert trail_reason("breaker.probe", opened, probing, "cool-down over") is None
    assert trail_reason("breaker.open", probing, reopened, "a probe failed") is None
    said = trail_reason("breaker.close", reopened, ended, "a probe succeeded")
    assert said == "a probe succeeded; the outage lasted 62m; 57 probe round(s) failed before"


def test_the_exit_codes_are_documented() -> None:
    from rdq.cli import _common

    table = _common.__doc__ or ""
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "130"):
        assert f"\n{code}" in table, code
    text = (Path(__file__).parents[4] / "docs" / "operations.md").read_text()
    assert "| 3 |" in text and "| 4 |" in text and "| 130 |" in text
