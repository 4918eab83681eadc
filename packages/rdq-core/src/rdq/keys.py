"""Payload encryption: versioned keys and the sealed form of a task's payload.

A task's payload may hold what nobody but its handler should read (card numbers, personal
data). With a :class:`Keyring`, the client *seals* each payload before the store sees it:
AES-256-GCM under the keyring's active key, a fresh random 96-bit nonce per seal, the task's id
and the key's version bound in as associated data (a sealed payload copied onto another task,
or relabelled with another key's version, does not open). The sealed task keeps every routing
field in clear — id, queue, handler, priority, keys, headers, times — so stores, claims and
filters work unchanged: the store only ever holds an opaque string. Workers open the payload
just before the handler runs; the operator console opens it only for roles that may read
payloads.

The sealed form, all within the storage contract (no new field)::

    headers["rdq-encryption"] = "aes-256-gcm;key=<version>"
    payload = base64(nonce || ciphertext || tag)        # of the payload's JSON bytes

Keys are versioned: new tasks are sealed with the *active* version, every version still in
the keyring opens what it sealed, and ``rdq keys rotate`` re-seals stored tasks under the
active one so an old version can be retired. Where keys come from is
:meth:`Keyring.from_env` (see ``docs/operations.md``): ``RDQ_PAYLOAD_KEYS`` (versions and
base64 keys in the environment), ``RDQ_PAYLOAD_KEYS_FILE`` (a TOML file) or
``RDQ_PAYLOAD_KEYS_PROVIDER`` (``module:function`` returning a :class:`Keyring`: the hook for a
KMS or a vault).

Requires the ``cryptography`` package (``pip install 'rdq-core[encryption]'``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import os
import re
import secrets
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from rdq.errors import ConfigError, PayloadKeyError
from rdq.spi import Envelope

__all__ = [
    "ALGORITHM",
    "ENCRYPTION_HEADER",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "KEY_PROVIDER_ENV",
    "Keyring",
    "generate_key",
    "is_sealed",
    "open_payload",
    "seal",
    "sealed_for",
    "sealed_with",
    "unsealed",
]

ENCRYPTION_HEADER = "rdq-encryption"
"""The header that marks a sealed payload and names the key version that sealed it."""
ALGORITHM = "aes-256-gcm"
KEY_ENV = "RDQ_PAYLOAD_KEYS"
"""``VERSION:BASE64KEY`` pairs separated by spaces or commas; the first is active unless
``RDQ_PAYLOAD_KEY_ACTIVE`` names another."""
KEY_ACTIVE_ENV = "RDQ_PAYLOAD_KEY_ACTIVE"
KEY_FILE_ENV = "RDQ_PAYLOAD_KEYS_FILE"
"""A TOML file: ``active = "v2"`` and a ``[keys]`` table of ``version = "base64 key"``."""
KEY_PROVIDER_ENV = "RDQ_PAYLOAD_KEYS_PROVIDER"
"""``module:function``: called with no argument, returns a :class:`Keyring` (a KMS hook)."""

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_HEADER = re.compile(r"^aes-256-gcm;key=(?P<version>[A-Za-z0-9][A-Za-z0-9_.-]{0,31})$")
_NONCE = 12
_TAG = 16


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - the extra is missing
        raise ConfigError(
            "payload encryption needs the cryptography package: pip install 'rdq-core[encryption]'",
            key="payload_keys",
        ) from None
    return AESGCM(key)


def generate_key() -> str:
    """A new random 256-bit key, base64-encoded (what ``rdq keys generate`` prints)."""
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


class Keyring:
    """Payload keys by version, and the version that seals new payloads (``active``).

    ``keys`` maps a version name (letters, digits, ``_.-``, at most 32 characters) to a
    32-byte key; ``active`` must be one of them, or ``None`` for a keyring that only opens
    (a reader that must never seal). Raises ``ConfigError`` naming what is wrong."""

    def __init__(self, keys: Mapping[str, bytes], active: str | None) -> None:
        for version, key in keys.items():
            if not isinstance(version, str) or not _VERSION.match(version):
                raise ConfigError(
                    "a key version is 1-32 letters, digits, '_', '.' or '-'",
                    key=f"payload_keys.{version}",
                )
            if not isinstance(key, bytes) or len(key) != 32:
                raise ConfigError(
                    "must be 32 bytes (a base64 AES-256 key)", key=f"payload_keys.{version}"
                )
        if active is not None and active not in keys:
            raise ConfigError(
                f"names no key of the keyring (it has: {', '.join(sorted(keys)) or 'none'})",
                key="payload_keys.active",
            )
        self._keys = dict(keys)
        self._ciphers: dict[str, Any] = {}
        self.active = active

    def __repr__(self) -> str:  # never the keys themselves
        return f"Keyring(versions={sorted(self._keys)!r}, active={self.active!r})"

    @property
    def versions(self) -> list[str]:
        return sorted(self._keys)

    def has(self, version: str) -> bool:
        return version in self._keys

    def fingerprint(self, version: str) -> str:
        """A short public digest of a key (to compare nodes' keyrings without showing keys)."""
        return hashlib.sha256(b"rdq-key-fingerprint:" + self._keys[version]).hexdigest()[:12]

    def cipher(self, version: str) -> Any:
        cipher = self._ciphers.get(version)
        if cipher is None:
            cipher = self._ciphers[version] = _aesgcm(self._keys[version])
        return cipher

    # --- where keys come from --------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, active: str | None = None) -> Keyring:
        """``VERSION:BASE64KEY`` pairs separated by spaces or commas; the first is active
        unless ``active`` names another."""
        keys: dict[str, bytes] = {}
        first: str | None = None
        for item in re.split(r"[\s,]+", text.strip()):
            if not item:
                continue
            version, sep, encoded = item.partition(":")
            if not sep:
                raise ConfigError("expected VERSION:BASE64KEY pairs", key=KEY_ENV)
            keys[version] = _key_bytes(encoded, f"{KEY_ENV} {version}")
            first = first or version
        return cls(keys, active or first)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """A TOML file: ``active = "v2"`` and ``[keys]`` with ``v1 = "…"``, ``v2 = "…"``."""
        try:
            document = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}", key=KEY_FILE_ENV) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", key=KEY_FILE_ENV) from None
        unknown = sorted(set(document) - {"active", "keys"})
        if unknown:
            raise ConfigError(f"unknown key in {path} (it takes active, keys)", key=unknown[0])
        table = document.get("keys")
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"{path} has no [keys] table", key="keys")
        keys = {str(v): _key_bytes(k, f"keys.{v}") for v, k in table.items()}
        active = document.get("active")
        if active is not None and not isinstance(active, str):
            raise ConfigError("must be a key version", key="active")
        return cls(keys, active)

    @classmethod
    def from_provider(cls, spec: str) -> Keyring:
        """``module:function``, called with no argument: it returns a :class:`Keyring`."""
        module_name, sep, name = spec.partition(":")
        if not sep or not module_name or not name:
            raise ConfigError("expected module:function", key=KEY_PROVIDER_ENV)
        try:
            provider: Callable[[], Any] = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load {spec}: {exc}", key=KEY_PROVIDER_ENV) from None
        keyring = provider()
        if not isinstance(keyring, Keyring):
            raise ConfigError(f"{spec} returned no rdq.keys.Keyring", key=KEY_PROVIDER_ENV)
        return keyring

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring the environment configures, or ``None`` when it configures none: one
        of ``RDQ_PAYLOAD_KEYS_PROVIDER``, ``RDQ_PAYLOAD_KEYS_FILE``, ``RDQ_PAYLOAD_KEYS``
        (``RDQ_PAYLOAD_KEY_ACTIVE`` overrides the active version of any of them). Setting
        more than one is a ``ConfigError``: which keys seal must never be a guess."""
        env = os.environ if env is None else env
        given = [name for name in (KEY_PROVIDER_ENV, KEY_FILE_ENV, KEY_ENV) if env.get(name)]
        if not given:
            return None
        if len(given) > 1:
            raise ConfigError(f"set only one of {', '.join(given)}", key=given[0])
        if given[0] == KEY_PROVIDER_ENV:
            keyring = cls.from_provider(env[KEY_PROVIDER_ENV])
        elif given[0] == KEY_FILE_ENV:
            keyring = cls.from_file(env[KEY_FILE_ENV])
        else:
            keyring = cls.parse(env[KEY_ENV])
        active = env.get(KEY_ACTIVE_ENV)
        return keyring if not active else cls(keyring._keys, active)


def _key_bytes(encoded: Any, where: str) -> bytes:
    if not isinstance(encoded, str):
        raise ConfigError("must be a base64 string", key=where)
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("is not valid base64", key=where) from None
    if len(raw) != 32:
        raise ConfigError(f"must be 32 bytes once decoded, not {len(raw)}", key=where)
    return raw


# --- sealing -------------------------------------------------------------------------------


def sealed_with(task: Envelope) -> str | None:
    """The key version that sealed ``task``'s payload, or ``None`` if it is in clear. A
    malformed marker names itself (``"?"``): such a payload opens with no key."""
    marker = task.headers.get(ENCRYPTION_HEADER)
    if marker is None:
        return None
    match = _HEADER.match(marker)
    return match.group("version") if match else "?"


def is_sealed(task: Envelope) -> bool:
    return ENCRYPTION_HEADER in task.headers


def _aad(task_id: str, version: str) -> bytes:
    return f"rdq-payload\x00{task_id}\x00{version}".encode()


def seal(task: Envelope, keyring: Keyring) -> Envelope:
    """``task`` with its payload sealed under the keyring's active key (a task already
    sealed is returned as it is). ``ConfigError`` if the keyring has no active key."""
    if is_sealed(task):
        return task
    version = keyring.active
    if version is None:
        raise ConfigError("the keyring has no active key to seal with", key="payload_keys.active")
    nonce = secrets.token_bytes(_NONCE)
    plain = msgspec.json.encode(task.payload)
    sealed = nonce + keyring.cipher(version).encrypt(nonce, plain, _aad(task.id, version))
    headers = {**task.headers, ENCRYPTION_HEADER: f"{ALGORITHM};key={version}"}
    return msgspec.structs.replace(
        task, payload=base64.b64encode(sealed).decode("ascii"), headers=headers
    )


def sealed_for(task: Envelope, keyring: Keyring | None, wanted: bool | None) -> Envelope:
    """``task`` as a submit stores it: sealed when its queue wants it (``wanted``: the
    queue's ``encrypt``; ``None``: whenever the keyring has an active key). ``ConfigError``
    when the queue wants it and there is no active key."""
    if wanted is False:
        return task
    if keyring is None or keyring.active is None:
        if wanted:
            raise ConfigError(
                f"queue {task.queue!r} encrypts its payloads, and this process has no active "
                f"payload key (set {KEY_ENV} or {KEY_FILE_ENV})",
                key=f"queues.{task.queue}.encrypt",
            )
        return task
    return seal(task, keyring)


def open_payload(task: Envelope, keyring: Keyring | None) -> Any:
    """The clear payload of a sealed ``task``. Raises :class:`~rdq.errors.PayloadKeyError`
    when the keyring lacks the key that sealed it, or the key does not open it (a wrong key
    under that version's name, or a payload changed since it was sealed)."""
    version = sealed_with(task)
    if version is None:
        return task.payload
    if version == "?":
        raise PayloadKeyError(
            task.id, None, f"its {ENCRYPTION_HEADER} header is not one rdq writes"
        )
    if keyring is None or not keyring.has(version):
        held = ", ".join(keyring.versions) if keyring is not None else "none"
        raise PayloadKeyError(
            task.id, version, f"this process does not hold key {version!r} (it holds: {held})"
        )
    try:
        raw = (
            base64.b64decode(task.payload, validate=True) if isinstance(task.payload, str) else b""
        )
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) < _NONCE + _TAG:
        raise PayloadKeyError(task.id, version, "the sealed payload is not base64 of a seal")
    try:
        from cryptography.exceptions import InvalidTag
    except ImportError:  # pragma: no cover
        raise ConfigError("pip install 'rdq-core[encryption]'", key="payload_keys") from None
    try:
        plain = keyring.cipher(version).decrypt(raw[:_NONCE], raw[_NONCE:], _aad(task.id, version))
    except InvalidTag:
        raise PayloadKeyError(
            task.id,
            version,
            f"key {version!r} of this process does not open it (a different key under that "
            "version's name, or a payload changed since it was sealed)",
        ) from None
    return msgspec.json.decode(plain)


def unsealed(task: Envelope, keyring: Keyring | None) -> Envelope:
    """``task`` as it was submitted: the payload opened, the marker header removed (a task in
    clear is returned as it is). Raises :class:`~rdq.errors.PayloadKeyError` as
    :func:`open_payload` does."""
    if not is_sealed(task):
        return task
    payload = open_payload(task, keyring)
    headers = {k: v for k, v in task.headers.items() if k != ENCRYPTION_HEADER}
    return msgspec.structs.replace(task, payload=payload, headers=headers)
