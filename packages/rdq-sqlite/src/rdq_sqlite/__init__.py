"""SQLite storage for rdq: a durable embedded store on one file.

``sqlite:///rdq.db`` (relative to the working directory), ``sqlite:////abs/path/rdq.db`` or
``sqlite:///:memory:``; see :class:`SqliteConfig` for the URL options and docs/sqlite.md for
durability, the clock and how several processes share one file.
"""

from rdq_sqlite._store import SqliteStorage
from rdq_sqlite._url import SqliteConfig, parse_url

__all__ = ["SqliteConfig", "SqliteStorage", "parse_url"]
