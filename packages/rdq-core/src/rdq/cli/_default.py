"""The store a command uses when none is named: ``sqlite:///./rdq.db``.

``--storage URL`` wins, then ``RDQ_STORAGE``, then ``RDQ_STORAGE_URL`` (the older name); with
none of them, a command uses the SQLite file ``rdq.db`` in the working directory (created on
first use, schema included) and says so on standard error.
"""

from __future__ import annotations

import os

import click

__all__ = ["DEFAULT_STORAGE", "STORAGE_ENV", "chosen_storage", "storage_option"]

DEFAULT_STORAGE = "sqlite:///./rdq.db"
"""The store used when no storage is named: a durable file in the working directory."""

STORAGE_ENV = ("RDQ_STORAGE", "RDQ_STORAGE_URL")
"""The environment variables naming the store, the first set one wins."""

storage_option = click.option(
    "--storage",
    "storage_url",
    envvar=list(STORAGE_ENV),
    default=None,
    metavar="URL",
    help=f"Storage URL (env RDQ_STORAGE), e.g. postgresql://user@host/db. "
    f"Default: {DEFAULT_STORAGE} (the file rdq.db in the working directory).",
)


def chosen_storage(url: str | None) -> str:
    """``url`` if one was named, else :data:`DEFAULT_STORAGE`, announced on standard error.

    Raises ``click.ClickException`` when the default is needed but rdq-sqlite is missing."""
    if url:
        return url
    from rdq.plugins import plugins

    if "sqlite" not in plugins().schemes():
        raise click.ClickException(
            f"no storage named, and the default ({DEFAULT_STORAGE}) needs rdq-sqlite: "
            "pip install rdq-sqlite, or name a store with --storage URL or RDQ_STORAGE"
        )
    path = os.path.abspath("rdq.db")
    click.echo(
        f"rdq: no storage named (--storage or RDQ_STORAGE); using {DEFAULT_STORAGE} ({path})",
        err=True,
    )
    return DEFAULT_STORAGE
