"""The DLQ web UI at ``/ui``: server-rendered pages, no build step, no JavaScript needed.

Log in once with a token (``read`` to browse, ``admin`` to act); the node answers with an
HttpOnly, SameSite=Strict session cookie (see :mod:`rdq.server._auth`). Every POST form
carries the session's CSRF token. Redrive and purge go through a confirmation page that
shows how many tasks would be touched (a dry run), and are audited under the token's owner.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException
from litestar.params import PathParameter
from litestar.response import Redirect, Template

from rdq.errors import NotFound, RdqError, StaleCursor, ValidationError
from rdq.server._auth import Principal
from rdq.server._body import check_time
from rdq.server._errors import to_api_error
from rdq.server._node import Node
from rdq.spi import DLQFilter, Page, Selector, envelope_to_builtins, limits

__all__ = ["jinja_filters", "ui_router"]

SESSION_COOKIE = "rdq_session"
LOGIN_COOKIE = "rdq_login"
"""Holds a random value the login form must echo (login CSRF: a page elsewhere cannot log a
browser in under its own token)."""
_FLASH = {
    "redrive": "{count} task(s) redriven.",
    "purge": "{count} task(s) purged.",
    "cancel": "{count} task(s) cancelled.",
}
PathText = Annotated[str, PathParameter(max_length=1024)]
_PAGE_SIZE = 50


class _LoginRequired(Exception):
    pass


class _UIError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def _node(request: Request[Any, Any, Any]) -> Node:
    node: Node = request.app.state.node
    return node


def _session(request: Request[Any, Any, Any]) -> tuple[Principal, str]:
    cookie = request.cookies.get(SESSION_COOKIE)
    principal = _node(request).auth.from_session(cookie)
    if principal is None or cookie is None:
        raise _LoginRequired
    if not principal.can("read"):
        raise _UIError(403, f"the token of {principal.owner!r} lacks the 'read' right")
    return principal, cookie


def _page(
    request: Request[Any, Any, Any], name: str, status: int = 200, **context: Any
) -> Template:
    principal = context.get("principal")
    if principal is not None and "csrf" not in context:
        cookie = request.cookies.get(SESSION_COOKIE, "")
        context["csrf"] = _node(request).auth.csrf_token(principal, cookie)
    context.setdefault("flash", _flash(request))
    headers = {
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
        "Referrer-Policy": "same-origin",
    }
    return Template(template_name=name, context=context, status_code=status, headers=headers)


def _flash(request: Request[Any, Any, Any]) -> str | None:
    """The sentence for ``?done=ACTION&count=N`` (fixed sentences only: no text from the URL
    is shown)."""
    template = _FLASH.get(request.query_params.get("done", ""))
    count = request.query_params.get("count", "")
    if template is None or not count.isdigit() or len(count) > 12:
        return None
    return template.format(count=int(count))


def _secure(request: Request[Any, Any, Any]) -> bool:
    """Whether cookies get the ``Secure`` flag (see ``ServerSettings.secure_cookies``)."""
    setting = _node(request).settings.secure_cookies
    if setting is not None:
        return setting
    host = (request.url.hostname or "").lower()
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    return request.url.scheme == "https" or not loopback


def _cookie(request: Request[Any, Any, Any], key: str, value: str, max_age: int) -> Cookie:
    return Cookie(
        key=key,
        value=value,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        max_age=max_age,
    )


# --- login -----------------------------------------------------------------------------------


@get("/login", include_in_schema=False)
async def login_form(request: Request[Any, Any, Any]) -> Response[Any]:
    nonce = secrets.token_urlsafe(24)
    page = _page(request, "login.html", login_csrf=nonce)
    page.cookies.append(_cookie(request, LOGIN_COOKIE, nonce, 3600))
    return page


@post("/login", include_in_schema=False, status_code=303)
async def login(request: Request[Any, Any, Any]) -> Response[Any]:
    form = await request.form()
    offered = form.get("login_csrf")
    expected = request.cookies.get(LOGIN_COOKIE)
    if not (isinstance(offered, str) and expected and hmac.compare_digest(offered, expected)):
        raise _UIError(403, "the login form has expired or did not come from this page; reload it")
    token = form.get("token")
    node = _node(request)
    principal = node.auth.authenticate(token if isinstance(token, str) else None)
    if principal is None:
        return _page(
            request, "login.html", status=401, error="That token is not valid.", login_csrf=offered
        )
    session = node.auth.new_session(principal)
    max_age = int(node.settings.session_hours * 3600)
    response: Response[Any] = Redirect(
        "/ui", status_code=303, cookies=[_cookie(request, SESSION_COOKIE, session, max_age)]
    )
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@post("/logout", include_in_schema=False, status_code=303)
async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
    principal, session = _session(request)
    form = await request.form()
    _check_csrf(request, principal, session, form.get("csrf"))
    _node(request).auth.revoke(session)
    response: Response[Any] = Redirect("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


def _check_csrf(
    request: Request[Any, Any, Any], principal: Principal, session: str, offered: Any
) -> None:
    if not _node(request).auth.csrf_ok(principal, session, offered):
        raise _UIError(403, "the form has expired or did not come from this page; try again")


# --- pages -----------------------------------------------------------------------------------


@get("/", include_in_schema=False)
async def queues_page(request: Request[Any, Any, Any]) -> Template:
    principal, _ = _session(request)
    node = _node(request)
    queues = [msgspec.to_builtins(s) for s in await node.queues()]
    return _page(request, "queues.html", principal=principal, queues=queues)


@get("/open", include_in_schema=False)
async def open_queue(request: Request[Any, Any, Any]) -> Redirect:
    _session(request)
    queue = request.query_params.get("queue", "")
    try:
        limits.check_queue(queue)
    except ValidationError as exc:
        raise _UIError(422, f"queue: {exc.message}") from None
    return Redirect(f"/ui/queues/{quote(queue, safe='')}/dlq", status_code=303)


@get("/queues/{queue:str}/dlq", include_in_schema=False)
async def dlq_page(request: Request[Any, Any, Any], queue: PathText) -> Template:
    principal, _ = _session(request)
    node = _node(request)
    params = request.query_params
    filters = {k: params.get(k) or None for k in ("error_type", "handler_ref", "after", "before")}
    cursor = params.get("cursor") or None
    error = None
    tasks: list[dict[str, Any]] = []
    next_cursor = None
    try:
        limits.check_queue(queue)
        dlq_filter = _filter(filters)
        page = Page(limit=_PAGE_SIZE, cursor=cursor, include_attempts=True)
        found, next_cursor = await node.admin.list_dlq(queue, dlq_filter, page)
        tasks = [envelope_to_builtins(t) for t in found]
    except (ValidationError, StaleCursor) as exc:
        error = exc.message if isinstance(exc, ValidationError) else str(exc)
    base = f"/ui/queues/{quote(queue, safe='')}/dlq"
    kept = {k: v for k, v in filters.items() if v}
    return _page(
        request,
        "dlq.html",
        principal=principal,
        admin=principal.can("admin"),
        queue=queue,
        filters=filters,
        filtered=bool(kept),
        tasks=tasks,
        error=error,
        cursor=cursor,
        first_url=f"{base}?{urlencode(kept)}",
        next_url=f"{base}?{urlencode({**kept, 'cursor': next_cursor})}" if next_cursor else None,
        all_url=f"{base}/confirm?{urlencode({**kept, 'scope': 'filter'})}",
    )


@get("/tasks/{task_id:str}", include_in_schema=False)
async def task_page(request: Request[Any, Any, Any], task_id: PathText) -> Template:
    principal, _ = _session(request)
    try:
        task = envelope_to_builtins(await _node(request).admin.get(task_id))
    except (NotFound, ValidationError):
        raise _UIError(404, f"no task {task_id!r}") from None
    fields = [
        (k, v if isinstance(v, str) else msgspec.json.format(msgspec.json.encode(v)).decode())
        for k, v in task.items()
        if k != "attempts"
    ]
    return _page(
        request,
        "task.html",
        principal=principal,
        admin=principal.can("admin"),
        task=task,
        fields=fields,
    )


# --- redrive and purge -----------------------------------------------------------------------


@get("/queues/{queue:str}/dlq/confirm", include_in_schema=False)
async def confirm_page(request: Request[Any, Any, Any], queue: PathText) -> Template:
    principal, _ = _session(request)
    _require_admin(principal)
    params = request.query_params
    action = _action(params.get("action"))
    ids = [i for i in params.getall("ids", []) if i]
    filters = {k: params.get(k) or None for k in ("error_type", "handler_ref", "after", "before")}
    if not ids and params.get("scope") != "filter":
        raise _UIError(422, "select at least one task first")
    selector = _selector(ids, filters)
    count = await _node(request).admin.count(limits.check_queue(queue), selector)
    kept = [(k, v) for k, v in filters.items() if v]
    return _page(
        request,
        "confirm.html",
        principal=principal,
        action=action,
        queue=queue,
        ids=ids,
        count=count,
        filter_fields=kept,
        filter_text=", ".join(f"{k}={v}" for k, v in kept) or "any filter (the whole DLQ)",
    )


@post("/queues/{queue:str}/dlq/{action:str}", include_in_schema=False, status_code=303)
async def act(request: Request[Any, Any, Any], queue: PathText, action: PathText) -> Redirect:
    principal, session = _session(request)
    form = await request.form()
    _check_csrf(request, principal, session, form.get("csrf"))
    _require_admin(principal)
    verb = _action(action)
    ids = [i for i in form.getall("ids", []) if isinstance(i, str) and i]
    filters = {k: _text(form.get(k)) for k in ("error_type", "handler_ref", "after", "before")}
    if form.get("scope") != "filter" and not ids:
        raise _UIError(422, "select at least one task first")
    selector = _selector(ids, filters)
    reason = _text(form.get("reason"))
    admin = _node(request).admin
    run = admin.redrive if verb == "redrive" else admin.purge
    count = await run(limits.check_queue(queue), selector, actor=principal.owner, reason=reason)
    target = f"/ui/queues/{quote(queue, safe='')}/dlq?{urlencode({'done': verb, 'count': count})}"
    return Redirect(target, status_code=303)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _require_admin(principal: Principal) -> None:
    if not principal.can("admin"):
        raise _UIError(403, f"the token of {principal.owner!r} lacks the 'admin' right")


def _action(value: Any) -> str:
    if value not in ("redrive", "purge"):
        raise _UIError(404, "unknown action")
    return str(value)


def _filter(filters: dict[str, str | None]) -> DLQFilter | None:
    if not any(filters.values()):
        return None
    return DLQFilter(
        error_type=filters.get("error_type"),
        handler_ref=filters.get("handler_ref"),
        dead_lettered_after=_time(filters.get("after"), "after"),
        dead_lettered_before=_time(filters.get("before"), "before"),
    )


def _selector(ids: list[str], filters: dict[str, str | None]) -> Selector:
    if ids:
        return Selector(ids=ids)
    return Selector(filter=_filter(filters) or DLQFilter())


def _time(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError("is not an RFC 3339 time", field=field) from None
    if parsed.tzinfo is None:
        raise ValidationError("needs a UTC offset (add Z or +HH:MM)", field=field)
    return check_time(parsed, field)


# --- errors and filters ----------------------------------------------------------------------


def _ui_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, _LoginRequired):
        return Redirect("/ui/login", status_code=303)
    if isinstance(exc, _UIError):
        status, message = exc.status, exc.message
    elif isinstance(exc, (HTTPException, RdqError)):
        error = to_api_error(exc)
        status, message = error.status, error.message
    else:
        error = to_api_error(exc)
        status, message = error.status, error.message
    return _page(request, "error.html", status=status, status_text=status, message=message)


def _age(seconds: Any) -> str:
    if seconds is None:
        return "-"
    value = float(seconds)
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.1f}h"


def _when(value: Any) -> str:
    if not value:
        return ""
    return str(value).replace("T", " ")[:19] + " UTC"


jinja_filters = {"age": _age, "when": _when}

ui_router = Router(
    path="/ui",
    route_handlers=[
        login_form,
        login,
        logout,
        queues_page,
        open_queue,
        dlq_page,
        task_page,
        confirm_page,
        act,
    ],
    exception_handlers={Exception: _ui_error},
    include_in_schema=False,
)
