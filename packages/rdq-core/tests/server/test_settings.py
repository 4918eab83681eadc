"""Node settings from TOML, environment and flags; tokens by value, env or digest; no leaks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import structlog
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.errors import ConfigError
from rdq.server import create_app, load_settings, parse_token_flag
from rdq.server._auth import Authenticator
from rdq_compliance.testing import eventually
from rdq_memory import MemoryStorage

from .conftest import ADMIN_TOKEN, auth

CONFIG = """
[server]
storage = "memory://from-file"
queues = ["webhooks"]
open_metrics = true

[[server.tokens]]
owner = "alice"
rights = ["read", "admin"]
token_env = "ALICE_TOKEN"

[[server.tokens]]
owner = "ci"
rights = ["submit"]
sha256 = "{digest}"

[server.callbacks]
allow_hosts = ["hooks.example.com"]
secrets_env = "HOOK_SECRET"
queue_timeouts = {{ webhooks = 3.5 }}

[queues.webhooks]
max_attempts = 7
"""


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"ci-token-0123456789abcdef").hexdigest()
    path = tmp_path / "rdq.toml"
    path.write_text(CONFIG.format(digest=digest))
    env = {
        "ALICE_TOKEN": "alice-token-0123456789",
        "HOOK_SECRET": "hook-secret-0123456789",
        "RDQ_SERVER_TOKENS": "ops:read+submit:ops-token-0123456789",
        "RDQ_STORAGE_URL": "memory://ignored-file-wins",
    }
    settings, engine = load_settings(path, {"port": 9000, "queues": None}, env=env)
    assert settings.storage == "memory://from-file"
    assert settings.port == 9000 and settings.queues == ["webhooks"]
    assert settings.callbacks.secrets == ["hook-secret-0123456789"]
    assert settings.callbacks.queue_timeouts == {"webhooks": 3.5}
    assert engine == {"queues": {"webhooks": {"max_attempts": 7}}}
    authenticator = Authenticator(settings)
    alice = authenticator.authenticate("alice-token-0123456789")
    assert alice is not None and alice.owner == "alice" and alice.can("admin")
    ci = authenticator.authenticate("ci-token-0123456789abcdef")
    assert ci is not None and ci.can("submit") and not ci.can("read")
    ops = authenticator.authenticate("ops-token-0123456789")
    assert ops is not None and ops.owner == "ops"
    assert authenticator.authenticate("alice-token-012345678") is None


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[server]\nport = 0\n", "server.port"),
        (
            '[[server.tokens]]\nowner = "a"\nrights = ["read"]\ntoken = "short"\n',
            "server.tokens[0].token",
        ),
        ('[[server.tokens]]\nowner = "a"\nrights = ["read"]\n', "server.tokens[0]"),
        (
            '[[server.tokens]]\nowner = "a"\nrights = ["read"]\nsha256 = "abc"\n',
            "server.tokens[0].sha256",
        ),
        (
            '[[server.tokens]]\nowner = "a"\nrights = ["root"]\ntoken = "x"\n',
            "server.tokens[0].rights[0]",
        ),
        ('[server.callbacks]\nallow_networks = ["x"]\n', "server.callbacks.allow_networks[0]"),
        ("[server\n", "config"),
        ("[server]\nmax_unrecorded = -1\n", "server.max_unrecorded"),
        ("[server]\nmax_unrecorded = 10001\n", "server.max_unrecorded"),
        ('[server]\nmax_unrecorded = "400"\n', "server.max_unrecorded"),
        ("[server]\nmax_unrecorded = 1.5\n", "server.max_unrecorded"),
        ("[server]\nmax_unrecorded = true\n", "server.max_unrecorded"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "rdq.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.key == key


@pytest.mark.asyncio
async def test_max_unrecorded_from_the_file_or_a_flag_reaches_the_nodes_worker(
    tmp_path: Path, memory_store: MemoryStorage
) -> None:
    path = tmp_path / "rdq.toml"
    path.write_text(
        '[server]\nqueues = ["hooks"]\nmax_unrecorded = 3\n'
        '[[server.tokens]]\nowner = "ops"\nrights = ["read"]\n'
        f'token = "{ADMIN_TOKEN}"\n'
    )
    from_file, _ = load_settings(path, env={})
    from_flag, _ = load_settings(path, {"max_unrecorded": 0}, env={})
    assert (from_file.max_unrecorded, from_flag.max_unrecorded) == (3, 0)
    for settings, expected in [(from_file, 3), (from_flag, 0)]:
        with structlog.testing.capture_logs() as logs:
            async with AsyncTestClient(app=create_app(settings, storage=memory_store)):

                async def started() -> dict[str, object] | None:
                    return next((e for e in logs if e["event"] == "worker started"), None)

                line = await eventually(started, "the node's worker to start")
        assert line["max_unrecorded"] == expected, line
        assert line["queues"] == ["hooks"]


def test_token_flags() -> None:
    spec = parse_token_flag("bob:read+admin:bob-token-0123456789")
    assert (spec.owner, spec.rights, spec.token) == (
        "bob",
        ["read", "admin"],
        "bob-token-0123456789",
    )
    for bad in ("bob", "bob:read", "bob:write:t0123456789abcdef", "bob::t0123456789abcdef"):
        with pytest.raises(ConfigError):
            parse_token_flag(bad)


def test_a_node_without_tokens_refuses_to_start() -> None:
    settings, _ = load_settings(None, {"storage": "memory://"}, env={})
    with pytest.raises(ConfigError) as info:
        create_app(settings)
    assert info.value.key == "server.tokens"


@pytest.mark.asyncio
async def test_tokens_never_reach_the_logs(
    client: AsyncTestClient[Litestar],
    memory_store: MemoryStorage,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "wrong-token-abcdefghijkl"
    with structlog.testing.capture_logs() as logs:
        await client.get("/v1/queues", headers=auth(wrong))
        await client.post(
            "/v1/tasks", json={"handler_ref": "h", "id": "x"}, headers=auth(ADMIN_TOKEN)
        )
        await client.post(
            "/v1/queues/default/pause", json={"reason": "audited"}, headers=auth(ADMIN_TOKEN)
        )
        await client.post("/ui/login", data={"token": ADMIN_TOKEN})
        await client.get("/v1/tasks/%00", headers=auth(ADMIN_TOKEN))
    printed = capsys.readouterr()  # one read: a second one would find both streams empty
    text = repr(logs) + printed.out + printed.err
    assert any(entry.get("audit") for entry in logs)
    assert ADMIN_TOKEN not in text and wrong not in text


def test_a_node_works_the_queues_named_else_its_apps_else_default() -> None:
    from rdq import App
    from rdq.server import worked_queues

    app = App()
    app.queue("payments")

    @app.handler("mail", queue="emails")
    def mail(payload: object) -> None: ...

    unnamed, _ = load_settings(None, {"storage": "memory://"}, env={})
    named, _ = load_settings(None, {"storage": "memory://", "queues": ["hooks"]}, env={})
    assert worked_queues(unnamed, app) == ["emails", "payments"]
    assert worked_queues(named, app) == ["hooks"]
    assert worked_queues(unnamed, None) == worked_queues(unnamed, App()) == ["default"]


def test_rdq_storage_names_the_nodes_store_before_the_older_name() -> None:
    both = {"RDQ_STORAGE": "memory://new", "RDQ_STORAGE_URL": "memory://old"}
    assert load_settings(None, env=both)[0].storage == "memory://new"
    assert load_settings(None, env={"RDQ_STORAGE_URL": "memory://old"})[0].storage == (
        "memory://old"
    )
