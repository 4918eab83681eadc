"""Regression tests for the server findings of a probe with curl and scripts: forged sessions,
a frozen database, hostile bodies, huge pages, logging of callback URLs, and the rest. Each
goes through HTTP, as the probe did."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest
import pytest_asyncio
import structlog
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.callbacks import CallbackSettings
from rdq.server import HttpCallbackInvoker, TokenSpec, create_app
from rdq.spi import Attempt, Envelope, Outcome, bounds
from rdq_memory import MemoryStorage

from .conftest import (
    ADMIN_TOKEN,
    READ_TOKEN,
    Receiver,
    auth,
    node_settings,
    running_node,
    wait_until,
)

Client = AsyncTestClient[Litestar]
ADMIN = auth(ADMIN_TOKEN)


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


def _login_nonce(html: str) -> str:
    match = re.search(r'name="login_csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


async def _login(client: Client, token: str) -> str:
    form = await client.get("/ui/login")
    response = await client.post(
        "/ui/login",
        data={"token": token, "login_csrf": _login_nonce(form.text)},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    cookie = client.cookies.get("rdq_session")
    assert cookie
    return cookie


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- sessions ----------------------------------------------------------------------------------


DIGEST_ONLY = [
    TokenSpec(
        owner="alice",
        rights=["read", "admin"],
        sha256=hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest(),
    )
]


def _forge(digest: bytes, owner: str = "alice") -> str:
    """A session cookie minted from nothing but the (public) digest, as the probe did."""
    key = hmac.new(b"", b"rdq-ui-session:" + digest, hashlib.sha256).digest()
    body = f"{_b64(owner.encode())}.{int(time.time()) + 3600}.bm9uY2U"
    mac = _b64(hmac.new(key, f"session:{body}".encode(), hashlib.sha256).digest())
    return f"{body}.{mac}"


@pytest.mark.asyncio
async def test_a_session_cannot_be_forged_from_a_token_digest(memory_store: MemoryStorage) -> None:
    settings = node_settings(tokens=DIGEST_ONLY)
    digest = hashlib.sha256(ADMIN_TOKEN.encode()).digest()
    with structlog.testing.capture_logs() as logs:
        async with AsyncTestClient(create_app(settings, storage=memory_store)) as client:
            client.cookies.set("rdq_session", _forge(digest), path="/ui")
            page = await client.get("/ui", follow_redirects=False)
            assert page.status_code == 303 and page.headers["location"] == "/ui/login"
            # The one who holds the token still logs in (a key made at start signs sessions).
            client.cookies.clear()
            await _login(client, ADMIN_TOKEN)
            assert (await client.get("/ui")).status_code == 200
    warnings = [e for e in logs if "session_secret" in e["event"]]
    assert warnings and warnings[0]["owners"] == ["alice"]


@pytest.mark.asyncio
async def test_sessions_hold_across_nodes_that_share_a_session_secret(
    memory_store: MemoryStorage,
) -> None:
    settings = node_settings(tokens=DIGEST_ONLY, session_secret="a-shared-session-secret")
    async with AsyncTestClient(create_app(settings, storage=memory_store)) as one:
        cookie = await _login(one, ADMIN_TOKEN)
    async with AsyncTestClient(create_app(settings, storage=memory_store)) as two:
        two.cookies.set("rdq_session", cookie, path="/ui")
        assert (await two.get("/ui", follow_redirects=False)).status_code == 200
        digest = hashlib.sha256(ADMIN_TOKEN.encode()).digest()
        two.cookies.set("rdq_session", _forge(digest), path="/ui")
        assert (await two.get("/ui", follow_redirects=False)).status_code == 303


@pytest.mark.asyncio
async def test_logout_revokes_the_session(client: Client) -> None:
    cookie = await _login(client, ADMIN_TOKEN)
    home = await client.get("/ui")
    csrf = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert csrf is not None
    out = await client.post("/ui/logout", data={"csrf": csrf.group(1)}, follow_redirects=False)
    assert out.status_code == 303
    client.cookies.set("rdq_session", cookie, path="/ui")  # a copy of the cookie, replayed
    again = await client.get("/ui", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == "/ui/login"


@pytest.mark.asyncio
async def test_login_needs_the_form_of_this_node(client: Client) -> None:
    # A page elsewhere posting a token (login CSRF) has no login cookie to match.
    response = await client.post(
        "/ui/login", data={"token": ADMIN_TOKEN, "login_csrf": "guessed"}, follow_redirects=False
    )
    assert response.status_code == 403
    assert "rdq_session" not in response.headers.get("set-cookie", "")


@pytest.mark.asyncio
async def test_cookies_are_secure_unless_plain_http_on_loopback(
    memory_store: MemoryStorage,
) -> None:
    settings = node_settings(secure_cookies=None)
    app = create_app(settings, storage=memory_store)
    async with AsyncTestClient(app, base_url="http://rdq.example.com") as remote:
        assert "Secure" in (await remote.get("/ui/login")).headers["set-cookie"]
    async with AsyncTestClient(app, base_url="http://127.0.0.1:8080") as local:
        assert "Secure" not in (await local.get("/ui/login")).headers["set-cookie"]


@pytest.mark.asyncio
async def test_flash_shows_only_fixed_sentences(client: Client) -> None:
    await _login(client, ADMIN_TOKEN)
    spoof = await client.get("/ui", params={"flash": "Session expired: log in at evil.example"})
    assert "evil.example" not in spoof.text
    done = await client.get("/ui", params={"done": "purge", "count": "3"})
    assert "3 task(s) purged." in done.text
    odd = await client.get("/ui", params={"done": "<b>x</b>", "count": "3"})
    assert "<b>x</b>" not in odd.text and "&lt;b&gt;" not in odd.text


# --- a frozen storage ------------------------------------------------------------------------


class FrozenStorage(MemoryStorage):
    """Answers nothing once frozen, like a database under SIGSTOP."""

    frozen = False

    async def get(self, task_id: str) -> Envelope:
        if self.frozen:
            await asyncio.Event().wait()
        return await super().get(task_id)


def _gave_up(logs: list[dict[str, Any]]) -> list[str]:
    """Why the node's log says the storage was unavailable, in order."""
    return [str(e["error"]) for e in logs if e["event"] == "storage unavailable"]


