"""Roles: every route of the node tried with every role; what each role sees of a payload;
the console offering actions only to roles that may take them; the audit naming the role."""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from rdq.audit import MemoryAuditSink
from rdq.keys import Keyring, seal
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq.server._settings import PERMISSIONS
from rdq.spi import Attempt, Envelope, Outcome
from rdq_memory import MemoryStorage

Client = AsyncTestClient[Litestar]
CARD = "4111 1111 1111 1111"
KEYS = Keyring({"v1": secrets.token_bytes(32)}, "v1")

TOKENS = {
    "viewer": TokenSpec(owner="vera", role="viewer", token="viewer-token-0123456789"),
    "viewer+payloads": TokenSpec(
        owner="paula", role="viewer", payloads=True, token="paula-token-0123456789"
    ),
    "operator": TokenSpec(owner="otto", role="operator", token="operator-token-012345678"),
    "admin": TokenSpec(owner="ada", role="admin", submit=True, token="admin-token-0123456789"),
    "submitter": TokenSpec(owner="sam", submit=True, token="submit-token-0123456789"),
    "legacy read": TokenSpec(owner="rita", rights=["read"], token="legacy-read-0123456789"),
    "legacy admin": TokenSpec(
        owner="alice", rights=["read", "submit", "admin"], token="legacy-admin-0123456789"
    ),
}
MAY: dict[str, frozenset[str]] = {
    "viewer": PERMISSIONS["viewer"],
    "viewer+payloads": PERMISSIONS["viewer"] | {"payloads"},
    "operator": PERMISSIONS["operator"] | {"payloads"},
    "admin": PERMISSIONS["admin"] | {"payloads", "submit"},
    "submitter": frozenset({"submit"}),
    "legacy read": PERMISSIONS["viewer"] | {"payloads"},
    "legacy admin": PERMISSIONS["admin"] | {"payloads", "submit"},
}
"""What each token may do: the documented mapping of roles and of the rights before roles."""


def _auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role].token}"}


@pytest_asyncio.fixture
async def store() -> AsyncIterator[MemoryStorage]:
    async with MemoryStorage() as memory:
        yield memory


@pytest_asyncio.fixture
async def node(store: MemoryStorage) -> AsyncIterator[tuple[Client, MemoryAuditSink]]:
    sink = MemoryAuditSink()
    settings = msgspec.convert(
        {
            "tokens": list(TOKENS.values()),
            "queues": ["default"],
            "work": False,
            "secure_cookies": False,
            "openapi_ui": True,
        },
        ServerSettings,
        from_attributes=True,
    )
    app = create_app(settings, storage=store, audit_sinks=[sink], keys=KEYS)
    async with AsyncTestClient(app=app) as client:
        yield client, sink


async def _dead(store: MemoryStorage, task_id: str, payload: Any, keys: Keyring | None) -> None:
    task = Envelope(id=task_id, queue="default", handler_ref="pay", payload=payload)
    await store.enqueue(seal(task, keys) if keys else task)
    [claimed] = await store.claim_due("default", 1, timedelta(seconds=30))
    await store.dead_letter(
        task_id,
        claimed.token,
        Attempt(number=1, outcome=Outcome.PERMANENT, error_type="CardDeclined"),
    )


def _routes(app: Litestar) -> list[tuple[str, str, str | None]]:
    """Every (method, path, right) of the API: the right each handler names."""
    found = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            right = handler.opt.get("right")
            if right is None:  # the console, the static files, the schema
                continue
            for method in handler.http_methods:
                found.append((method, route.path, right))
    return sorted(set(found))


def _concrete(path: str) -> str:
    return re.sub(r"\{(\w+):\w+\}", lambda m: {"queue": "default"}.get(m.group(1), "t1"), path)


def test_every_right_a_route_names_is_one_a_role_grants() -> None:
    app = create_app(
        msgspec.convert({"tokens": [TOKENS["admin"]], "work": False}, ServerSettings),
        storage=MemoryStorage(),
        keys=None,
    )
    rights = {right for _, _, right in _routes(app)}
    assert rights <= {"read", "operate", "admin", "submit", "any", "health", "metrics"}
    assert {"read", "operate", "admin", "submit"} <= rights
    mutating = [(m, p, r) for m, p, r in _routes(app) if m not in ("GET", "HEAD", "OPTIONS")]
    assert mutating and all(r in ("operate", "submit") for _, _, r in mutating), mutating


