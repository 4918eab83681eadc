"""Where payloads too big for a row live: a :class:`BlobStore` keeps bytes under the SHA-256 of
their content, written durably and whole, with a time of last use that the sweep reads.

:class:`DirectoryBlobStore` keeps them as files of a directory (the default);
:class:`FsspecBlobStore` in any filesystem `fsspec <https://filesystem-spec.readthedocs.io>`_
reaches (``s3://bucket/rdq-blobs`` with ``s3fs`` installed, ``gcs://``, ``abfs://``, an SFTP
server, …) — fsspec is the well-kept library every data tool in Python uses for this, so rdq
writes no client of its own. A blob is written beside its name and moved into place (a
directory) or written in one request (an object store), so a reader never sees half of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rdq.errors import ConfigError, PayloadMissing

__all__ = ["BlobStore", "DirectoryBlobStore", "FsspecBlobStore"]


@runtime_checkable
class BlobStore(Protocol):
    """Bytes by the hex SHA-256 of their content (``digest``).

    ``put`` returns only once the blob is durable, and marks it used now whether it was there
    or not; ``get`` raises :class:`~rdq.errors.PayloadMissing` for a blob that is not there;
    ``used`` lists every blob with the time (seconds since the epoch) it was last put;
    ``delete_unused`` deletes a blob only if it was not put since ``before`` (False when it
    was, or was gone)."""

    where: str

    async def put(self, digest: str, data: bytes) -> None: ...

    async def get(self, digest: str) -> bytes: ...

    async def exists(self, digest: str) -> bool: ...

    async def used(self) -> list[tuple[str, float]]: ...

    async def delete_unused(self, digest: str, before: float) -> bool: ...


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class DirectoryBlobStore:
    """Blobs as files: ``<directory>/sha256/<ab>/<cd>/<digest>``. A put writes
    ``<name>.<random>.partial``, fsyncs it, renames it into place and fsyncs the directory;
    a put of a blob already there sets its modification time (its time of last use). Several
    processes and hosts may share the directory (NFS, a mounted volume)."""

    directory: Path | str = "rdq-blobs"
    where: str = field(init=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self.where = f"directory {self.directory}"

    def _path(self, digest: str) -> Path:
        return Path(self.directory) / "sha256" / digest[:2] / digest[2:4] / digest

    async def put(self, digest: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, digest, data)

    def _put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        try:
            os.utime(path)  # there already: used again now
            return
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{digest}.{secrets.token_hex(4)}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
        _fsync_dir(path.parent)

    async def get(self, digest: str) -> bytes:
        return await asyncio.to_thread(self._get, digest)

    def _get(self, digest: str) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise PayloadMissing(digest, self.where) from None

    async def exists(self, digest: str) -> bool:
        return await asyncio.to_thread(self._path(digest).is_file)

    async def used(self) -> list[tuple[str, float]]:
        return await asyncio.to_thread(lambda: list(self._used()))

    def _used(self) -> Iterator[tuple[str, float]]:
        root = Path(self.directory) / "sha256"
        if not root.is_dir():
            return
        for path in root.glob("*/*/*"):
            if path.name.endswith(".partial") or ".deleting." in path.name:
                continue
            with contextlib.suppress(FileNotFoundError):
                yield path.name, path.stat().st_mtime

    async def delete_unused(self, digest: str, before: float) -> bool:
        return await asyncio.to_thread(self._delete_unused, digest, before)

    def _delete_unused(self, digest: str, before: float) -> bool:
        """Moved aside first (atomically), then looked at again: a put that touched the blob
        between the sweep's look and the move is seen, and the blob put back."""
        path = self._path(digest)
        aside = path.with_name(f"{digest}.deleting.{secrets.token_hex(4)}")
        try:
            if path.stat().st_mtime >= before:
                return False
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        if aside.stat().st_mtime >= before:  # used again meanwhile: it stays
            os.replace(aside, path)
            return False
        aside.unlink()
        return True


class FsspecBlobStore:
    """Blobs in an fsspec filesystem: ``<url>/sha256/<ab>/<cd>/<digest>``. Needs ``fsspec``
    (``pip install 'rdq-core[blobs]'``) and the filesystem's own package (``s3fs`` for
    ``s3://``, also S3-compatible stores with ``endpoint_url``). ``options`` go to the
    filesystem (credentials, endpoint). A put of a blob already there writes it again when
    its time of last use is older than ``refresh`` seconds (object stores keep no time but
    their write's), else only looks."""

    def __init__(self, url: str, *, refresh: float = 600.0, **options: Any) -> None:
        try:
            import fsspec
        except ImportError:
            raise ConfigError(
                "a blob store at a URL needs fsspec: pip install 'rdq-core[blobs]'", key="blobs"
            ) from None
        self.fs, root = fsspec.core.url_to_fs(url, **options)
        self.root = root.rstrip("/")
        self.refresh = refresh
        self.where = url

    def _path(self, digest: str) -> str:
        return f"{self.root}/sha256/{digest[:2]}/{digest[2:4]}/{digest}"

    async def put(self, digest: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, digest, data)

    def _put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        with contextlib.suppress(FileNotFoundError, OSError):
            if time.time() - _modified(self.fs, path) < self.refresh:
                return
        self.fs.pipe_file(path, data)

    async def get(self, digest: str) -> bytes:
        def read() -> bytes:
            try:
                data: bytes = self.fs.cat_file(self._path(digest))
            except FileNotFoundError:
                raise PayloadMissing(digest, self.where) from None
            return data

        return await asyncio.to_thread(read)

    async def exists(self, digest: str) -> bool:
        return bool(await asyncio.to_thread(self.fs.exists, self._path(digest)))

    async def used(self) -> list[tuple[str, float]]:
        def walk() -> list[tuple[str, float]]:
            base = f"{self.root}/sha256"
            if not self.fs.exists(base):
                return []
            found = []
            for path, info in self.fs.find(base, detail=True).items():
                name = path.rstrip("/").rsplit("/", 1)[-1]
                if len(name) == 64:
                    found.append((name, _info_time(info)))
            return found

        return await asyncio.to_thread(walk)

    async def delete_unused(self, digest: str, before: float) -> bool:
        def delete() -> bool:
            path = self._path(digest)
            try:
                if _modified(self.fs, path) >= before:
                    return False
                self.fs.rm_file(path)
            except FileNotFoundError:
                return False
            return True

        return await asyncio.to_thread(delete)


def _modified(fs: Any, path: str) -> float:
    return _info_time(fs.info(path))


def _info_time(info: dict[str, Any]) -> float:
    for name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(name)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        return float(value)
    return time.time()  # no time at all: treated as used now, so never swept
