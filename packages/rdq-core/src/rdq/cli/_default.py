"""The ``--storage`` option and the store a command uses when none is named.

The rule is :func:`rdq.storage_url`'s, shared with ``rdq.Client.open()``, ``rdq.SyncClient()``
and the examples: ``--storage URL`` wins, then ``RDQ_STORAGE``, then ``RDQ_STORAGE_URL`` (the
older name); with none of them, the SQLite file ``rdq.db`` in the working directory (created on
first use, schema included), said on standard error.
"""

from __future__ import annotations

import click

from rdq._storage_url import DEFAULT_STORAGE, STORAGE_ENV, storage_url
from rdq.errors import ConfigError

__all__ = ["DEFAULT_STORAGE", "STORAGE_ENV", "chosen_storage", "storage_option"]

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
    try:
        # click has read the environment into ``url`` already: only the default is left.
        return storage_url(url, env={}, say=lambda text: click.echo(text, err=True))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
