"""The SQL of the store, loaded from the ``.sql`` files shipped in the wheel."""

from __future__ import annotations

import functools
import re
from importlib import resources

__all__ = ["Queries", "migrations"]

_MIGRATION = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


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

    @functools.cached_property
    def _all(self) -> dict[str, str]:
        folder = resources.files("rdq_postgres").joinpath("sql")
        return {
            entry.name.removesuffix(".sql"): _render(
                entry.read_text(encoding="utf-8"), self.schema, self.channel
            )
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
