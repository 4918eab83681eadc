"""What the console's pages share: the session, the page response, cookies, errors, filters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.response import Redirect, Template

from rdq.errors import ValidationError
from rdq.server._auth import Principal
from rdq.server._body import check_time
from rdq.server._errors import to_api_error
from rdq.server._node import Node
from rdq.server._ui._fleet import key_label, span

__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "LoginRequired",
    "UIError",
    "check_csrf",
    "cookie",
    "jinja_filters",
    "login_url",
    "node_of",
    "page",
    "parse_time",
    "queue_url",
    "require_operator",
    "safe_next",
    "session",
    "text",
    "ui_error",
]

SESSION_COOKIE = "rdq_session"
LOGIN_COOKIE = "rdq_login"
"""Holds a random value the login form must echo (login CSRF: a page elsewhere cannot log a
browser in under its own token)."""
_FLASH = {
    "redrive": "{count} task(s) redriven.",
    "purge": "{count} task(s) purged.",
    "cancel": "{count} task(s) cancelled.",
    "retry_now": "{count} task(s) made due now.",
    "paced": "Paced redrive of {count} task(s) started: its progress is under Controls.",
    "pause": "Paused: no worker claims these tasks until they are resumed.",
    "resume": "Resumed: the tasks are claimed again.",
    "open": "Breaker opened: its tasks are held until it is closed by hand.",
    "close": "Breaker closed: its held tasks are let go over the ramp.",
    "cancel-redrive": "Paced redrive cancelled after {count} task(s); the rest stay in the DLQ.",
}
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
}


class LoginRequired(Exception):
    pass


class UIError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def node_of(request: Request[Any, Any, Any]) -> Node:
    node: Node = request.app.state.node
    return node


def session(request: Request[Any, Any, Any]) -> tuple[Principal, str]:
    """The principal of the request's session cookie; ``LoginRequired`` without one."""
    value = request.cookies.get(SESSION_COOKIE)
    principal = node_of(request).auth.from_session(value)
    if principal is None or value is None:
        raise LoginRequired
    if not principal.can("read"):
        raise UIError(403, principal.refusal("read"))
    return principal, value


def require_operator(principal: Principal) -> None:
    """``UIError`` 403 unless ``principal``'s role may act (operator or admin)."""
    if not principal.can("operate"):
        raise UIError(403, principal.refusal("operate"))


def check_csrf(
    request: Request[Any, Any, Any], principal: Principal, value: str, offered: Any
) -> None:
    if not node_of(request).auth.csrf_ok(principal, value, offered):
        raise UIError(403, "the form has expired or did not come from this page; try again")


def page(request: Request[Any, Any, Any], name: str, status: int = 200, **context: Any) -> Template:
    """The template ``name`` with the session's principal, CSRF token and flash message."""
    principal = context.get("principal")
    if principal is not None and "csrf" not in context:
        value = request.cookies.get(SESSION_COOKIE, "")
        context["csrf"] = node_of(request).auth.csrf_token(principal, value)
    context.setdefault("flash", _flash(request))
    # what the page offers: actions only to roles that may act (never shown, then refused)
    context.setdefault("operator", principal is not None and principal.can("operate"))
    context.setdefault("role", principal.role if principal is not None else None)
    context.setdefault("now", datetime.now(UTC))
    return Template(template_name=name, context=context, status_code=status, headers=_HEADERS)


def _flash(request: Request[Any, Any, Any]) -> str | None:
    """The sentence for ``?done=ACTION&count=N`` (fixed sentences only: no text from the URL
    is shown)."""
    template = _FLASH.get(request.query_params.get("done", ""))
    count = request.query_params.get("count", "")
    if template is None or not count.isdigit() or len(count) > 12:
        return None
    said = template.format(count=int(count))
    matched, gone = (request.query_params.get(k, "") for k in ("matched", "gone"))
    if _number(matched) and _number(gone):
        said += f" Matched {int(matched)}, already gone {int(gone)}."
    if _number(request.query_params.get("archived", "")):
        said += " Each was written to the archive before it was deleted."
    return said


def _number(value: str) -> bool:
    return value.isdigit() and len(value) <= 12


def _secure(request: Request[Any, Any, Any]) -> bool:
    """Whether cookies get the ``Secure`` flag (see ``ServerSettings.secure_cookies``)."""
    setting = node_of(request).settings.secure_cookies
    if setting is not None:
        return setting
    host = (request.url.hostname or "").lower()
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    return request.url.scheme == "https" or not loopback


