"""The store's SQL, loaded from the ``.sql`` files shipped in the wheel.

``sql/NAME.sql`` is the statement ``SQL.NAME``. Placeholders in a file stand for fragments
several statements share: ``{columns}`` and ``{listed_columns}`` (the column lists of
:mod:`rdq_sqlite._codec`), ``{append_attempt}`` (``attempts`` with ``:attempt`` appended, or
left as stored when the stored value is not a JSON array), ``{filter}`` (a DLQ or task
filter on ``:error_type``, ``:handler_ref`` and the status time range ``:lo`` .. ``:hi``) and
``{controlled}`` (whether a claim of ``:queue`` goes through its controls).
``sql/migrations/NNNN_name.sql`` are the numbered migrations, applied in order by
:mod:`rdq_sqlite._migrate`.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from rdq_sqlite._codec import COLUMNS, LISTED_COLUMNS

__all__ = ["SQL", "migrations"]

_MIGRATION = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


_FRAGMENTS = {
    "{columns}": COLUMNS,
    "{listed_columns}": LISTED_COLUMNS,
    # A corrupt attempts value is kept as it was stored, for inspection (the attempt is not
    # recorded in it; attempt_count and last_error_type still are).
    "{append_attempt}": (
        "CASE WHEN NOT json_valid(attempts) THEN attempts "
        "WHEN json_type(attempts) <> 'array' THEN attempts "
        "ELSE json_insert(attempts, '$[#]', json(:attempt)) END"
    ),
    # Whether a claim of :queue goes through its controls: a control record, or tasks a claim
    # held back (one seek each, of the control table's key and of task_held).
    "{controlled}": (
        "(EXISTS (SELECT 1 FROM control WHERE queue = :queue) "
        "OR EXISTS (SELECT 1 FROM task WHERE queue = :queue "
        "AND held IS NOT NULL AND due_at IS NOT NULL))"
    ),
    "{filter}": (
        "(:error_type IS NULL OR last_error_type = :error_type) "
        "AND (:handler_ref IS NULL OR handler_ref = :handler_ref) "
        "AND status_at >= :lo AND status_at < :hi"
    ),
}


def _render(text: str) -> str:
    for placeholder, fragment in _FRAGMENTS.items():
        text = text.replace(placeholder, fragment)
    return text


@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """``(version, name, sql)`` of every migration, in order."""
    folder = resources.files("rdq_sqlite").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    return tuple(found)


class _Statements:
    """Every statement, one attribute per ``.sql`` file (read once, on first use)."""

    @functools.cached_property
    def _all(self) -> dict[str, str]:
        folder = resources.files("rdq_sqlite").joinpath("sql")
        return {
            entry.name.removesuffix(".sql"): _render(entry.read_text(encoding="utf-8"))
            for entry in folder.iterdir()
            if entry.name.endswith(".sql")
        }

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._all[name]
        except KeyError:
            raise AttributeError(f"no statement sql/{name}.sql") from None


SQL = _Statements()
