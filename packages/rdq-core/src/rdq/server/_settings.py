"""Server node settings: from a TOML file, environment variables and command-line flags.

A TOML file holds a ``[server]`` table (everything below), and may also hold the engine's
``[defaults]``, ``[queues.NAME]`` and ``[schedules.NAME]`` tables, read as ``rdq worker
--config`` reads them: a node runs the schedules whose queue it works, and however many nodes
and workers share the store, each tick is one task (see :mod:`rdq.schedules`)::

    [server]
    storage = "postgresql://rdq@db/rdq"
    queues = ["webhooks"]                 # queues this node works and lists (default: the app's)
    audit_log = "/var/log/rdq/audit.jsonl"
    open_metrics = false                  # /metrics needs a token with "read"
    max_unrecorded = 400                  # bigger completion batches (default: 100)

    [[server.tokens]]
    owner = "alice"
    role = "operator"                     # viewer, operator or admin (see Roles below)
    submit = true                         # may submit tasks (default false)
    payloads = true                       # may read payloads (default: operator and admin)
    token_env = "RDQ_TOKEN_ALICE"         # or token = "…", or sha256 = "<hex of the token>"

    [server.callbacks]
    allow_hosts = ["hooks.example.com", "*.internal.example.com"]
    allow_networks = []                   # e.g. ["10.1.0.0/16"] to allow private addresses
    secrets_env = "RDQ_CALLBACK_SECRET"   # or secrets = ["…"]
    timeout = 10.0
    queue_timeouts = { slow-hooks = 60.0 }

Roles (what a token may do in the API and the console; every endpoint names what it needs):

==========  ===========================================================================
viewer      read everything but payloads (unless ``payloads = true``)
operator    a viewer's reads and payloads, and every action: redrive, purge, cancel,
            retry now, pause/resume, breakers, paced redrives
admin       an operator's, and the node's users and payload keys (``/v1/users``,
            ``/v1/keys``)
==========  ===========================================================================

``submit = true`` adds submitting to any role (or alone, for a producer's token: no role).
A token configured the earlier way, by ``rights``, keeps what it could do: ``read`` is a
viewer that reads payloads, ``admin`` an admin, ``submit`` the submit grant.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from rdq._storage_url import named_storage
from rdq._suggest import did_you_mean
from rdq.app import DEFAULT_QUEUE, App
from rdq.callbacks import CallbackSettings
from rdq.errors import ConfigError
from rdq.worker import MAX_UNRECORDED

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "PERMISSIONS",
    "RIGHTS",
    "ROLES",
    "ServerSettings",
    "TokenSpec",
    "load_settings",
    "parse_token_flag",
    "worked_queues",
]

Right = Literal["read", "submit", "admin"]
RIGHTS: tuple[Right, ...] = ("read", "submit", "admin")
"""The rights of tokens configured before roles (kept working, see :meth:`TokenSpec.grants`)."""
Role = Literal["viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "admin")
PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "operate"}),
    "admin": frozenset({"read", "operate", "admin"}),
}
"""What each role may do: ``read`` (every GET), ``operate`` (every action on tasks, queues
and breakers), ``admin`` (users and keys). ``submit`` and ``payloads`` are granted apart."""
_ENGINE_TABLES = ("defaults", "queues", "schedules", "archive", "blobs")
"""Top-level tables of a node's TOML file that configure the engine (``App.configure``)."""
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
"""Largest request body the API accepts (a 1 MiB payload plus room for the rest)."""


class TokenSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One bearer token: its owner (named in audit records) and its rights. The token itself
    is given as ``token``, as the name of an environment variable ``token_env``, or only by
    its SHA-256 hex digest ``sha256`` (so the config file holds no secret)."""

    owner: str
    role: Role | None = None
    rights: list[Right] = []
    submit: bool = False
    payloads: bool | None = None
    token: str | None = None
    token_env: str | None = None
    sha256: str | None = None

    def grants(self, where: str) -> tuple[Role | None, frozenset[str]]:
        """The token's role and everything it may do (``read``, ``operate``, ``admin``,
        ``submit``, ``payloads``). A token given by ``rights`` keeps what it could do before
        roles: ``admin`` → admin, ``read`` → viewer that reads payloads, ``submit`` → submit.
        Raises ``ConfigError`` naming ``where``."""
        role = self.role
        if role is not None and self.rights:
            raise ConfigError("give a role or rights, not both", key=f"{where}.rights")
        legacy = bool(self.rights)
        if legacy:
            if "admin" in self.rights:
                role = "admin"
            elif "read" in self.rights:
                role = "viewer"
        elif role is None and not self.submit:
            raise ConfigError("give a role (viewer, operator, admin) or submit", key=where)
        allowed = set(PERMISSIONS[role]) if role is not None else set()
        if self.submit or "submit" in self.rights:
            allowed.add("submit")
        payloads = self.payloads
        if payloads is None:
            payloads = role is not None and (legacy or role != "viewer")
        if payloads and role is not None:
            allowed.add("payloads")
        return role, frozenset(allowed)

    def digest(self, where: str) -> bytes:
        """The SHA-256 digest of the token. Raises ``ConfigError`` naming ``where``."""
        if self.sha256 is not None:
            self._check_one(where)
            try:
                raw = bytes.fromhex(self.sha256)
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise ConfigError("must be 64 hex digits", key=f"{where}.sha256")
            return raw
        token = self.plaintext(where)
        if token is None:  # unreachable: _check_one saw exactly one source
            raise ConfigError("give exactly one of token, token_env, sha256", key=where)
        return hashlib.sha256(token.encode()).digest()

    def plaintext(self, where: str) -> str | None:
        """The token itself, or None when only its digest is configured. Raises
        ``ConfigError`` naming ``where``."""
        self._check_one(where)
        if self.sha256 is not None:
            return None
        token = self.token
        if self.token_env is not None:
            token = os.environ.get(self.token_env)
            if not token:
                raise ConfigError(
                    f"environment variable {self.token_env} is not set", key=f"{where}.token_env"
                )
        if token is None or len(token) < 16:
            raise ConfigError("tokens must be at least 16 characters", key=f"{where}.token")
        return token

    def _check_one(self, where: str) -> None:
        given = [x for x in (self.token, self.token_env, self.sha256) if x is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one of token, token_env, sha256", key=where)


class ServerSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Everything a node needs besides the engine's queue configs."""

    storage: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    tokens: list[TokenSpec] = []
    queues: list[str] = []
    """Queues this node works (runs their tasks' handlers and callbacks) and lists. Empty (the
    default): the queues of the node's application, as ``rdq worker`` works them (declared,
    configured or bound to a handler: :attr:`rdq.App.queues`), else ``["default"]``; see
    :func:`worked_queues`."""
    work: bool = True
    """Run a worker beside the API."""
    max_unrecorded: int | None = None
    """The node's worker's ``max_unrecorded`` (:class:`rdq.Worker`): how many successes
    waiting for their batched write may give their slot to the next task. ``None`` (the
    default): 100, or the worker's total concurrency if larger."""
    migrate: bool = False
    """Create or upgrade the storage schema at start."""
    open_health: bool = True
    """``/healthz`` and ``/readyz`` answer without a token."""
    open_metrics: bool = False
    """``/metrics`` answers without a token (else it needs ``read``)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    audit_log: str | None = None
    """A JSON-lines file every redrive and purge is appended to."""
    archive_purges: bool = True
    """A purge writes every task it deletes to the archive first (the application's
    ``[archive]``, else ``RDQ_ARCHIVE``, else ``./rdq-archive``; see :mod:`rdq.retention`).
    ``false``: purges delete without an archive."""
    secure_cookies: bool | None = None
    """Mark the UI cookies ``Secure``. ``None`` (the default) marks them on every request
    except plain ``http://`` to a loopback address (a developer's own machine); set ``false``
    to serve the UI over plain HTTP on a network, ``true`` to mark them always."""
    session_hours: float = 8.0
    session_secret: str | None = None
    """Keys the UI session cookies; give every node the same one (at least 16 characters).
    Without it, a token given in plain text keys its own sessions, and a token known only by
    its ``sha256`` digest gets a random key made at start (its sessions hold on this node
    until it restarts)."""
    request_timeout: float = 5.0
    """Seconds a request waits on the storage for one operation before the node answers 503
    ``storage_unavailable`` (the store's own ``timeout`` applies as well)."""
    max_page_bytes: int = 4 * 1024 * 1024
    """A page of tasks (DLQ or task list) stops early, with a cursor, once its tasks encode to
    more than this many bytes (a page always holds at least one task)."""
    openapi_ui: bool = False
    """Serve the Swagger UI at ``/schema/swagger`` (its scripts and styles served by the node
    itself, from the ``swagger-ui-py`` package); the OpenAPI document itself is always at
    ``/schema/openapi.json``."""
    callbacks: CallbackSettings = CallbackSettings()

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError("must be between 1 and 65535", key="server.port")
        if not 1024 <= self.max_body_bytes <= 64 * 1024 * 1024:
            raise ConfigError("must be between 1 KiB and 64 MiB", key="server.max_body_bytes")
        if self.session_hours <= 0:
            raise ConfigError("must be greater than zero", key="server.session_hours")
        if self.session_secret is not None and len(self.session_secret) < 16:
            raise ConfigError("must be at least 16 characters", key="server.session_secret")
        if self.max_unrecorded is not None and not (
            type(self.max_unrecorded) is int and 0 <= self.max_unrecorded <= MAX_UNRECORDED
        ):
            raise ConfigError(
                f"must be a whole number from 0 to {MAX_UNRECORDED}", key="server.max_unrecorded"
            )
        if not 0 < self.request_timeout <= 600:
            raise ConfigError("must be more than 0 and at most 600", key="server.request_timeout")
        if not 64 * 1024 <= self.max_page_bytes <= 256 * 1024 * 1024:
            raise ConfigError("must be between 64 KiB and 256 MiB", key="server.max_page_bytes")


def parse_token_flag(value: str) -> TokenSpec:
    """``OWNER:GRANTS:TOKEN`` with grants joined by ``+``: one role (``viewer``,
    ``operator``, ``admin``) with ``submit`` and ``payloads`` if wanted
    (``alice:operator+submit:s3cr…``), or the rights of before roles
    (``alice:read+admin:s3cr…``)."""
    owner, sep, rest = value.partition(":")
    rights_text, sep2, token = rest.partition(":")
    if not (sep and sep2 and owner and token):
        raise ConfigError("expected OWNER:GRANTS:TOKEN (grants joined by +)", key="token")
    grants = [r.strip() for r in rights_text.split("+") if r.strip()]
    if grants and all(r in RIGHTS for r in grants):  # as before roles ("admin" is both)
        return TokenSpec(owner=owner, rights=grants, token=token)  # type: ignore[arg-type]
    roles = [r for r in grants if r in ROLES]
    bad = [r for r in grants if r not in (*ROLES, "submit", "payloads")]
    if bad or not grants or len(roles) > 1:
        raise ConfigError(
            f"grants must be one role ({', '.join(ROLES)}) with submit or payloads, or "
            f"rights among {', '.join(RIGHTS)}",
            key=f"token {owner}",
        )
    return TokenSpec(
        owner=owner,
        role=roles[0] if roles else None,
        submit="submit" in grants,
        payloads=True if "payloads" in grants else None,
        token=token,
    )


_AT = re.compile(r"^(?P<text>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_KEYED = re.compile(r"^(?P<key>[\w.\[\]-]+): (?P<text>.*)$", re.S)


def _config_error(exc: msgspec.ValidationError) -> ConfigError:
    """A ConfigError naming the key from msgspec's message (``… - at `$.tokens[0].rights```)."""
    match = _AT.match(str(exc))
    if match is None:  # the pattern matches every string
        return ConfigError(str(exc), key="server")
    text, path = match.group("text"), (match.group("path") or "").lstrip(".")
    base = f"server.{path}" if path else "server"
    keyed = _KEYED.match(text)
    if keyed is not None:  # our own ConfigError, raised by a __post_init__
        key = keyed.group("key")
        if not key.startswith("server."):
            key = f"{base}.{key}"
        return ConfigError(keyed.group("text"), key=key)
    return ConfigError(text, key=base)


def _resolve_env(token: Any, index: int, env: dict[str, str]) -> Any:
    """Replace ``token_env`` by the token it names (read from ``env``)."""
    if not isinstance(token, dict) or not token.get("token_env"):
        return token
    name = token["token_env"]
    value = env.get(name)
    if not value:
        raise ConfigError(
            f"environment variable {name} is not set", key=f"server.tokens[{index}].token_env"
        )
    return {k: v for k, v in token.items() if k != "token_env"} | {"token": value}


def load_settings(
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[ServerSettings, dict[str, Any]]:
    """Settings from the TOML file, then ``RDQ_*`` environment variables, then ``overrides``
    (command-line flags; ``None`` values are ignored). Returns the settings and the engine
    part of the file (``defaults``/``queues``/``schedules`` tables) for ``App.configure``.

    Environment: ``RDQ_STORAGE`` (or the older ``RDQ_STORAGE_URL``), ``RDQ_SERVER_TOKENS``
    (space-separated ``OWNER:RIGHTS:TOKEN``), ``RDQ_CALLBACK_SECRET``, ``RDQ_AUDIT_LOG``,
    ``RDQ_SESSION_SECRET``.
    Raises ``ConfigError`` naming the key."""
    env = dict(os.environ) if env is None else env
    data: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    if config_path is not None:
        try:
            document = tomllib.loads(Path(config_path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read {config_path}: {exc}", key="config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path} is not valid TOML: {exc}", key="config") from None
        _known_keys(document, ("server", *_ENGINE_TABLES), "")
        data = dict(document.get("server") or {})
        engine = {k: v for k, v in document.items() if k in _ENGINE_TABLES}
        _check_server_table(data)
    callbacks = dict(data.pop("callbacks", None) or {})
    secrets_env = callbacks.pop("secrets_env", None)
    if secrets_env:
        secret = env.get(secrets_env)
        if not secret:
            raise ConfigError(f"environment variable {secrets_env} is not set", "callbacks")
        callbacks["secrets"] = [secret, *callbacks.get("secrets", [])]
    named = named_storage(env)
    if named and "storage" not in data:
        data["storage"] = named
    if env.get("RDQ_SESSION_SECRET") and "session_secret" not in data:
        data["session_secret"] = env["RDQ_SESSION_SECRET"]
    if env.get("RDQ_AUDIT_LOG") and "audit_log" not in data:
        data["audit_log"] = env["RDQ_AUDIT_LOG"]
    if env.get("RDQ_CALLBACK_SECRET") and not callbacks.get("secrets"):
        callbacks["secrets"] = [env["RDQ_CALLBACK_SECRET"]]
    tokens = [
        msgspec.to_builtins(parse_token_flag(t)) for t in env.get("RDQ_SERVER_TOKENS", "").split()
    ]
    data["tokens"] = list(data.get("tokens") or []) + tokens
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key.startswith("callbacks."):
            callbacks[key.removeprefix("callbacks.")] = value
        elif key == "tokens":
            data["tokens"] = data["tokens"] + [msgspec.to_builtins(t) for t in value]
        else:
            data[key] = value
    data["callbacks"] = callbacks
    data["tokens"] = [_resolve_env(t, i, env) for i, t in enumerate(data["tokens"])]
    try:
        settings = msgspec.convert(data, ServerSettings)
    except msgspec.ValidationError as exc:
        raise _config_error(exc) from None
    for i, spec in enumerate(settings.tokens):
        spec.digest(f"server.tokens[{i}]")
        spec.grants(f"server.tokens[{i}]")
    return settings, engine


def _known_keys(table: Any, known: Sequence[str], where: str) -> None:
    """``ConfigError`` naming the first key of ``table`` not among ``known`` (with the closest
    known one): a misspelt key (``prot = 8080``) is refused, never silently ignored."""
    if not isinstance(table, dict):
        return
    for key in table:
        if key not in known:
            name = f"{where}.{key}" if where else key
            kind = "key" if where else "table"
            raise ConfigError(
                f"unknown {kind}{did_you_mean(key, known)}; the {where or 'file'} "
                f"takes: {', '.join(sorted(known))}",
                key=name,
            )


def _check_server_table(data: dict[str, Any]) -> None:
    """Every key of ``[server]``, ``[server.callbacks]`` and each ``[[server.tokens]]`` is
    one the node reads."""
    _known_keys(data, ServerSettings.__struct_fields__, "server")
    _known_keys(
        data.get("callbacks"),
        (*CallbackSettings.__struct_fields__, "secrets_env"),
        "server.callbacks",
    )
    tokens = data.get("tokens")
    for i, token in enumerate(tokens if isinstance(tokens, list) else []):
        _known_keys(token, TokenSpec.__struct_fields__, f"server.tokens[{i}]")


def worked_queues(settings: ServerSettings, app: App | None) -> list[str]:
    """The queues a node works: those its settings name (``--queue``, ``queues``), else its
    application's (``--app``, and the file's ``[queues.NAME]`` tables), else ``default``."""
    if settings.queues:
        return list(settings.queues)
    return (app.queues if app is not None else []) or [DEFAULT_QUEUE]
