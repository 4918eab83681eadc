"""Bearer-token authentication, roles and rights, and the web UI's session cookie and CSRF
tokens.

Tokens are kept only as SHA-256 digests. A presented token is hashed and compared with
``hmac.compare_digest`` against *every* configured digest (no early exit), so neither the
answer time nor the order of tokens tells anything about them. Tokens are never logged.

The UI's session cookie holds ``owner.expiry.nonce.mac``. The MAC is keyed by a secret, never
by anything public: the configured ``session_secret`` when there is one (the same on every
node), else the token itself when it is configured in plain text, else a random key made when
the node starts (a token known only by its digest: its sessions then hold on this node until
it restarts). A digest alone — which the configuration may show — is never enough to mint a
session. Sessions expire, removing a token from the configuration ends its sessions, and
logging out revokes the session on the node that served the logout (see :class:`Revocations`).
The CSRF token of a session is another MAC of the session, embedded in every form and checked
on every POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from rdq.server._settings import Right, ServerSettings

__all__ = ["Authenticator", "Principal", "Revocations"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the token's owner, its role and what it may do (see
    :data:`rdq.server._settings.PERMISSIONS`)."""

    owner: str
    role: str | None
    rights: frozenset[str]
    digest: bytes
    """The SHA-256 digest of the token."""
    key: bytes
    """Keys the UI session MACs (from a secret: see the module docstring)."""

    def can(self, right: Right | str) -> bool:
        return right in self.rights

    def refusal(self, right: str) -> str:
        """Why this principal may not do what needs ``right``, in words."""
        role = f"role {self.role!r}" if self.role else "no role"
        needed = {
            "read": "reading needs the viewer role or higher",
            "operate": "acting on tasks, queues and breakers needs the operator or admin role",
            "admin": "users and keys need the admin role",
            "submit": "submitting needs the submit grant",
        }.get(right, f"this needs the {right!r} right")
        return f"the token of {self.owner!r} ({role}) may not do this: {needed}"

    @property
    def actor(self) -> str:
        """Who acted, as audit records name it: the owner and the role it acted in."""
        return f"{self.owner} ({self.role})" if self.role else self.owner


class Revocations:
    """Session nonces revoked by a logout, kept until the session would have expired."""

    MAX = 100_000

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def revoke(self, nonce: str, expires: float, now: float) -> None:
        self._prune(now)
        if len(self._until) < self.MAX:
            self._until[nonce] = expires

    def revoked(self, nonce: str) -> bool:
        return nonce in self._until

    def _prune(self, now: float) -> None:
        for nonce in [n for n, until in self._until.items() if until < now]:
            del self._until[nonce]


class Authenticator:
    """Checks bearer tokens and UI sessions against the configured tokens."""

    def __init__(self, settings: ServerSettings) -> None:
        shared = settings.session_secret.encode() if settings.session_secret else None
        node_key = secrets.token_bytes(32)
        self.ephemeral_owners: list[str] = []
        """Owners whose sessions are keyed by this node's random key (see the module doc)."""
        self._principals = []
        for i, spec in enumerate(settings.tokens):
            where = f"server.tokens[{i}]"
            digest = spec.digest(where)
            plaintext = spec.plaintext(where)
            if shared is not None:
                secret = shared
            elif plaintext is not None:
                secret = b"token:" + plaintext.encode()
            else:
                secret = node_key
                self.ephemeral_owners.append(spec.owner)
            key = hmac.new(secret, b"rdq-ui-session:" + digest, hashlib.sha256).digest()
            role, allowed = spec.grants(where)
            self._principals.append(Principal(spec.owner, role, allowed, digest, key))
        self._session_seconds = settings.session_hours * 3600
        self._revocations = Revocations()

    @property
    def configured(self) -> bool:
        return bool(self._principals)

    @property
    def principals(self) -> list[Principal]:
        """Every configured token's principal, in configuration order."""
        return list(self._principals)

    def authenticate(self, token: str | None) -> Principal | None:
        """The principal of ``token``, or None if it matches no configured token."""
        if not token:
            return None
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for principal in self._principals:
            if hmac.compare_digest(digest, principal.digest):
                found = principal
        return found

    def from_header(self, authorization: str | None) -> Principal | None:
        """The principal of an ``Authorization: Bearer …`` header value."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.authenticate(token.strip())

    # --- UI sessions -----------------------------------------------------------------------

    def new_session(self, principal: Principal, now: float | None = None) -> str:
        expires = int((time.time() if now is None else now) + self._session_seconds)
        owner = _b64(principal.owner.encode())
        body = f"{owner}.{expires}.{secrets.token_urlsafe(16)}"
        return f"{body}.{_mac(principal.key, 'session', body)}"

    def from_session(self, cookie: str | None, now: float | None = None) -> Principal | None:
        """The principal of a session cookie, or None if it is forged, stale or revoked."""
        parsed = _parse_session(cookie)
        if parsed is None:
            return None
        body, owner, expires, nonce, mac = parsed
        if expires < (time.time() if now is None else now):
            return None
        if self._revocations.revoked(nonce):
            return None
        found: Principal | None = None
        for principal in self._principals:
            expected = _mac(principal.key, "session", body)
            if hmac.compare_digest(mac, expected) and principal.owner == owner:
                found = principal
        return found

    def revoke(self, cookie: str, now: float | None = None) -> None:
        """Refuse this session from now on (on this node), until it would have expired."""
        parsed = _parse_session(cookie)
        if parsed is not None:
            _, _, expires, nonce, _ = parsed
            self._revocations.revoke(nonce, expires, time.time() if now is None else now)

    @staticmethod
    def csrf_token(principal: Principal, session: str) -> str:
        return _mac(principal.key, "csrf", session)

    @staticmethod
    def csrf_ok(principal: Principal, session: str, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(
            str(offered), _mac(principal.key, "csrf", session)
        )


def _parse_session(cookie: str | None) -> tuple[str, str, int, str, str] | None:
    """``(body, owner, expires, nonce, mac)`` of a well-formed cookie, else None."""
    if not cookie or cookie.count(".") != 3:
        return None
    owner_b64, expires_text, nonce, mac = cookie.split(".")
    try:
        expires = int(expires_text)
        owner = _unb64(owner_b64).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    if not nonce:
        return None
    return f"{owner_b64}.{expires_text}.{nonce}", owner, expires, nonce, mac


def _mac(key: bytes, purpose: str, body: str) -> str:
    digest = hmac.new(key, f"{purpose}:{body}".encode(), hashlib.sha256).digest()
    return _b64(digest)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