@pytest.mark.asyncio
@pytest.mark.parametrize("role", list(TOKENS))
async def test_every_route_with_every_role(
    role: str, node: tuple[Client, MemoryAuditSink], store: MemoryStorage
) -> None:
    """Each API route answers each role as its right says: 403 naming the role when the role
    lacks it (nothing changed), anything but 401/403 when it has it. A viewer reaches no
    mutating endpoint."""
    client, _ = node
    await _dead(store, "t1", {"card": CARD}, KEYS)
    routes = _routes(client.app)
    assert len(routes) >= 30
    tried = 0
    for method, path, right in routes:
        url = _concrete(path)
        body = {} if method in ("POST", "PUT", "PATCH", "DELETE") else None
        if method == "POST" and right == "operate":
            body = {"ids": ["t1"], "reason": "walk", "dry_run": True}
        response = await client.request(method, url, headers=_auth(role), json=body)
        allowed = right in ("health", "any") or right in MAY[role]
        if right == "metrics":
            allowed = "read" in MAY[role]
        if allowed:
            assert response.status_code not in (401, 403), (role, method, url, response.text)
        else:
            assert response.status_code == 403, (role, method, url, response.status_code)
            assert TOKENS[role].owner in response.json()["error"]["message"]
        tried += 1
    assert tried == len(routes)
    stored = await store.get("t1")
    assert stored.status.value == "DEAD"  # dry runs only: nothing a refused call changed


@pytest.mark.asyncio
async def test_a_viewer_reaches_no_mutating_endpoint(
    node: tuple[Client, MemoryAuditSink], store: MemoryStorage
) -> None:
    client, sink = node
    await _dead(store, "t1", {"card": CARD}, KEYS)
    for method, path, _ in _routes(client.app):
        if method in ("GET", "HEAD", "OPTIONS"):
            continue
        body = {"ids": ["t1"], "reason": "try", "handler_ref": "x", "key": "*"}
        response = await client.request(method, _concrete(path), headers=_auth("viewer"), json=body)
        assert response.status_code == 403, (method, path, response.text)
    assert (await store.get("t1")).status.value == "DEAD" and sink.records == []


@pytest.mark.asyncio
async def test_payloads_as_each_role_sees_them(
    node: tuple[Client, MemoryAuditSink], store: MemoryStorage
) -> None:
    client, _ = node
    await _dead(store, "sealed", {"card": CARD}, KEYS)
    other = Keyring({"v9": secrets.token_bytes(32)}, "v9")
    await _dead(store, "foreign", {"card": CARD}, other)
    await _dead(store, "clear", {"card": CARD}, None)
    raw = await store.get("sealed")
    assert CARD not in msgspec.json.encode(raw.payload).decode()
    expected = {
        "viewer": ("encrypted", "hidden"),
        "viewer+payloads": ("decrypted", None),
        "operator": ("decrypted", None),
        "admin": ("decrypted", None),
        "legacy read": ("decrypted", None),
        "legacy admin": ("decrypted", None),
    }
    for role, (sealed_state, clear_state) in expected.items():
        sealed = (await client.get("/v1/tasks/sealed", headers=_auth(role))).json()
        assert sealed.get("payload_state") == sealed_state, role
        assert (sealed["payload"] == {"card": CARD}) == (sealed_state == "decrypted"), role
        foreign = (await client.get("/v1/tasks/foreign", headers=_auth(role))).json()
        assert foreign["payload"] is None and foreign["payload_state"] == "encrypted", role
        clear = (await client.get("/v1/tasks/clear", headers=_auth(role))).json()
        assert clear.get("payload_state") == clear_state, role
        page = (await client.get("/v1/queues/default/dlq", headers=_auth(role))).json()
        listed = {t["id"]: t for t in page["tasks"]}
        assert listed["sealed"].get("payload_state") == sealed_state, role
        assert (CARD in str(page)) == (sealed_state == "decrypted"), role
    # and the console
    for role, shows in (("viewer", False), ("operator", True)):
        async with AsyncTestClient(app=client.app) as browser:
            await _login(browser, TOKENS[role].token or "")
            html = (await browser.get("/ui/tasks/sealed")).text
            assert (CARD in html) == shows, role
            assert ("encrypted" in html) != shows, role


@pytest.mark.asyncio
async def test_access_endpoints(node: tuple[Client, MemoryAuditSink]) -> None:
    client, _ = node
    me = (await client.get("/v1/whoami", headers=_auth("submitter"))).json()
    assert me == {"owner": "sam", "role": None, "may": ["submit"]}
    me = (await client.get("/v1/whoami", headers=_auth("operator"))).json()
    assert me == {"owner": "otto", "role": "operator", "may": ["operate", "payloads", "read"]}
    users = (await client.get("/v1/users", headers=_auth("admin"))).json()["users"]
    assert [u["owner"] for u in users] == [t.owner for t in TOKENS.values()]
    assert all("token" not in str(u) for u in users)
    keys = (await client.get("/v1/keys", headers=_auth("admin"))).json()
    assert keys["active"] == "v1" and keys["keys"][0]["fingerprint"] == KEYS.fingerprint("v1")
    assert base64.b64encode(KEYS._keys["v1"]).decode() not in str(keys)
    for role in ("viewer", "operator"):
        assert (await client.get("/v1/keys", headers=_auth(role))).status_code == 403


