"""The operator console at ``/ui``: server-rendered pages that work without JavaScript, and a
small script (``static/console.js``) that refreshes them in place.

Log in once with a token (``read`` to browse, ``admin`` to act); the node answers with an
HttpOnly, SameSite=Strict session cookie (see :mod:`rdq.server._auth`). Every POST form carries
the session's CSRF token. Redrive (at once or at a pace), purge, cancel and retry now go
through a confirmation page that shows how many tasks would be touched (a dry run) and asks for
a reason; so do pause, resume, breakers opened or closed by hand and a paced redrive's cancel
(with the tasks they hold or let go). All are audited under the token's owner.

- ``_pages``: overview, queue, task and audit pages; ``_search``: the search box;
- ``_actions``: redrive, purge, cancel, retry now; ``_controls``: pauses, breakers, paced
  redrives, and the workers page; ``_exports``: the DLQ downloaded as JSON Lines, and a
  task's payload whole;
- ``_fleet``: what the pages read of flow control and the fleet; ``_charts``: the sparklines
  and bars; ``_paging``: where a paged list is;
- ``_login``: logging in and out; ``_common``: the session, responses, filters.
"""

from litestar import Router

from rdq.server._ui._actions import act, confirm
from rdq.server._ui._common import jinja_filters, ui_error
from rdq.server._ui._controls import control_act, control_confirm, workers_page
from rdq.server._ui._exports import download_payload, export_dlq
from rdq.server._ui._login import login, login_form, logout
from rdq.server._ui._pages import audit_page, overview, queue_page, task_page
from rdq.server._ui._search import search

__all__ = ["jinja_filters", "ui_router"]

ui_router = Router(
    path="/ui",
    route_handlers=[
        login_form,
        login,
        logout,
        overview,
        queue_page,
        task_page,
        search,
        audit_page,
        confirm,
        act,
        control_confirm,
        control_act,
        workers_page,
        export_dlq,
        download_payload,
    ],
    exception_handlers={Exception: ui_error},
    include_in_schema=False,
)
