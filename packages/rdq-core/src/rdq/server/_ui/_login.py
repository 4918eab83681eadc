"""Logging in to and out of the console."""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from litestar import Request, Response, get, post
from litestar.response import Redirect, Template

from rdq.server._ui._common import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    UIError,
    check_csrf,
    cookie,
    node_of,
    page,
    safe_next,
    session,
)

__all__ = ["login", "login_form", "logout"]


@get("/login", include_in_schema=False)
async def login_form(request: Request[Any, Any, Any]) -> Template:
    """The login form; ``next`` (a console page, see ``safe_next``) is where it leads."""
    nonce = secrets.token_urlsafe(24)
    target = safe_next(request.query_params.get("next"))
    response = page(request, "login.html", login_csrf=nonce, next=target)
    response.cookies.append(cookie(request, LOGIN_COOKIE, nonce, 3600))
    return response


@post("/login", include_in_schema=False, status_code=303)
async def login(request: Request[Any, Any, Any]) -> Response[Any]:
    form = await request.form()
    offered = form.get("login_csrf")
    expected = request.cookies.get(LOGIN_COOKIE)
    if not (isinstance(offered, str) and expected and hmac.compare_digest(offered, expected)):
        raise UIError(403, "the login form has expired or did not come from this page; reload it")
    token = form.get("token")
    target = safe_next(form.get("next"))
    node = node_of(request)
    principal = node.auth.authenticate(token if isinstance(token, str) else None)
    if principal is None:
        return page(
            request,
            "login.html",
            status=401,
            error="That token is not valid.",
            login_csrf=offered,
            next=target,
        )
    value = node.auth.new_session(principal)
    max_age = int(node.settings.session_hours * 3600)
    response: Response[Any] = Redirect(
        target or "/ui",
        status_code=303,
        cookies=[cookie(request, SESSION_COOKIE, value, max_age)],
    )
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@post("/logout", include_in_schema=False, status_code=303)
async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
    principal, value = session(request)
    form = await request.form()
    check_csrf(request, principal, value, form.get("csrf"))
    node_of(request).auth.revoke(value)
    response: Response[Any] = Redirect("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response
