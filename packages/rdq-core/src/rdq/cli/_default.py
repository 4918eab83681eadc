"""The ``--storage`` option and the store a command uses when none is named.

The rule is :func:`rdq.storage_url`'s, shared with ``rdq.Client.open()``, ``rdq.SyncClient()``
and the examples: ``--storage URL`` wins, then ``RDQ_STORAGE``, then ``RDQ_STORAGE_URL`` (the
older name); with none of them, the SQLite file ``rdq.db`` in the working directory (created on
first use, schema included), said on standard error.

A command that only reads or acts on what a store holds (``rdq stats``, ``rdq dlq …``,
``rdq tasks …``, ``rdq audit``, ``rdq breakers``, ``rdq workers``, …) never creates one: a
SQLite file that is not there is refused, naming the path and ``rdq migrate`` (a path one
letter off, or the default run from another directory, would otherwise answer "nothing
there" from a new empty store). The commands that make a store — ``rdq migrate``, ``rdq
worker``, ``rdq server``, submits — still create the file.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

import click

from rdq._storage_url import DEFAULT_STORAGE, STORAGE_ENV, storage_url
from rdq.errors import ConfigError

__all__ = [
    "DEFAULT_STORAGE",
    "STORAGE_ENV",
    "chosen_storage",
    "sqlite_file",
    "storage_option",
]

storage_option = click.option(
    "--storage",
    "storage_url",
    envvar=list(STORAGE_ENV),
    default=None,
    metavar="URL",
    help=f"Storage URL (env RDQ_STORAGE), e.g. postgresql://user@host/db. "
    f"Default: {DEFAULT_STORAGE} (the file rdq.db in the working directory).",
)


def chosen_storage(url: str | None, *, existing: bool = False) -> str:
    """``url`` if one was named, else :data:`DEFAULT_STORAGE`, announced on standard error.

    With ``existing``, a SQLite file that is not there is refused (``click.ClickException``
    naming its path and ``rdq migrate``) rather than created. Raises ``click.ClickException``
    too when the default is needed but rdq-sqlite is missing."""
    try:
        # click has read the environment into ``url`` already: only the default is left.
        chosen = storage_url(url, env={}, say=lambda text: click.echo(text, err=True))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    path = sqlite_file(chosen)
    if path is None:
        return chosen
    if url and not os.path.isabs(_named_path(chosen)):
        click.echo(f"rdq: {chosen} is the file {path}", err=True)
    if existing and not os.path.exists(path):
        named = "" if url else " (no storage named: the default, rdq.db in the working directory)"
        raise click.ClickException(
            f"no store at {path}{named}: nothing was read or created. Check the path "
            f"(--storage or RDQ_STORAGE) and the working directory; a new store is made by "
            f"rdq migrate --storage {chosen} (or by the first rdq worker, rdq server or submit)"
        )
    return chosen


def sqlite_file(url: str) -> str | None:
    """The absolute path of the file a ``sqlite:`` URL names; ``None`` for another scheme or
    an in-memory database. The rule is rdq-sqlite's (``rdq_sqlite.parse_url``), as in
    SQLAlchemy: ``sqlite:///rdq.db`` is relative to the working directory, ``sqlite:////abs``
    absolute; repeated here so that rdq-core reads a URL without importing a backend."""
    name = _named_path(url)
    if not name or name == ":memory:":
        return None
    return os.path.abspath(name)


def _named_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc:
        return ""
    return unquote(parts.path)[1:]