@pytest.mark.asyncio
async def test_a_frozen_storage_answers_503_within_the_request_timeout() -> None:
    async with FrozenStorage() as store:
        app = create_app(node_settings(request_timeout=0.5), storage=store)
        async with AsyncTestClient(app) as client:
            assert (await client.get("/readyz")).status_code == 200
            store.frozen = True
            with structlog.testing.capture_logs() as logs:
                for path, headers in (("/readyz", {}), ("/v1/tasks/x", ADMIN)):
                    # The store never answers: without the node's timeout the request would
                    # hang until this bound (which only a broken node reaches).
                    response = await asyncio.wait_for(client.get(path, headers=headers), 60)
                    assert response.status_code == 503, response.text
                    assert _error(response)["code"] == "storage_unavailable"
            # It was the 0.5 s request_timeout that fired (the default is 5 s), once per request.
            assert _gave_up(logs) == ["the storage did not answer get within 0.5s"] * 2
            store.frozen = False
            assert (await client.get("/readyz")).status_code == 200


# --- hostile bodies ----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("depth", [65, 1000, 10_000])
async def test_deeply_nested_json_is_refused_not_a_500(client: Client, depth: int) -> None:
    body = b'{"handler_ref": "h", "payload": ' + b"[" * depth + b"]" * depth + b"}"
    response = await client.post(
        "/v1/tasks", content=body, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert response.status_code in (400, 422), response.text
    error = _error(response)
    assert error["code"] in ("malformed_json", "validation_error")
    assert error["field"] in ("body", "payload")
    fine = {"handler_ref": "h", "payload": [[[1]]]}
    ok = await client.post("/v1/tasks", json=fine, headers=ADMIN)
    assert ok.status_code == 201


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "body",
    [b'{"handler_ref": "h"', b'{"handler_ref": "h\xff"}', b"\xff\xfe{}", b""],
    ids=["truncated", "invalid-utf8-in-string", "invalid-utf8", "empty"],
)
async def test_bodies_that_are_not_json_are_malformed_json(client: Client, body: bytes) -> None:
    response = await client.post(
        "/v1/tasks", content=body, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert _error(response)["code"] == "malformed_json"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_bodies_not_sent_as_json_are_415(client: Client, content_type: str) -> None:
    response = await client.post(
        "/v1/tasks",
        content=b'{"handler_ref": "h"}',
        headers={**ADMIN, "Content-Type": content_type},
    )
    assert response.status_code == 415
    assert _error(response)["code"] == "unsupported_media_type"
    assert (await client.get("/v1/queues/default/stats", headers=ADMIN)).json()["pending"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"max_attempts": -1}, "retry.max_attempts"),
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"backoff": "nope"}, "retry.backoff"),
        ({"timeout": -5}, "retry.timeout"),
        ({"timeout": 0}, "retry.timeout"),
        ({"base": -1}, "retry.base"),
        ({"surprise": 1}, "retry"),
    ],
)
async def test_bad_retry_overrides_are_422_naming_the_field(
    client: Client, retry: dict[str, Any], field: str
) -> None:
    response = await client.post(
        "/v1/tasks", json={"id": "r1", "handler_ref": "h", "retry": retry}, headers=ADMIN
    )
    assert response.status_code == 422, response.text
    assert _error(response)["field"] == field
    assert (await client.get("/v1/tasks/r1", headers=ADMIN)).status_code == 404


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tasks", {"id": "s1", "handler_ref": "h", "delay": "5"}, "delay"),
        ("/v1/tasks", {"id": "s1", "handler_ref": "h", "priority": "3"}, "priority"),
        ("/v1/tasks", {"id": "s1", "handler_ref": "h", "headers": {"a": 1}}, "headers"),
        ("/v1/tasks", {"id": "s1", "handler_ref": "h", "retry": {"timeout": "2"}}, "retry.timeout"),
        (
            "/v1/tasks",
            {"id": "s1", "handler_ref": "h", "retry": {"max_attempts": "5"}},
            "retry.max_attempts",
        ),
        ("/v1/queues/default/dlq/purge", {"ids": ["x"], "dry_run": 0}, "dry_run"),
        ("/v1/queues/default/dlq/redrive", {"ids": ["x"], "dry_run": "false"}, "dry_run"),
        ("/v1/queues/default/dlq/purge", {"ids": ["x"], "reason": 7}, "reason"),
        ("/v1/queues/default/tasks/cancel", {"ids": ["y"], "dry_run": 0}, "dry_run"),
    ],
)
async def test_a_field_of_the_wrong_json_type_is_422_not_converted(
    client: Client, memory_store: MemoryStorage, path: str, body: dict[str, Any], field: str
) -> None:
    await memory_store.enqueue(Envelope(id="x", queue="default", handler_ref="h"))
    await _dead_letter_all(memory_store, "default")
    await memory_store.enqueue(Envelope(id="y", queue="default", handler_ref="h"))
    response = await client.post(path, json=body, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert _error(response) == {
        "code": "validation_error",
        "message": _error(response)["message"],
        "field": field,
    }
    assert (await memory_store.get("x")).status.value == "DEAD"
    assert (await memory_store.get("y")).status.value == "PENDING"
    assert (await client.get("/v1/tasks/s1", headers=ADMIN)).status_code == 404


@pytest.mark.asyncio
async def test_a_retry_override_with_cap_below_base_is_taken_as_base(client: Client) -> None:
    """JSON Schema cannot say "cap >= base", so the API does not refuse what its document
    calls valid: a cap below base is stored as sent, and the engine waits base (as the
    document says)."""
    from rdq.config import QueueConfig
    from rdq.retry import resolve
    from rdq.spi import RetryOverride

    response = await client.post(
        "/v1/tasks", json={"handler_ref": "h", "retry": {"base": 10, "cap": 1}}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    resolved = resolve(QueueConfig(), RetryOverride(base=10, cap=1))
    assert (resolved.backoff.base, resolved.backoff.cap) == (10, 10)


@pytest.mark.asyncio
async def test_a_valid_retry_override_is_stored(client: Client) -> None:
    retry = {"max_attempts": 3, "backoff": "fixed", "base": 2.0, "timeout": 5.0}
    response = await client.post(
        "/v1/tasks", json={"id": "r2", "handler_ref": "h", "retry": retry}, headers=ADMIN
    )
    assert response.status_code == 201
    assert response.json()["retry"] == retry


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "url", ["HTTP://localhost:1/", "Https://localhost:1/", "hTtP://127.0.0.1:1/x"]
)
async def test_the_allow_list_is_checked_whatever_the_scheme_case(client: Client, url: str) -> None:
    response = await client.post("/v1/tasks", json={"handler_ref": url}, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert _error(response)["field"] == "handler_ref"


@pytest.mark.asyncio
async def test_unknown_fields_count_towards_the_payload_limit(client: Client) -> None:
    half = "x" * (bounds.MAX_PAYLOAD_BYTES // 2 + 10)
    response = await client.post(
        "/v1/tasks",
        json={"id": "big", "handler_ref": "h", "payload": half, "smuggled": half},
        headers=ADMIN,
    )
    assert response.status_code == 422, response.text
    assert _error(response)["field"] == "payload"
    fits = await client.post(
        "/v1/tasks",
        json={"id": "fits", "handler_ref": "h", "payload": "x" * 1000, "extra_field": [1, 2]},
        headers=ADMIN,
    )
    assert fits.status_code == 201 and fits.json()["extra_field"] == [1, 2]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "when",
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+14:00"],
)
async def test_filter_times_out_of_range_are_422(client: Client, when: str) -> None:
    for params in ({"dead_lettered_after": when}, {"dead_lettered_before": when}):
        response = await client.get("/v1/queues/default/dlq", params=params, headers=ADMIN)
        assert response.status_code == 422, response.text
        assert _error(response)["field"] == next(iter(params))
    body = {"filter": {"dead_lettered_after": when}, "dry_run": True}
    response = await client.post("/v1/queues/default/dlq/redrive", json=body, headers=ADMIN)
    assert response.status_code == 422
    assert _error(response)["field"] == "filter.dead_lettered_after"


# --- big pages ----------------------------------------------------------------------------------


async def _dead_letter_all(store: MemoryStorage, queue: str) -> None:
    for claim in await store.claim_due(queue, 1000, timedelta(seconds=30)):
        now = datetime.now(UTC)
        attempt = Attempt(
            number=1,
            outcome=Outcome.FAILED,
            error_type="Boom",
            error_message="no",
            traceback="Traceback (most recent call last):\n" + "  frame\n" * 2000,
            started_at=now,
            finished_at=now,
        )
        await store.dead_letter(claim.task.id, claim.token, attempt)


@pytest_asyncio.fixture
async def big_dlq() -> AsyncIterator[MemoryStorage]:
    """30 DEAD tasks of ~200 kB each (payload, an unknown field and a long traceback)."""
    async with MemoryStorage() as store:
        blob = "y" * 90_000
        for i in range(30):
            task = Envelope(
                id=f"big-{i:02d}",
                queue="q",
                handler_ref="h",
                payload=blob,
                extra={"unknown": blob},
            )
            await store.enqueue(task)
        await _dead_letter_all(store, "q")
        yield store


@pytest.mark.asyncio
async def test_a_dlq_page_is_bounded_in_bytes_and_paging_still_sees_everything(
    big_dlq: MemoryStorage,
) -> None:
    budget = 1024 * 1024
    app = create_app(node_settings(max_page_bytes=budget), storage=big_dlq)
    seen: list[str] = []
    async with AsyncTestClient(app) as client:
        cursor = None
        for _ in range(100):
            params: dict[str, Any] = {"limit": 1000, "include_attempts": "true"}
            if cursor:
                params["cursor"] = cursor
            response = await client.get("/v1/queues/q/dlq", params=params, headers=ADMIN)
            assert response.status_code == 200
            assert len(response.content) <= budget + 64 * 1024
            body = response.json()
            assert body["tasks"], "a page is never empty while tasks remain"
            seen.extend(t["id"] for t in body["tasks"])
            cursor = body["next_cursor"]
            if cursor is None:
                break
    assert seen == [f"big-{i:02d}" for i in range(30)]


@pytest.mark.asyncio
async def test_one_task_larger_than_the_budget_is_a_page_of_its_own(
    big_dlq: MemoryStorage,
) -> None:
    app = create_app(node_settings(max_page_bytes=64 * 1024), storage=big_dlq)
    async with AsyncTestClient(app) as client:
        response = await client.get("/v1/queues/q/dlq", params={"limit": 10}, headers=ADMIN)
        body = response.json()
        assert [t["id"] for t in body["tasks"]] == ["big-00"]
        assert body["next_cursor"] is not None


# --- logs and start-up -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_unsigned_callbacks_are_warned_about_at_start(memory_store: MemoryStorage) -> None:
    settings = node_settings(
        work=True, callbacks=CallbackSettings(allow_hosts=["hooks.example.com"])
    )
    with structlog.testing.capture_logs() as logs:
        async with AsyncTestClient(create_app(settings, storage=memory_store)):
            pass
    assert any("unsigned" in e["event"] for e in logs if e["log_level"] == "warning")
    signed = msgspec.structs.replace(
        settings,
        callbacks=CallbackSettings(allow_hosts=["hooks.example.com"], secrets=["s" * 20]),
    )
    with structlog.testing.capture_logs() as logs:
        async with AsyncTestClient(create_app(signed, storage=memory_store)):
            pass
    assert not any("unsigned" in e["event"] for e in logs)


@pytest.mark.asyncio
async def test_callback_urls_reach_the_log_without_their_query(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    settings = CallbackSettings(allow_hosts=["127.0.0.1"], allow_networks=["127.0.0.1/32"])
    invoker = HttpCallbackInvoker(settings)
    task = Envelope(id="t", queue="q", handler_ref=receiver.url("/hook?token=hush-hush-0123"))
    try:
        with caplog.at_level(logging.INFO, logger="httpx"):
            await invoker.deliver(task)
    finally:
        await invoker.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines, "httpx logged no request line"
    assert all("hush-hush" not in line and "/hook?…" in line for line in lines), lines


@pytest.mark.asyncio
async def test_security_headers_on_api_and_ui(client: Client) -> None:
    for path in ("/healthz", "/v1/queues", "/ui/login", "/schema/openapi.json"):
        response = await client.get(path, headers=ADMIN)
        assert response.headers["x-content-type-options"] == "nosniff", path


@pytest.mark.asyncio
async def test_error_answers_carry_nosniff_too(client: Client) -> None:
    json_body = {**ADMIN, "Content-Type": "application/json"}
    answers = {
        "no token (401)": await client.get("/v1/queues"),
        "no such route (404)": await client.get("/v1/nothing", headers=ADMIN),
        "no such task (404)": await client.get("/v1/tasks/nope", headers=ADMIN),
        "wrong method (405)": await client.delete("/v1/tasks/nope", headers=ADMIN),
        "not JSON (415)": await client.post("/v1/tasks", content=b"{}", headers=ADMIN),
        "truncated (400)": await client.post("/v1/tasks", content=b"{", headers=json_body),
        "invalid (422)": await client.post("/v1/tasks", content=b"{}", headers=json_body),
        "too large (413)": await client.post(
            "/v1/tasks", content=b'"' + b"x" * (3 << 20) + b'"', headers=json_body
        ),
        "no such asset (404)": await client.get("/ui/static/nothing.js"),
    }
    for what, response in answers.items():
        assert response.status_code >= 400, what
        assert response.headers.get("x-content-type-options") == "nosniff", what


@pytest.mark.asyncio
async def test_schema_paths_answer_json_and_swagger_is_off_by_default(
    client: Client, memory_store: MemoryStorage
) -> None:
    for path in ("/schema/nope", "/schema/swagger"):
        response = await client.get(path)
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("application/json")
        assert _error(response)["code"] == "not_found"
    assert (await client.get("/schema/openapi.json")).status_code == 200
    app = create_app(node_settings(openapi_ui=True), storage=memory_store)
    async with AsyncTestClient(app) as with_ui:
        assert (await with_ui.get("/schema/swagger")).status_code == 200


@pytest.mark.asyncio
async def test_the_openapi_document_says_what_the_api_does(client: Client) -> None:
    document = (await client.get("/schema/openapi.json")).json()
    schemas = document["components"]["schemas"]
    delay = schemas["SubmitRequest"]["properties"]["delay"]["oneOf"][0]
    assert delay["minimum"] == 0
    for name in ("/healthz", "/readyz"):
        assert document["paths"][name]["get"]["security"] == []  # open: no token at all
        assert "401" not in document["paths"][name]["get"]["responses"]
        assert (await client.get(name)).status_code == 200  # open, as declared
    rule = schemas["ActionRequest"]["oneOf"]
    assert [branch["required"] for branch in rule] == [["ids"], ["filter"]]
    both = {"ids": ["a"], "filter": {}}
    response = await client.post("/v1/queues/default/dlq/redrive", json=both, headers=ADMIN)
    assert response.status_code == 422
    neither: dict[str, Any] = {}
    response = await client.post("/v1/queues/default/dlq/redrive", json=neither, headers=ADMIN)
    assert response.status_code == 422


@pytest.mark.asyncio
async def test_the_openapi_document_declares_every_bound_the_api_enforces(client: Client) -> None:
    document = (await client.get("/schema/openapi.json")).json()
    schemas = document["components"]["schemas"]

    async def refused(path: str, body: Any) -> bool:
        response = await client.post(path, json=body, headers=ADMIN)
        return response.status_code == 422

    timeout = schemas["RetryRequest"]["properties"]["timeout"]["oneOf"][0]
    assert timeout["exclusiveMinimum"] == 0
    assert await refused("/v1/tasks", {"handler_ref": "h", "retry": {"timeout": 0}})
    headers = schemas["SubmitRequest"]["properties"]["headers"]
    assert headers["propertyNames"] == {"type": "string", "minLength": 1, "maxLength": 128}
    assert headers["additionalProperties"]["maxLength"] == bounds.MAX_HEADER_VALUE_LENGTH
    assert headers["maxProperties"] == bounds.MAX_HEADERS
    assert await refused("/v1/tasks", {"handler_ref": "h", "headers": {"": "x"}})
    for name in ("ActionRequest", "CancelRequest"):
        ids = schemas[name]["properties"]["ids"]["oneOf"][0]
        assert ids["items"]["minLength"] == 1 and ids["items"]["pattern"]
        assert ids["maxItems"] == bounds.MAX_SELECTOR_IDS
    assert await refused("/v1/queues/default/dlq/purge", {"ids": [""]})
    assert await refused("/v1/queues/default/tasks/cancel", {"ids": ["a b"]})
    for name in ("RetryRequest", "FilterRequest", "TaskFilterRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    for name in ("ActionRequest", "CancelRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    assert await refused("/v1/queues/default/dlq/purge", {"ids": ["a"], "surprise": 1})
    assert await refused("/v1/tasks", {"handler_ref": "h", "retry": {"surprise": 1}})
    # protected on this node (open_metrics = false): the document says a token is needed
    assert document["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]
    assert (await client.get("/metrics")).status_code == 401


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/queues/default/dlq", "dead_lettered_after"),
        ("/v1/queues/default/dlq", "dead_lettered_before"),
        ("/v1/queues/default/tasks", "after"),
        ("/v1/audit", "before"),
    ],
)
@pytest.mark.parametrize("value", ["1700000000", "0.5"])
async def test_a_query_time_is_rfc_3339_text_not_seconds(
    client: Client, path: str, name: str, value: str
) -> None:
    response = await client.get(path, params={name: value}, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert _error(response)["field"] == name
    good = await client.get(path, params={name: "2026-03-01T10:00:00+02:00"}, headers=ADMIN)
    assert good.status_code == 200, good.text


@pytest.mark.asyncio
async def test_a_read_token_cannot_make_the_node_remember_queue_names(
    memory_store: MemoryStorage,
) -> None:
    app = create_app(node_settings(), storage=memory_store)
    async with AsyncTestClient(app) as client:
        for i in range(50):
            await client.get(f"/v1/queues/junk-{i}/stats", headers=auth(READ_TOKEN))
            await client.get(f"/v1/queues/junk-{i}/dlq", headers=auth(READ_TOKEN))
        listed = (await client.get("/v1/queues", headers=auth(READ_TOKEN))).json()
        assert [q["queue"] for q in listed["queues"]] == ["default"]


# --- a really frozen PostgreSQL -------------------------------------------------------------


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


@pytest.fixture
def cluster() -> Iterator[Any]:
    postgres = pytest.importorskip("rdq_compliance.servers.postgres")
    bindir = postgres.find_bindir()
    if bindir is None:
        pytest.skip("no local PostgreSQL binaries for a private cluster")
    with postgres.LocalCluster(bindir) as local:
        yield local


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_postgres_frozen_by_sigstop_gives_503_in_seconds_and_recovers(
    cluster: Any,
) -> None:
    from rdq import open_storage

    async with open_storage(cluster.url) as store:
        await store.migrate()
        app = create_app(node_settings(request_timeout=2.0), storage=store)
        async with running_node(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/readyz")).status_code == 200
            postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
            frozen = _process_tree(postmaster)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                with structlog.testing.capture_logs() as logs:
                    for path, headers in (("/readyz", {}), ("/v1/tasks/x", ADMIN)):
                        # The client's 30 s bound only matters if nothing on the node fires.
                        response = await client.get(path, headers=headers)
                        assert response.status_code == 503, response.text
                        assert _error(response)["code"] == "storage_unavailable"
            finally:
                for pid in frozen:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            # The node's 2 s request_timeout gave up, not the store's own 10 s timeout.
            assert _gave_up(logs) == ["the storage did not answer get within 2s"] * 2

            async def ready() -> bool:  # the pool replaces the connections it gave up on
                return (await client.get("/readyz")).status_code == 200

            await wait_until(ready, what="the node to be ready again")
            assert (await client.get("/v1/tasks/x", headers=ADMIN)).status_code == 404


@pytest.mark.asyncio
async def test_filter_times_out_of_range_are_422_on_postgres(postgres_url: str) -> None:
    from rdq import open_storage

    async with open_storage(postgres_url) as store:
        await store.migrate()
        app = create_app(node_settings(queues=["q"]), storage=store)
        async with running_node(app) as url, httpx.AsyncClient(base_url=url) as client:
            for when in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
                params = {"dead_lettered_after": when}
                response = await client.get("/v1/queues/q/dlq", params=params, headers=ADMIN)
                assert response.status_code == 422, response.text
                assert _error(response)["field"] == "dead_lettered_after"
            edge = {"dead_lettered_after": "0001-01-01T00:00:00Z"}
            response = await client.get("/v1/queues/q/dlq", params=edge, headers=ADMIN)
            assert response.status_code == 200, response.text
