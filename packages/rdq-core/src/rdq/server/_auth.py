"""Bearer-token authentication, rights, and the web UI's session cookie and CSRF tokens.

Tokens are kept only as SHA-256 digests. A presented token is hashed and compared with
``hmac.compare_digest`` against *every* configured digest (no early exit), so neither the
answer time nor the order of tokens tells anything about them. Tokens are never logged.

The UI's session cookie holds ``owner.expiry.mac`` where the MAC is keyed by the token used
at login (and the optional ``session_secret``): any node with the same configuration can check
it, it expires, and removing the token from the configuration ends its sessions. The CSRF
token of a session is another MAC of the session, embedded in every form and checked on every
POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

from rdq.server._settings import Right, ServerSettings

__all__ = ["Authenticator", "Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the token's owner and its rights."""

    owner: str
    rights: frozenset[str]
    digest: bytes
    """The SHA-256 digest of the token."""
    key: bytes
    """Keys the UI session MACs (derived from the digest and the session secret)."""

    def can(self, right: Right | str) -> bool:
        return right in self.rights


class Authenticator:
    """Checks bearer tokens and UI sessions against the configured tokens."""

    def __init__(self, settings: ServerSettings) -> None:
        secret = (settings.session_secret or "").encode()
        self._principals = []
        for i, spec in enumerate(settings.tokens):
            digest = spec.digest(f"server.tokens[{i}]")
            key = hmac.new(secret, b"rdq-ui-session:" + digest, hashlib.sha256).digest()
            self._principals.append(Principal(spec.owner, frozenset(spec.rights), digest, key))
        self._session_seconds = settings.session_hours * 3600

    @property
    def configured(self) -> bool:
        return bool(self._principals)

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
        body = f"{owner}.{expires}"
        return f"{body}.{_mac(principal.key, 'session', body)}"

    def from_session(self, cookie: str | None, now: float | None = None) -> Principal | None:
        """The principal of a session cookie, or None if it is forged, stale or revoked."""
        if not cookie or cookie.count(".") != 2:
            return None
        owner_b64, expires_text, mac = cookie.split(".")
        body = f"{owner_b64}.{expires_text}"
        try:
            expires = int(expires_text)
            owner = _unb64(owner_b64).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        if expires < (time.time() if now is None else now):
            return None
        found: Principal | None = None
        for principal in self._principals:
            expected = _mac(principal.key, "session", body)
            if hmac.compare_digest(mac, expected) and principal.owner == owner:
                found = principal
        return found

    @staticmethod
    def csrf_token(principal: Principal, session: str) -> str:
        return _mac(principal.key, "csrf", session)

    @staticmethod
    def csrf_ok(principal: Principal, session: str, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(
            str(offered), _mac(principal.key, "csrf", session)
        )


def _mac(key: bytes, purpose: str, body: str) -> str:
    digest = hmac.new(key, f"{purpose}:{body}".encode(), hashlib.sha256).digest()
    return _b64(digest)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
