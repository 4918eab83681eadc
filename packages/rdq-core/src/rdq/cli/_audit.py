"""``rdq audit``: read the audit trail of every operator action (and of breakers' own)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, get_args

import click

from rdq.audit import Action
from rdq.cli._common import echo_json, json_option, run_async
from rdq.cli._options import AWARE, open_target, target_options
from rdq.cli._render import print_audit
from rdq.cli._targets import AuditQuery
from rdq.spi import AuditFilter


@click.command()
@click.option("--queue", help="Only actions on this queue.")
@click.option("--action", type=click.Choice(list(get_args(Action))), help="Only these.")
@click.option("--actor", help="Only actions by this actor (a token's owner, or user@host).")
@click.option("--after", type=AWARE, metavar="TIME", help="At or after TIME (RFC 3339).")
@click.option("--before", type=AWARE, metavar="TIME", help="Before TIME (RFC 3339).")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Per page."
)
@click.option("--cursor", help="Continue with older entries from this cursor.")
@click.option("--all", "all_pages", is_flag=True, help="Follow cursors to the oldest entry.")
@target_options
@json_option
@run_async
async def audit(
    queue: str | None,
    action: str | None,
    actor: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
    cursor: str | None,
    all_pages: bool,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show who redrove, purged or cancelled what, when and why (newest first). Every node
    and every command on the same store writes to this one trail."""
    selected = AuditFilter(queue=queue, action=action, actor=actor, after=after, before=before)
    entries: list[dict[str, Any]] = []
    async with open_target(storage_url, server_url, token) as target:
        while True:
            query = AuditQuery(selected if selected != AuditFilter() else None, limit, cursor)
            page, cursor = await target.audit(query)
            entries.extend(page)
            if not all_pages or cursor is None:
                break
    if as_json:
        echo_json({"entries": entries, "next_cursor": cursor})
    else:
        print_audit(entries, cursor)
