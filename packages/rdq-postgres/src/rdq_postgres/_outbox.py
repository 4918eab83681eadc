"""Running the store's statements on a connection the application owns, inside its
transaction (``PostgresStorage.enqueue_in``): an asyncpg connection, a psycopg 3
``AsyncConnection``, or a SQLAlchemy ``AsyncConnection`` / ``AsyncSession`` (on asyncpg or
psycopg). psycopg and SQLAlchemy are imported only when such a connection is given (extras
``rdq-postgres[psycopg]``, ``rdq-postgres[sqlalchemy]``)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import asyncpg
import asyncpg.pool

from rdq.errors import RdqError, StorageError, StorageUnavailable, ValidationError
from rdq_postgres._errors import translate_errors

__all__ = ["Runner", "driver_errors", "runner_for"]

_PLACEHOLDER = re.compile(r"\$(\d+)")


class Runner(Protocol):
    """Runs one statement with ``$n`` placeholders on the application's connection."""

    async def fetchrow(self, query: str, args: Sequence[Any]) -> Mapping[str, Any]: ...

    async def execute(self, query: str, args: Sequence[Any]) -> None: ...


class _Asyncpg:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def fetchrow(self, query: str, args: Sequence[Any]) -> Mapping[str, Any]:
        row = await self._conn.fetchrow(query, *args)
        return dict(row)

    async def execute(self, query: str, args: Sequence[Any]) -> None:
        await self._conn.execute(query, *args)


def _named(query: str, args: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``$n`` placeholders as ``%(pn)s`` (psycopg's named style; a name may repeat)."""
    return _PLACEHOLDER.sub(r"%(p\1)s", query), {f"p{n}": v for n, v in enumerate(args, 1)}


class _Psycopg:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def fetchrow(self, query: str, args: Sequence[Any]) -> Mapping[str, Any]:
        from psycopg.rows import dict_row

        text, params = _named(query, args)
        async with self._conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(text, params)
            row: dict[str, Any] | None = await cursor.fetchone()
        if row is None:
            raise ValidationError("the statement returned no row", field="connection")
        return row

    async def execute(self, query: str, args: Sequence[Any]) -> None:
        text, params = _named(query, args)
        async with self._conn.cursor() as cursor:
            await cursor.execute(text, params)


class _SQLAlchemy:
    """Through SQLAlchemy's own connection (``exec_driver_sql``), so the statement joins the
    transaction SQLAlchemy began, in the driver's parameter style."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._style = conn.dialect.paramstyle

    def _render(self, query: str, args: Sequence[Any]) -> tuple[str, Any]:
        if self._style == "numeric_dollar":
            return query, tuple(args)
        if self._style == "pyformat":
            return _named(query, args)
        raise ValidationError(
            f"SQLAlchemy dialect {self._conn.dialect.name}+{self._conn.dialect.driver} is not "
            "supported: use postgresql+asyncpg or postgresql+psycopg",
            field="connection",
        )

    async def fetchrow(self, query: str, args: Sequence[Any]) -> Mapping[str, Any]:
        text, params = self._render(query, args)
        result = await self._conn.exec_driver_sql(text, params)
        row = result.mappings().first()
        if row is None:
            raise ValidationError("the statement returned no row", field="connection")
        return dict(row)

    async def execute(self, query: str, args: Sequence[Any]) -> None:
        text, params = self._render(query, args)
        await self._conn.exec_driver_sql(text, params)


async def runner_for(connection: object) -> Runner:
    """The runner for an application's connection; ``ValidationError`` (field
    ``connection``) for anything else. A SQLAlchemy ``AsyncSession`` lends its connection
    (beginning its transaction if it has none yet)."""
    if isinstance(connection, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        return _Asyncpg(connection)
    module = type(connection).__module__
    if module.startswith("psycopg") and "psycopg" in sys.modules:
        import psycopg

        if isinstance(connection, psycopg.AsyncConnection):
            return _Psycopg(connection)
    if module.startswith("sqlalchemy") and "sqlalchemy" in sys.modules:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(connection, AsyncSession):
            connection = await connection.connection()
        if isinstance(connection, AsyncConnection):
            if connection.dialect.name != "postgresql":
                raise ValidationError(
                    f"must be a PostgreSQL connection, not {connection.dialect.name}",
                    field="connection",
                )
            return _SQLAlchemy(connection)
    raise ValidationError(
        "must be an asyncpg Connection, a psycopg AsyncConnection, or a SQLAlchemy "
        f"AsyncConnection or AsyncSession (got {type(connection).__name__})",
        field="connection",
    )


@contextlib.contextmanager
def driver_errors(endpoint: str) -> Iterator[None]:
    """asyncpg's errors as ``translate_errors`` maps them; psycopg's and SQLAlchemy's as
    ``StorageUnavailable`` (a lost or refused connection) or ``StorageError``."""
    with translate_errors(endpoint):
        try:
            yield
        except (RdqError, asyncpg.PostgresError, asyncpg.InterfaceError):
            raise
        except Exception as exc:
            mapped = _foreign_error(exc)
            if mapped is None:
                raise
            raise mapped from None


def _foreign_error(exc: Exception) -> RdqError | None:
    """The rdq error for a psycopg or SQLAlchemy exception (``None`` for any other)."""
    cause: BaseException = exc
    lost = False
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import DBAPIError

        if isinstance(exc, DBAPIError):
            cause = exc.orig or exc
            lost = exc.connection_invalidated
    if "psycopg" in sys.modules:
        import psycopg

        if isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
            lost = True
        elif not isinstance(cause, psycopg.Error) and cause is exc:
            return None
    elif cause is exc:
        return None
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    reason = f"{type(cause).__name__}: {text}"
    if lost:
        return StorageUnavailable(f"PostgreSQL is unavailable on the given connection: {reason}")
    return StorageError(f"PostgreSQL, on the given connection: {reason}")
