"""The API's access endpoints: who a token is, the node's users (admin), its payload keys
(admin)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get

from rdq.server._api_common import errors, node_of

__all__ = ["AccessDoc", "KeyDoc", "KeysDoc", "UsersDoc", "list_keys", "list_users", "whoami"]


class AccessDoc(msgspec.Struct, kw_only=True):
    """A token's owner, role and what it may do: ``read``, ``operate`` (redrive, purge,
    cancel, retry now, pauses, breakers), ``admin`` (users, keys), ``submit``, ``payloads``
    (read payloads in clear)."""

    owner: str
    role: str | None
    may: list[str]


class UsersDoc(msgspec.Struct, kw_only=True):
    users: list[AccessDoc]


class KeyDoc(msgspec.Struct, kw_only=True):
    """A payload key the node holds: its version, whether new payloads are sealed with it,
    and its fingerprint (a digest that tells keys apart; never the key)."""

    version: str
    active: bool
    fingerprint: str


class KeysDoc(msgspec.Struct, kw_only=True):
    """The node's payload keys (``configured`` false: it seals nothing and opens nothing)."""

    configured: bool
    active: str | None
    keys: list[KeyDoc]


@get(
    "/v1/whoami",
    opt={"right": "any"},
    summary="The token's owner, role and what it may do",
    responses=errors(),
    tags=["access"],
)
async def whoami(request: Request[Any, Any, Any]) -> AccessDoc:
    principal = request.state.principal
    return AccessDoc(owner=principal.owner, role=principal.role, may=sorted(principal.rights))


@get(
    "/v1/users",
    opt={"right": "admin"},
    summary="The node's users: every configured token's owner, role and grants (admin)",
    description="Never a token or its digest.",
    responses=errors(),
    tags=["access"],
)
async def list_users(request: Request[Any, Any, Any]) -> UsersDoc:
    users = [
        AccessDoc(owner=p.owner, role=p.role, may=sorted(p.rights))
        for p in node_of(request).auth.principals
    ]
    return UsersDoc(users=users)


@get(
    "/v1/keys",
    opt={"right": "admin"},
    summary="The node's payload keys: versions, the active one, fingerprints (admin)",
    description="Never a key. Rotate stored payloads to the active key with `rdq keys rotate`.",
    responses=errors(),
    tags=["access"],
)
async def list_keys(request: Request[Any, Any, Any]) -> KeysDoc:
    keyring = node_of(request).keys
    if keyring is None:
        return KeysDoc(configured=False, active=None, keys=[])
    keys = [
        KeyDoc(version=v, active=v == keyring.active, fingerprint=keyring.fingerprint(v))
        for v in keyring.versions
    ]
    return KeysDoc(configured=True, active=keyring.active, keys=keys)
