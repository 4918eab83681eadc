"""The SQL of the store: the statement files shipped in the wheel, loaded and compiled.

The files are the only copy of rdq's SQL: the Java binding (``java/``, ``Sql.java``) loads the
very same ones, which its build copies into its jar, and compiles them the same way.

- ``sql/<name>.sql`` is one statement. It names its parameters (``:queue``; a name may occur
  several times, ``::`` is a cast, quoted text is left alone), and :func:`compile_statement`
  turns them into asyncpg's ``$1, $2, …``, keeping the order of the names
  (:meth:`Statement.args` binds keyword values in it). ``--`` comments are dropped.
- ``sql/<name>.part`` is a fragment, put in wherever a statement (or a fragment) says
  ``{name}``. ``{schema}`` (quoted) and ``{channel}`` are the store's own; any other
  ``{name}`` is a slot its caller fills (:meth:`Queries.load`) with fixed text chosen by code
  — a column name, a status, another fragment's ``{name}`` — never with a value.
- ``sql/migrations/NNNN_<name>.sql`` are the numbered migrations, run as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["Queries", "Statement", "compile_statement", "migrations", "render"]

_MIGRATION = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
_SLOT = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_LEXEME = re.compile(
    r"""(?m)^[ \t]*--[^\n]*\n?|'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|::|:([A-Za-z][A-Za-z0-9_]*)"""
)
"""What the loader looks at: comments (a line of its own, or the end of a line), quoted text
and identifiers, casts and named parameters."""
_NESTING = 8
"""How deep fragments may name fragments (a guard against a fragment naming itself)."""


@dataclass(frozen=True, slots=True)
class Statement:
    """A compiled statement: its text with ``$n`` placeholders and the parameter name of each
    ``n``, in order."""

    name: str
    text: str
    params: tuple[str, ...]

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional arguments for ``values`` (one per parameter name, no other)."""
        try:
            args = tuple([values[name] for name in self.params])
        except KeyError as missing:
            raise TypeError(f"{self.name}.sql needs :{missing.args[0]}") from None
        if len(values) != len(self.params):
            unknown = ", ".join(f":{name}" for name in sorted(set(values) - set(self.params)))
            raise TypeError(f"{self.name}.sql has no parameter {unknown}")
        return args


def _uncommented(text: str) -> str:
    """``text`` without its ``--`` comments (a comment line goes with its line break)."""

    def keep(match: re.Match[str]) -> str:
        lexeme = match.group()
        return "" if lexeme.lstrip(" \t").startswith("--") else lexeme

    return _LEXEME.sub(keep, text)


def compile_statement(name: str, text: str) -> Statement:
    """``text`` (fragments filled in) without its comments and with its named parameters as
    ``$1, $2, …``; a name given twice is the same number."""
    numbers: dict[str, int] = {}

    def lexeme(match: re.Match[str]) -> str:
        param = match.group(1)
        if param is None:
            return match.group()
        return f"${numbers.setdefault(param, len(numbers) + 1)}"

    return Statement(name, _LEXEME.sub(lexeme, _uncommented(text)).strip(), tuple(numbers))


@functools.cache
def _file(name: str) -> str | None:
    """``sql/<name>`` without its comments (``None`` if there is none)."""
    node = resources.files("rdq_postgres").joinpath("sql", name)
    return _uncommented(node.read_text(encoding="utf-8")) if node.is_file() else None


def _names(text: str, schema: str, channel: str) -> str:
    return text.replace("{schema}", f'"{schema}"').replace("{channel}", channel)


def render(text: str, schema: str, channel: str, slots: Mapping[str, str]) -> str:
    """``text`` with ``{schema}``, ``{channel}``, the ``slots`` given and every fragment
    (``{name}`` of a ``sql/name.part``) filled in, a fragment's lines indented as its slot
    is; ``LookupError`` for a ``{name}`` that is none of them."""

    def fill(text: str, depth: int) -> str:
        def slot(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "schema":
                return f'"{schema}"'
            if name == "channel":
                return channel
            if depth >= _NESTING:
                raise LookupError(f"fragments nest deeper than {_NESTING} at {{{name}}}")
            value = slots[name] if name in slots else _file(f"{name}.part")
            if value is None:
                raise LookupError(f"no fragment sql/{name}.part and no text for {{{name}}}")
            value = fill(value.strip(), depth + 1)
            indent = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
            return value.replace("\n", "\n" + indent) if indent.isspace() else value

        return _SLOT.sub(slot, text)

    return fill(text, 0)


def migrations(schema: str, channel: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of every migration, in order, rendered for ``schema``."""
    folder = resources.files("rdq_postgres").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.fullmatch(entry.name)
        if match:
            text = _names(entry.read_text(encoding="utf-8"), schema, channel)
            found.append((int(match.group(1)), match.group(2), text))
    return sorted(found)


class Queries:
    """Every statement, compiled for one schema: ``queries.claim`` is ``sql/claim.sql``, and
    :meth:`load` fills a statement's slots."""

    def __init__(self, schema: str, channel: str) -> None:
        self.schema = schema
        self.channel = channel
        self._compiled: dict[tuple[str, tuple[tuple[str, str], ...]], Statement] = {}

    def load(self, name: str, **slots: str) -> Statement:
        """``sql/<name>.sql`` compiled, with ``slots`` (fixed text: a column name, a status,
        a fragment's ``{name}``) filled in. Compiled once per store and set of slots."""
        key = (name, tuple(sorted(slots.items())))
        statement = self._compiled.get(key)
        if statement is None:
            text = _file(f"{name}.sql")
            if text is None:
                raise LookupError(f"no statement sql/{name}.sql")
            rendered = render(text, self.schema, self.channel, slots)
            statement = self._compiled[key] = compile_statement(name, rendered)
        return statement

    def script(self, name: str) -> str:
        """``sql/<name>.sql`` rendered but not compiled: several statements without
        parameters (``migrate_prepare``)."""
        text = _file(f"{name}.sql")
        if text is None:
            raise LookupError(f"no statement sql/{name}.sql")
        return _names(text, self.schema, self.channel)

    def __getattr__(self, name: str) -> Statement:
        if name.startswith("_") or _file(f"{name}.sql") is None:
            raise AttributeError(name)
        statement = self.load(name)
        setattr(self, name, statement)  # the next lookup is a plain attribute
        return statement