def cookie(request: Request[Any, Any, Any], key: str, value: str, max_age: int) -> Cookie:
    return Cookie(
        key=key,
        value=value,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        max_age=max_age,
    )


def queue_url(queue: str, **params: Any) -> str:
    """The console URL of ``queue`` with the query ``params`` that are set."""
    kept = {k: v for k, v in params.items() if v not in (None, "", False)}
    base = f"/ui/queues/{quote(queue, safe='')}"
    return f"{base}?{urlencode(kept)}" if kept else base


def text(value: Any) -> str | None:
    """A non-empty string from a query or form value, else None."""
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_time(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError("is not an RFC 3339 time (2026-03-01T10:00:00Z)", field) from None
    if parsed.tzinfo is None:
        raise ValidationError("needs a UTC offset (add Z or +HH:MM)", field=field)
    return check_time(parsed, field)


def safe_next(value: Any) -> str | None:
    """``value`` if it names a console page of this node (a path under ``/ui``, with its
    query), else None: after a login the browser goes back to the page it was sent to, never
    to another site (``//evil.example``, ``https://…``, ``/\\evil``) nor to the login itself."""
    if not isinstance(value, str) or len(value) > 4096 or not value.startswith("/ui"):
        return None
    if "\\" in value or not value.isprintable():
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or parts.fragment:
        return None
    if parts.path != "/ui" and not parts.path.startswith("/ui/"):
        return None
    if parts.path in ("/ui/login", "/ui/logout"):
        return None
    return value


def login_url(request: Request[Any, Any, Any]) -> str:
    """The login page, told to come back to this request's page when it is one a browser
    can return to (a GET of a console page)."""
    query = request.url.query
    target = safe_next(request.url.path + (f"?{query}" if query else ""))
    if request.method != "GET" or target is None or target == "/ui":
        return "/ui/login"
    return f"/ui/login?{urlencode({'next': target})}"


def ui_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, LoginRequired):
        return Redirect(login_url(request), status_code=303)
    if isinstance(exc, UIError):
        status, message = exc.status, exc.message
    else:
        error = to_api_error(exc)
        status, message = error.status, error.message
    return page(request, "error.html", status=status, status_text=status, message=message)


# --- template filters ---------------------------------------------------------------------------


def _age(seconds: Any) -> str:
    if seconds is None:
        return "–"
    value = float(seconds)
    if value < 1:
        return "now"
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    if value < 172800:
        return f"{value / 3600:.1f}h"
    return f"{value / 86400:.0f}d"


def _as_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _when(value: Any) -> str:
    """``2026-03-02 10:14:03 UTC``."""
    at = _as_time(value)
    if at is None:
        return ""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(value: Any, now: datetime | None = None) -> str:
    """``5m ago`` / ``in 3s``."""
    at = _as_time(value)
    if at is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - at).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{_age(seconds)} ago" if seconds > 0 else f"in {_age(-seconds)}"


def _elapsed(value: Any, now: datetime | None = None) -> str:
    """``13 min``: how long ago ``value`` was (``–`` for the future or nothing)."""
    at = _as_time(value)
    if at is None:
        return "–"
    return span(max(((now or datetime.now(UTC)) - at).total_seconds(), 0.0))


def _duration(attempt: dict[str, Any]) -> str:
    started, finished = _as_time(attempt.get("started_at")), _as_time(attempt.get("finished_at"))
    if started is None or finished is None:
        return ""
    ms = (finished - started).total_seconds() * 1000
    if ms < 1:
        return "<1 ms"
    return f"{ms:.0f} ms" if ms < 10_000 else _age(ms / 1000)


def _iso(value: Any) -> str:
    at = _as_time(value)
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z") if at else ""


def _count(stats: dict[str, Any], name: str) -> str:
    value = stats.get(name, 0)
    return f"~{value:,}" if name in (stats.get("estimated") or ()) else f"{value:,}"


def _ordinal(value: Any) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    n = int(value)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


jinja_filters = {
    "age": _age,
    "when": _when,
    "ago": _ago,
    "iso": _iso,
    "duration": _duration,
    "count": _count,
    "queue_url": queue_url,
    "span": span,
    "elapsed": _elapsed,
    "key_label": key_label,
    "ordinal": _ordinal,
}
