"""Where tasks go before they leave the store: the :class:`Archive` protocol, and the archive
a setting names (a directory, or a user's sink by import path).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from rdq.errors import ConfigError
from rdq.retention._files import DEFAULT_ARCHIVE_DIR, DEFAULT_MAX_FILE_BYTES, DirectoryArchive
from rdq.spi import Envelope

__all__ = ["ARCHIVE_ENV", "Archive", "FunctionArchive", "archive_from", "load_sink"]

ARCHIVE_ENV = "RDQ_ARCHIVE"
"""The archive when no setting names one: a directory, or ``module:attribute`` (a sink)."""
_SINK = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@runtime_checkable
class Archive(Protocol):
    """Where finished tasks are written before they leave the store.

    ``write`` must return only once every task it was given is durable there: the caller
    deletes them from the store right after. It returns where they went, in words (a file, a
    bucket and key) for logs and the console. Raising refuses the batch, and nothing of it is
    deleted. A task may be written more than once (a process killed between the write and the
    deletion writes it again next time): a reader keeps one per ``id`` and status time."""

    async def write(self, tasks: Sequence[Envelope]) -> str: ...


class FunctionArchive:
    """A function as an :class:`Archive`: ``write(tasks)``, plain (run in a thread) or
    ``async``, returning where the tasks went (or ``None``: its name is said)."""

    def __init__(self, function: Callable[[Sequence[Envelope]], Any]) -> None:
        self.function = function
        self.where = getattr(function, "__qualname__", repr(function))

    async def write(self, tasks: Sequence[Envelope]) -> str:
        if inspect.iscoroutinefunction(self.function):
            said = await self.function(tasks)
        else:
            said = await asyncio.to_thread(self.function, tasks)
        return str(said) if said is not None else self.where


def load_sink(spec: str, key: str = "archive.sink") -> Archive:
    """The archive ``module:attribute`` names: an object with ``write``, a class or factory
    that builds one when called without arguments, or a plain function of the tasks.
    ``ConfigError`` naming ``key`` when it cannot be imported or is none of those."""
    module_name, _, attribute = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import the archive sink {spec!r}: {exc}", key=key) from None
    if isinstance(found, type):
        found = found()
    if hasattr(found, "write") and callable(found.write):
        return found  # type: ignore[no-any-return]
    if callable(found):
        made = None
        if not inspect.signature(found).parameters:  # a factory
            made = found()
        if made is not None and hasattr(made, "write"):
            return made  # type: ignore[no-any-return]
        return FunctionArchive(found)
    raise ConfigError(f"{spec!r} is not an archive (it has no write)", key=key)


def archive_from(
    spec: str | os.PathLike[str] | Archive | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    compress: bool = True,
) -> Archive:
    """The archive ``spec`` names: an :class:`Archive` as it is, ``module:attribute`` (a sink,
    see :func:`load_sink`), or a directory; ``None`` reads ``RDQ_ARCHIVE`` and defaults to the
    directory ``rdq-archive``."""
    if spec is None:
        spec = os.environ.get(ARCHIVE_ENV) or DEFAULT_ARCHIVE_DIR
    if not isinstance(spec, str | os.PathLike):
        if not hasattr(spec, "write"):
            raise ConfigError("must be a directory, module:attribute or an archive", "archive")
        return spec
    text = os.fspath(spec)
    if _SINK.match(text) and not os.path.exists(text):
        return load_sink(text)
    return DirectoryArchive(text, max_file_bytes=max_file_bytes, compress=compress)