@pytest.mark.asyncio
async def test_the_audit_names_the_role_with_the_actor(
    node: tuple[Client, MemoryAuditSink], store: MemoryStorage
) -> None:
    client, sink = node
    await _dead(store, "t1", {"n": 1}, None)
    response = await client.post(
        "/v1/queues/default/dlq/redrive", headers=_auth("operator"), json={"ids": ["t1"]}
    )
    assert response.status_code == 200, response.text
    assert [r.actor for r in sink.records] == ["otto (operator)"]
    trail = (await client.get("/v1/audit", headers=_auth("viewer"))).json()["entries"]
    assert trail[0]["actor"] == "otto (operator)"


@pytest.mark.asyncio
async def test_the_console_offers_actions_only_to_roles_that_may_act(
    node: tuple[Client, MemoryAuditSink], store: MemoryStorage
) -> None:
    client, sink = node
    await _dead(store, "t1", {"n": 1}, None)
    for role, acts in (("viewer", False), ("operator", True), ("admin", True)):
        async with AsyncTestClient(app=client.app) as browser:
            await _login(browser, TOKENS[role].token or "")
            queue = (await browser.get("/ui/queues/default?state=dead")).text
            task = (await browser.get("/ui/tasks/t1")).text
            for html in (queue, task):
                offered = "action=purge" in html or 'value="purge"' in html
                assert offered == acts, role
                assert ('type="checkbox" name="ids"' in html) == (acts and html is queue), role
            assert f"{TOKENS[role].owner} · {role}" in queue
            confirm = await browser.get(
                "/ui/queues/default/confirm",
                params={"action": "purge", "ids": "t1", "state": "dead"},
            )
            assert (confirm.status_code == 200) == acts, role
            if not acts:
                assert confirm.status_code == 403 and "may not do this" in confirm.text
                posted = await browser.post(
                    "/ui/queues/default/act",
                    data={"action": "purge", "ids": "t1", "scope": "ids", "reason": "x"},
                    follow_redirects=False,
                )
                assert posted.status_code == 403
    assert sink.records == [] and (await store.get("t1")).status.value == "DEAD"


@pytest.mark.asyncio
async def test_openapi_leaves_open_probes_open_and_swagger_is_served_locally(
    node: tuple[Client, MemoryAuditSink],
) -> None:
    client, _ = node
    document = (await client.get("/schema/openapi.json")).json()
    for path in ("/healthz", "/readyz"):
        operation = document["paths"][path]["get"]
        assert operation["security"] == [] and "401" not in operation["responses"], path
    assert document["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]
    assert document["paths"]["/v1/queues"]["get"].get("security") in (None, [{"bearer": []}])
    page = (await client.get("/schema/swagger")).text
    sources = re.findall(r'(?:src|href)=["\']([^"\']+)["\']', page)
    assert sources and all(s.startswith("/") for s in sources), sources
    for source in sources:
        asset = await client.get(source)
        assert asset.status_code == 200 and len(asset.content) > 100, source


async def _login(client: Client, token: str) -> None:
    form = await client.get("/ui/login")
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
    assert nonce
    response = await client.post(
        "/ui/login", data={"token": token, "login_csrf": nonce.group(1)}, follow_redirects=False
    )
    assert response.status_code == 303, response.text


def test_token_flags_and_legacy_rights_map_onto_roles() -> None:
    from rdq.server import parse_token_flag

    token = "x" * 20
    assert parse_token_flag(f"a:viewer:{token}").grants("t") == ("viewer", PERMISSIONS["viewer"])
    role, may = parse_token_flag(f"a:operator+submit:{token}").grants("t")
    assert role == "operator" and may == PERMISSIONS["operator"] | {"submit", "payloads"}
    role, may = parse_token_flag(f"a:viewer+payloads:{token}").grants("t")
    assert may == {"read", "payloads"}
    assert parse_token_flag(f"a:read:{token}").grants("t") == (
        "viewer",
        frozenset({"read", "payloads"}),
    )
    assert parse_token_flag(f"a:read+admin:{token}").grants("t")[0] == "admin"
    assert parse_token_flag(f"a:submit:{token}").grants("t") == (None, frozenset({"submit"}))
    with pytest.raises(Exception, match="one role"):
        parse_token_flag(f"a:viewer+operator:{token}")
    with pytest.raises(Exception, match="a role or rights"):
        TokenSpec(owner="a", role="viewer", rights=["read"], token=token).grants("t")
