"""The SQL of the store, loaded from the files shipped in the wheel.

``sql/<name>.sql`` is one statement (an attribute of :class:`Queries`); ``sql/<name>.part`` is a
fragment: ``{queue_stats}`` in a statement is replaced by ``queue_stats.part``, and
``list_tasks.part`` / ``list_audit.part`` are templates rendered per status and page position.
``sql/migrations/NNNN_<name>.sql`` are the numbered migrations."""

from __future__ import annotations

import functools
import re
from importlib import resources

from rdq.spi import Status

__all__ = ["Queries", "migrations"]

_MIGRATION = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")

STATUS_TIME = {
    # PENDING and IN_FLIGHT are listed by due_at, which is next_attempt_at and
    # lease_expires_at respectively (and is what task_live_idx holds).
    Status.PENDING: "due_at",
    Status.IN_FLIGHT: "due_at",
    Status.SUCCEEDED: "completed_at",
    Status.DEAD: "dead_lettered_at",
    Status.CANCELLED: "cancelled_at",
}
"""The column a status's tasks are listed (and paged) by."""


def _read(*path: str) -> str:
    node = resources.files("rdq_postgres").joinpath("sql", *path)
    return node.read_text(encoding="utf-8")


def _render(text: str, schema: str, channel: str) -> str:
    return text.replace("{schema}", f'"{schema}"').replace("{channel}", channel)


def migrations(schema: str, channel: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of every migration, in order, rendered for ``schema``."""
    folder = resources.files("rdq_postgres").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            text = _render(entry.read_text(encoding="utf-8"), schema, channel)
            found.append((int(match.group(1)), match.group(2), text))
    return sorted(found)


class Queries:
    """Every statement, rendered for one schema (attribute per ``.sql`` file)."""

    def __init__(self, schema: str, channel: str) -> None:
        self.schema = schema
        self.channel = channel

    def _part(self, name: str) -> str:
        return _render(_read(f"{name}.part"), self.schema, self.channel)

    @functools.cached_property
    def _all(self) -> dict[str, str]:
        folder = resources.files("rdq_postgres").joinpath("sql")
        queue_stats = self._part("queue_stats")
        return {
            entry.name.removesuffix(".sql"): _render(
                entry.read_text(encoding="utf-8"), self.schema, self.channel
            ).replace("{queue_stats}", queue_stats)
            for entry in folder.iterdir()
            if entry.name.endswith(".sql")
        }

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._all[name]
        except KeyError:
            raise AttributeError(name) from None

    @functools.cache  # noqa: B019 - a handful of variants per store, kept as long as it lives
    def list_tasks(self, status: Status, *, after: bool) -> str:
        """The page statement for ``status``: the first page, or the page after the cursor
        ``($8, $9)`` when ``after``."""
        at = STATUS_TIME[status]
        keyset = f"AND ({at}, id) > ($8::timestamptz, $9::text)" if after else ""
        return (
            self._part("list_tasks")
            .replace("{status}", status.value)
            .replace("{at}", at)
            .replace("{keyset}", keyset)
            .replace("{after}", " after the cursor ($8, $9)" if after else "")
        )

    @functools.cache  # noqa: B019
    def list_audit(self, *, after: bool) -> str:
        """The audit page statement: the first page, or the page after the cursor ``($7, $8)``
        (older entries) when ``after``."""
        keyset = "AND (time, id) < ($7::timestamptz, $8::text)" if after else ""
        return (
            self._part("list_audit")
            .replace("{keyset}", keyset)
            .replace("{after}", " after the cursor ($7, $8)" if after else "")
        )
