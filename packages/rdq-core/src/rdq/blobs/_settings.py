"""The blob store and the limits an application uses (:class:`Blobs`), from code, the
``[blobs]`` table of a config file, or ``RDQ_BLOBS``."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from rdq.blobs._codec import DEFAULT_MAX_PAYLOAD_BYTES
from rdq.blobs._stores import BlobStore, DirectoryBlobStore, FsspecBlobStore
from rdq.blobs._sweep import DEFAULT_GRACE
from rdq.errors import ConfigError
from rdq.spi import bounds

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
