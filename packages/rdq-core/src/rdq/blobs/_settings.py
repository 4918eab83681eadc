"""The blob store and the limits an application uses (:class:`Blobs`), from code, the
``[blobs]`` table of a config file, or ``RDQ_BLOBS``."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdq import metrics
from rdq.blobs._codec import DEFAULT_MAX_PAYLOAD_BYTES, Offloaded, offload, reference_of, resolve
from rdq.blobs._stores import BlobStore, DirectoryBlobStore, FsspecBlobStore
from rdq.blobs._sweep import DEFAULT_GRACE
from rdq.errors import ConfigError, PayloadMissing
from rdq.logging import get_logger
from rdq.spi import Envelope, bounds

_log = get_logger("rdq.blobs")

__all__ = ["BLOBS_ENV", "DEFAULT_BLOB_DIR", "DEFAULT_SWEEP_INTERVAL", "Blobs", "blobs_from"]

BLOBS_ENV = "RDQ_BLOBS"
"""The blob store when no setting names one: a directory, or a URL (``s3://bucket/path``)."""
DEFAULT_BLOB_DIR = "rdq-blobs"
DEFAULT_SWEEP_INTERVAL = 300.0


@dataclass
class Blobs:
    """Where payloads above ``inline_limit`` bytes (of their JSON) go, how large one may be,
    how long an unused blob is kept (``grace``) and how often a worker sweeps (seconds)."""

    store: BlobStore = field(default_factory=DirectoryBlobStore)
    inline_limit: int = bounds.MAX_PAYLOAD_BYTES
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    grace: float = DEFAULT_GRACE
    sweep_interval: float = DEFAULT_SWEEP_INTERVAL

    def __post_init__(self) -> None:
        if not hasattr(self.store, "put") or not hasattr(self.store, "get"):
            raise ConfigError("must be a blob store", key="blobs.store")
        if not isinstance(self.inline_limit, int) or not 0 < self.inline_limit <= (
            bounds.MAX_PAYLOAD_BYTES
        ):
            raise ConfigError(
                f"must be 1 to {bounds.MAX_PAYLOAD_BYTES} bytes", key="blobs.inline_limit"
            )
        if not isinstance(self.max_bytes, int) or self.max_bytes < self.inline_limit:
            raise ConfigError("must be at least the inline limit", key="blobs.max_bytes")
        for key in ("grace", "sweep_interval"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or not 0 < value < math.inf:
                raise ConfigError("must be a positive number of seconds", key=f"blobs.{key}")

    async def offload(self, task: Envelope) -> tuple[Envelope, Offloaded | None]:
        """``task`` as a store that indexes references keeps it: its payload in the blob
        store when its JSON is above the inline limit (:func:`rdq.blobs.offload`)."""
        stored, blob = await offload(
            task, self.store, inline_limit=self.inline_limit, max_bytes=self.max_bytes
        )
        if blob is not None:
            metrics.PAYLOADS_OFFLOADED.labels(task.queue).inc()
        return stored, blob

    async def keep(self, blobs: Iterable[Offloaded | None]) -> None:
        """The blobs of tasks just stored are still there (a sweep that ran between a blob and
        its task may have taken one: it is put back)."""
        for blob in blobs:
            if blob is not None and not await self.store.exists(blob.digest):
                await self.store.put(blob.digest, blob.data)

    async def resolve(self, task: Envelope) -> Envelope:
        """``task`` with its payload read back (:func:`rdq.blobs.resolve`)."""
        return await resolve(task, self.store)

    async def readable(self, tasks: Sequence[Envelope]) -> list[Envelope]:
        """``tasks`` with their payloads read back, for a reader (the console, the API, an
        export, the archive): a task whose blob is missing is given as stored, its reference
        in its headers and its payload ``null`` (and said in the log)."""
        found = []
        for task in tasks:
            if reference_of(task) is not None:
                try:
                    task = await self.resolve(task)
                except PayloadMissing as exc:
                    _log.warning("a payload cannot be read back", task_id=task.id, error=str(exc))
            found.append(task)
        return found


def blobs_from(spec: str | BlobStore | None = None, **settings: Any) -> Blobs:
    """:class:`Blobs` with the store ``spec`` names: a blob store as it is, a URL
    (``s3://…``: :class:`FsspecBlobStore`), or a directory; ``None`` reads ``RDQ_BLOBS`` and
    defaults to the directory ``rdq-blobs``. ``settings``: the other fields."""
    if spec is None:
        spec = os.environ.get(BLOBS_ENV) or DEFAULT_BLOB_DIR
    if isinstance(spec, str):
        store: BlobStore
        if "://" in spec and not spec.startswith("file://"):
            store = FsspecBlobStore(spec)
        else:
            store = DirectoryBlobStore(spec.removeprefix("file://"))
    else:
        store = spec
    return Blobs(store=store, **settings)
