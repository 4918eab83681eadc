"""The archive as files: JSON Lines, one task per line as ``GET /v1/tasks/{id}`` shows it (every
attempt included), written by :class:`DirectoryArchive` and read back by :func:`read_tasks`.

Why gzip *members*: a batch is appended to the current file as one complete gzip member
(``gzip.compress`` of its lines) and fsynced before :meth:`DirectoryArchive.write` returns,
because the caller deletes the tasks from the store right after. A gzip file of several members
is a valid gzip file (``gzip.open``, ``zcat`` read it whole), so files stay ordinary; and a
process killed halfway through a write leaves at most a truncated last member, whose tasks were
never deleted (the write had not returned) and are archived again by the next round.
:func:`read_tasks` reads every complete member and says where a file is cut short. The price is
a little compression lost at each batch's start (a batch is up to a few hundred tasks).

Files rotate: one file per writer (host and process) and UTC day, a new one once the current one
passes ``max_file_bytes``; none is ever rewritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rdq.errors import ConfigError, ValidationError
from rdq.spi import Envelope, decode_envelope, encode_envelope

__all__ = [
    "DEFAULT_ARCHIVE_DIR",
    "DEFAULT_MAX_FILE_BYTES",
    "DirectoryArchive",
    "ExportFile",
    "Problem",
    "read_tasks",
    "write_tasks",
]

DEFAULT_ARCHIVE_DIR = "rdq-archive"
"""Where the archive goes when nothing says otherwise (relative to the working directory)."""
DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
"""An archive file is rotated once it holds this many bytes (compressed)."""
_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz")


def _lines(tasks: Iterable[Envelope]) -> bytes:
    return b"".join(encode_envelope(task) + b"\n" for task in tasks)


def _safe(name: str) -> str:
    """A queue name as a directory name (queue names hold ``: . _ -`` besides letters)."""
    return name.replace(":", "_")


def _sync_directory(path: Path) -> None:
    """Make a new entry of the directory ``path`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class _Current:
    path: Path
    day: str
    size: int


@dataclass
class DirectoryArchive:
    """Appends tasks to JSON Lines files under ``directory``:
    ``<directory>/<queue>/<YYYY-MM-DD>/<host>-<pid>-<n>.jsonl.gz`` (``.jsonl`` without
    ``compress``). Each :meth:`write` is durable (fsynced, file and directory) when it returns.
    Safe to share between threads; processes each write files of their own."""

    directory: Path | str = DEFAULT_ARCHIVE_DIR
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    compress: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _files: dict[str, _Current] = field(default_factory=dict, repr=False)
    _sequence: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        if not isinstance(self.max_file_bytes, int) or self.max_file_bytes < 1024:
            raise ConfigError("must be an integer of at least 1024", key="archive.max_file_bytes")

    @property
    def where(self) -> str:
        """The archive in words (``directory /var/lib/rdq/archive``)."""
        return f"directory {self.directory}"

    async def write(self, tasks: Sequence[Envelope]) -> str:
        """Append ``tasks`` (any queues) durably; return where they went (the last file)."""
        by_queue: dict[str, list[Envelope]] = {}
        for task in tasks:
            by_queue.setdefault(task.queue, []).append(task)
        where = self.where
        for queue, batch in by_queue.items():
            where = await asyncio.to_thread(self._append, queue, _lines(batch))
        return where

    def _append(self, queue: str, lines: bytes) -> str:
        data = gzip.compress(lines, mtime=0) if self.compress else lines
        with self._lock:
            current = self._file_for(queue, len(data))
            fd = os.open(current.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if current.size == 0:
                _sync_directory(current.path.parent)
            current.size += len(data)
            return str(current.path)

    def _file_for(self, queue: str, adding: int) -> _Current:
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        current = self._files.get(queue)
        if (
            current is not None
            and current.day == day
            and (current.size == 0 or current.size + adding <= self.max_file_bytes)
        ):
            return current
        folder = Path(self.directory) / _safe(queue) / day
        if not folder.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _sync_directory(folder.parent)
            _sync_directory(folder.parent.parent)
        suffix = ".jsonl.gz" if self.compress else ".jsonl"
        host = _safe(socket.gethostname())
        while True:
            self._sequence += 1
            name = f"{host}-{os.getpid()}-{datetime.now(UTC):%H%M%S}-{self._sequence}{suffix}"
            path = folder / name
            if not path.exists():
                break
        current = self._files[queue] = _Current(path, day, 0)
        return current


@dataclass(frozen=True)
class Problem:
    """A part of an archive or export file that could not be read: where, and why."""

    path: str
    line: int | None
    error: str

    @property
    def text(self) -> str:
        at = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{at}: {self.error}"


def _files_of(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES))
    return [path]


def _gzip_members(data: bytes) -> Iterator[bytes | str]:
    """Each complete member's bytes, then (if the data ends inside one) the reason."""
    while data:
        reader = zlib.decompressobj(wbits=31)
        try:
            out = reader.decompress(data)
        except zlib.error as exc:
            yield f"not gzip data past this point ({exc})"
            return
        if not reader.eof:
            if out:
                yield out.rpartition(b"\n")[0] + b"\n" if b"\n" in out else b""
            yield "cut short in its last batch (its writer stopped while writing it)"
            return
        yield out
        data = reader.unused_data


def read_tasks(
    source: str | os.PathLike[str], problems: list[Problem] | None = None
) -> Iterator[Envelope]:
    """Every task in an archive or export: a file (``.jsonl``, or gzip-compressed whatever its
    name) or a directory (every such file under it, by name). ``-`` reads standard input. A
    line that is not a task, or a gzip file cut short, is reported in ``problems`` (when given,
    else it raises ``ValidationError``) and the reading goes on."""

    def report(problem: Problem) -> None:
        if problems is None:
            raise ValidationError(problem.text, field="file")
        problems.append(problem)

    if str(source) == "-":
        import sys

        yield from _tasks_of("-", sys.stdin.buffer.read(), report)
        return
    path = Path(source)
    if not path.exists():
        raise ValidationError(f"{path} does not exist", field="file")
    for file in _files_of(path):
        yield from _tasks_of(str(file), file.read_bytes(), report)


def _tasks_of(name: str, data: bytes, report: Callable[[Problem], None]) -> Iterator[Envelope]:
    chunks: Iterable[bytes | str] = _gzip_members(data) if data[:2] == b"\x1f\x8b" else [data]
    line_no = 0
    for chunk in chunks:
        if isinstance(chunk, str):
            report(Problem(name, None, chunk))
            continue
        for line in chunk.splitlines():
            line_no += 1
            if not line.strip():
                continue
            try:
                yield decode_envelope(line)
            except ValidationError as exc:
                report(Problem(name, line_no, f"not a task: {exc}"))


class ExportFile:
    """A JSON Lines file being written: tasks are added page by page (:meth:`add`), and the file
    appears under its name only when :meth:`finish` is called — written beside it as
    ``<name>.partial`` and moved into place, so an export cut short never looks whole.
    gzip-compressed when the name ends in ``.gz``; ``-`` writes standard output."""

    def __init__(self, target: str | os.PathLike[str]) -> None:
        self.count = 0
        self._stdout = str(target) == "-"
        self._path = Path(target)
        self._partial = self._path.with_name(self._path.name + ".partial")
        if self._stdout:
            import sys

            self._out = sys.stdout.buffer
        elif self._path.name.endswith(".gz"):
            self._out = gzip.open(self._partial, "wb")  # noqa: SIM115 - closed by finish/abort
        else:
            self._out = open(self._partial, "wb")  # noqa: SIM115 - closed by finish/abort

    def add(self, tasks: Iterable[Envelope]) -> None:
        for task in tasks:
            self._out.write(encode_envelope(task) + b"\n")
            self.count += 1

    def finish(self) -> int:
        """Put the file in place (flushed and synced); return how many tasks it holds."""
        if self._stdout:
            self._out.flush()
            return self.count
        self._out.close()
        with open(self._partial, "rb") as written:
            os.fsync(written.fileno())
        os.replace(self._partial, self._path)
        return self.count

    def abort(self) -> None:
        """Leave nothing behind."""
        if self._stdout:
            return
        with contextlib.suppress(OSError):
            self._out.close()
        with contextlib.suppress(OSError):
            self._partial.unlink()


def write_tasks(target: str | os.PathLike[str], tasks: Iterable[Envelope]) -> int:
    """Write ``tasks`` to the JSON Lines file ``target`` at once (see :class:`ExportFile`);
    return how many."""
    export = ExportFile(target)
    try:
        export.add(tasks)
    except BaseException:
        export.abort()
        raise
    return export.finish()
