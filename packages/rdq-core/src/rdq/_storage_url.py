"""Which store a program uses when its code names none: one rule for every ``rdq`` command,
``rdq server``, ``rdq.Client.open()``, ``rdq.SyncClient()`` and the examples.

``--storage URL`` (or a URL in code) wins, then ``RDQ_STORAGE``, then ``RDQ_STORAGE_URL`` (the
older name); with none of them, the SQLite file ``rdq.db`` in the working directory (created on
first use, schema included), said on standard error. Where rdq-sqlite is not installed, the
caller either gets a :class:`~rdq.errors.ConfigError` saying what to set, or — when it asked
for it (``or_memory``: the examples) — ``memory://``, said on standard error as loudly as it
matters: whatever is stored there is gone when the process exits.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from rdq.errors import ConfigError

__all__ = [
    "DEFAULT_STORAGE",
    "MEMORY",
    "STORAGE_ENV",
    "named_storage",
    "storage_url",
]

DEFAULT_STORAGE = "sqlite:///./rdq.db"
"""The store used when none is named: a durable file in the working directory."""
MEMORY = "memory://"
STORAGE_ENV = ("RDQ_STORAGE", "RDQ_STORAGE_URL")
"""The environment variables naming the store, the first set one wins."""


def named_storage(env: Mapping[str, str] | None = None) -> str | None:
    """The store ``RDQ_STORAGE`` (or the older ``RDQ_STORAGE_URL``) names, else None."""
    env = os.environ if env is None else env
    return next((env[name] for name in STORAGE_ENV if env.get(name)), None)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def storage_url(
    url: str | None = None,
    *,
    or_memory: bool = False,
    env: Mapping[str, str] | None = None,
    say: Callable[[str], None] = _say,
) -> str:
    """``url`` if given, else the store the environment names, else :data:`DEFAULT_STORAGE`
    (said with ``say``, standard error by default). Without rdq-sqlite that default is not
    there: ``memory://`` when ``or_memory`` (said loudly), else ``ConfigError`` naming what
    to set."""
    chosen = url or named_storage(env)
    if chosen:
        return chosen
    from rdq.plugins import plugins

    if "sqlite" in plugins().schemes():
        path = os.path.abspath("rdq.db")
        say(f"rdq: no storage named (--storage or RDQ_STORAGE); using {DEFAULT_STORAGE} ({path})")
        return DEFAULT_STORAGE
    if or_memory:
        say(
            "rdq: no storage named (RDQ_STORAGE) and rdq-sqlite is not installed: using "
            "memory:// — everything stored there is GONE when this process exits; set "
            "RDQ_STORAGE (for example RDQ_STORAGE=sqlite:///rdq.db) to keep it"
        )
        return MEMORY
    raise ConfigError(
        f"no storage named, and the default ({DEFAULT_STORAGE}) needs rdq-sqlite: "
        "pip install rdq-sqlite (from a checkout: pip install ./packages/rdq-sqlite), "
        "or name a store with --storage URL or RDQ_STORAGE",
        key="storage",
    )
