"""Keyrings and sealed payloads: where keys come from, what a seal binds, what fails how."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import msgspec
import pytest

from rdq.errors import ConfigError, PayloadKeyError
from rdq.keys import (
    ENCRYPTION_HEADER,
    Keyring,
    generate_key,
    open_payload,
    seal,
    sealed_for,
    sealed_with,
    unsealed,
)
from rdq.spi import Envelope, decode_envelope, encode_envelope

from .conftest import CARD, keyring


def _task(task_id: str = "t1", payload: object = None) -> Envelope:
    return Envelope(id=task_id, queue="payments", handler_ref="pay", payload=payload)


def test_a_sealed_payload_is_opaque_and_opens_to_what_was_sealed() -> None:
    keys = keyring("v1")
    payload = {"card": CARD, "amount": 1250, "nested": [1, None, "é"]}
    sealed = seal(_task(payload=payload), keys)
    assert isinstance(sealed.payload, str) and CARD not in sealed.payload
    assert sealed.headers[ENCRYPTION_HEADER] == "aes-256-gcm;key=v1"
    assert (sealed.id, sealed.queue, sealed.handler_ref) == ("t1", "payments", "pay")
    # the store keeps it as any JSON string; read back, it opens
    again = decode_envelope(encode_envelope(sealed))
    assert open_payload(again, keys) == payload
    assert unsealed(again, keys) == _task(payload=payload)
    assert seal(sealed, keys) is sealed  # never sealed twice
    # a fresh nonce each time
    assert seal(_task(payload=payload), keys).payload != sealed.payload


def test_old_versions_open_and_the_active_one_seals() -> None:
    old = keyring("v1")
    sealed_old = seal(_task(payload=1), old)
    both = Keyring({"v2": secrets.token_bytes(32), "v1": old._keys["v1"]}, "v2")
    assert open_payload(sealed_old, both) == 1
    assert sealed_with(seal(_task(payload=2), both)) == "v2"


def test_a_missing_or_wrong_key_or_a_moved_seal_is_a_clear_error() -> None:
    keys = keyring("v1")
    sealed = seal(_task(payload={"card": CARD}), keys)
    with pytest.raises(PayloadKeyError, match="does not hold key 'v1'"):
        open_payload(sealed, None)
    with pytest.raises(PayloadKeyError, match="does not hold key 'v1' \\(it holds: v2\\)"):
        open_payload(sealed, keyring("v2"))
    with pytest.raises(PayloadKeyError, match="does not open it"):
        open_payload(sealed, keyring("v1"))  # another key under the same name
    moved = msgspec.structs.replace(sealed, id="t2")  # copied onto another task
    with pytest.raises(PayloadKeyError, match="does not open it"):
        open_payload(moved, keys)
    relabelled = msgspec.structs.replace(sealed, headers={ENCRYPTION_HEADER: "aes-256-gcm;key=v2"})
    with pytest.raises(PayloadKeyError):
        open_payload(relabelled, Keyring({"v2": keys._keys["v1"]}, "v2"))
    garbage = msgspec.structs.replace(sealed, payload="not base64 at all!")
    with pytest.raises(PayloadKeyError, match="not base64"):
        open_payload(garbage, keys)


def test_keys_from_the_environment_a_file_or_a_provider(tmp_path: Path) -> None:
    k1, k2 = generate_key(), generate_key()
    assert Keyring.from_env({}) is None
    ring = Keyring.from_env({"RDQ_PAYLOAD_KEYS": f"v2:{k2}, v1:{k1}"})
    assert ring is not None and ring.active == "v2" and ring.versions == ["v1", "v2"]
    ring = Keyring.from_env(
        {"RDQ_PAYLOAD_KEYS": f"v2:{k2} v1:{k1}", "RDQ_PAYLOAD_KEY_ACTIVE": "v1"}
    )
    assert ring is not None and ring.active == "v1"
    file = tmp_path / "keys.toml"
    file.write_text(f'active = "v1"\n[keys]\nv1 = "{k1}"\nv2 = "{k2}"\n')
    ring = Keyring.from_env({"RDQ_PAYLOAD_KEYS_FILE": str(file)})
    assert ring is not None and ring.active == "v1" and ring.has("v2")
    ring = Keyring.from_env({"RDQ_PAYLOAD_KEYS_PROVIDER": f"{__name__}:provider"})
    assert ring is not None and ring.active == "kms-7"
    assert "kms" in repr(ring) and base64.b64encode(ring._keys["kms-7"]).decode() not in repr(ring)
    bad = [
        ({"RDQ_PAYLOAD_KEYS": "v1"}, "VERSION:BASE64KEY"),
        ({"RDQ_PAYLOAD_KEYS": "v1:c2hvcnQ="}, "32 bytes"),
        ({"RDQ_PAYLOAD_KEYS": "v1:@@@"}, "base64"),
        ({"RDQ_PAYLOAD_KEYS": f"bad name:{k1}"}, "VERSION:BASE64KEY|key version"),
        ({"RDQ_PAYLOAD_KEYS": f"v1:{k1}", "RDQ_PAYLOAD_KEYS_FILE": str(file)}, "only one"),
        ({"RDQ_PAYLOAD_KEYS": f"v1:{k1}", "RDQ_PAYLOAD_KEY_ACTIVE": "v3"}, "names no key"),
        ({"RDQ_PAYLOAD_KEYS_FILE": str(tmp_path / "none.toml")}, "cannot read"),
        ({"RDQ_PAYLOAD_KEYS_PROVIDER": "nowhere.at.all:keys"}, "cannot load"),
        ({"RDQ_PAYLOAD_KEYS_PROVIDER": f"{__name__}:not_a_keyring"}, "no rdq.keys.Keyring"),
    ]
    for env, message in bad:
        with pytest.raises(ConfigError, match=message):
            Keyring.from_env(env)


def provider() -> Keyring:
    """What a KMS hook returns: keys it fetched (here: made up), and the active version."""
    return Keyring({"kms-7": secrets.token_bytes(32)}, "kms-7")


def not_a_keyring() -> object:
    return {"v1": "nope"}


def test_a_queue_that_encrypts_refuses_a_submit_without_a_key() -> None:
    with pytest.raises(ConfigError, match="encrypts its payloads"):
        sealed_for(_task(payload=1), None, True)
    assert sealed_for(_task(payload=1), None, None).payload == 1
    assert sealed_for(_task(payload=1), keyring("v1"), False).payload == 1
    assert sealed_with(sealed_for(_task(payload=1), keyring("v1"), None)) == "v1"
    with pytest.raises(ConfigError, match="no active key"):
        seal(_task(), Keyring({"v1": secrets.token_bytes(32)}, None))
