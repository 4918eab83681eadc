"""Pause and resume, breakers opened and closed by hand, paced redrives cancelled — from the
console, each through a confirmation page that says what it holds or lets go and asks for a
reason (the console's convention for every action; the admin layer audits it) — and the
Workers page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request, get, post
from litestar.response import Redirect, Template

from rdq.errors import NotFound, ValidationError
from rdq.flow import control_key, held_by
from rdq.server._ui._common import (
    UIError,
    check_csrf,
    node_of,
    page,
    queue_url,
    require_operator,
    session,
    text,
)
from rdq.server._ui._fleet import fleet_of, key_label, silent_holdings
from rdq.server._ui._pages import PathText
from rdq.spi import bounds

__all__ = ["control_act", "control_confirm", "workers_page"]

DOS = ("pause", "resume", "open", "close", "cancel-redrive")


@dataclass(frozen=True)
class Change:
    do: str
    key: str | None = None
    op_id: str | None = None


def _change(params: Any) -> Change:
    """What a control form asks: ``do`` and the key (``key``, or ``kind`` and ``name``) or
    the paced redrive's ``id``."""
    do = params.get("do")
    if do not in DOS:
        raise UIError(404, "no such control action")
    if do == "cancel-redrive":
        op_id = text(params.get("id"))
        if op_id is None or not op_id.isalnum() or len(op_id) > 64:
            raise UIError(422, "id: name the paced redrive to cancel")
        return Change(do, op_id=op_id)
    key = text(params.get("key"))
    if key is None:
        kind, name = text(params.get("kind")), text(params.get("name"))
        if kind not in ("handler", "dependency") or name is None:
            if do in ("pause", "resume") and kind in (None, "queue"):
                key = "*"
            else:
                raise UIError(422, "name: give the handler or dependency to act on")
        else:
            key = control_key(**{kind: name})
    bounds.check_control_key(key)
    if key.startswith("op:"):
        raise UIError(422, "key: that names a paced redrive, not a control")
    if do in ("open", "close") and not key.startswith(("handler:", "dep:")):
        raise UIError(422, "key: a breaker's key is handler:<ref> or dep:<name>")
    return Change(do, key=key)


_TITLES = {
    "pause": "Pause {what} of {queue}?",
    "resume": "Resume {what} of {queue}?",
    "open": "Open the breaker of {what}?",
    "close": "Close the breaker of {what}?",
    "cancel-redrive": "Cancel paced redrive {id}?",
}
_BUTTONS = {
    "pause": "Pause",
    "resume": "Resume",
    "open": "Open the breaker",
    "close": "Close the breaker",
    "cancel-redrive": "Cancel the redrive",
}


@get("/queues/{queue:str}/control", include_in_schema=False)
async def control_confirm(request: Request[Any, Any, Any], queue: PathText) -> Template:
    principal, _ = session(request)
    require_operator(principal)
    bounds.check_queue(queue)
    change = _change(request.query_params)
    node = node_of(request)
    held: int | None = None
    more = False
    op: dict[str, Any] | None = None
    if change.op_id is not None:
        try:
            found = await node.admin.paced_redrive(queue, change.op_id)
        except NotFound:
            raise UIError(404, f"queue {queue} has no paced redrive {change.op_id}") from None
        op = {"id": found.id, "done": found.done, "total": found.total, "rate": found.rate}
        op["finished"] = found.finished
    elif change.key is not None:
        held, more = await held_by(node.storage, queue, change.key)
    what = key_label(change.key) if change.key else ""
    return page(
        request,
        "control.html",
        principal=principal,
        queue=queue,
        change=change,
        title=_TITLES[change.do].format(what=what, queue=queue, id=change.op_id),
        button=_BUTTONS[change.do],
        what=what,
        held=held,
        held_more=more,
        op=op,
        capable=node.storage.capabilities().control,
        back_url=queue_url(queue) + "#controls",
    )


@post("/queues/{queue:str}/control", include_in_schema=False, status_code=303)
async def control_act(request: Request[Any, Any, Any], queue: PathText) -> Redirect:
    principal, value = session(request)
    form = await request.form()
    check_csrf(request, principal, value, form.get("csrf"))
    require_operator(principal)
    bounds.check_queue(queue)
    change = _change(form)
    reason = text(form.get("reason"))
    if reason is None:
        raise UIError(422, "give a reason: it is kept in the audit record")
    node = node_of(request)
    admin = node.admin
    actor = principal.actor
    count = 1
    if change.op_id is not None:
        try:
            await admin.paced_redrive(queue, change.op_id)
        except NotFound:
            raise UIError(404, f"queue {queue} has no paced redrive {change.op_id}") from None
        op = await admin.cancel_paced_redrive(queue, change.op_id, actor=actor, reason=reason)
        count = op.done
    elif change.key is not None and change.do in ("pause", "resume"):
        run = admin.pause if change.do == "pause" else admin.resume
        await run(queue, change.key, actor=actor, reason=reason)
    elif change.key is not None:
        await admin.set_breaker(
            queue,
            change.key,
            "open" if change.do == "open" else "close",
            actor=actor,
            reason=reason,
            config=node.breaker_config(queue),
        )
    else:  # pragma: no cover - _change names a key or an id
        raise ValidationError("nothing to act on", field="key")
    target = queue_url(queue, done=change.do, count=str(count))
    return Redirect(target + "#controls", status_code=303)


@get("/workers", include_in_schema=False)
async def workers_page(request: Request[Any, Any, Any]) -> Template:
    principal, _ = session(request)
    node = node_of(request)
    fleet = await fleet_of(node)
    silent = await silent_holdings(node, fleet)
    held: dict[str, list[dict[str, Any]]] = {}
    for task in silent:
        held.setdefault(task["worker"], []).append(task)
    live = [w for w in fleet.workers if w.status == "live"]
    return page(
        request,
        "workers.html",
        principal=principal,
        fleet=fleet,
        held=held,
        silent_count=len(silent),
        live_count=len(live),
        live=True,
    )
