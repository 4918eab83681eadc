"""``rdq migrate``: create or upgrade the schema of a store, and say what it did."""

from __future__ import annotations

import click

from rdq.cli._common import run_async, storage_option
from rdq.cli._default import chosen_storage
from rdq.plugins import open_storage


@click.command()
@storage_option
@run_async
async def migrate(storage_url: str | None) -> None:
    """Create or upgrade the storage schema (idempotent; safe to run from several processes)."""
    async with open_storage(chosen_storage(storage_url)) as storage:
        applied = await storage.migrate()
    if applied is None:
        click.echo("migrated (this store does not say which steps it applied)")
    elif not applied:
        click.echo("the schema was already up to date: nothing applied")
    else:
        click.echo(f"applied {len(applied)} migration(s): {', '.join(applied)}")
        click.echo("the schema is now up to date")
