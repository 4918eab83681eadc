"""The sweep: blobs no task refers to any more are deleted, so a blob lives exactly as long as
a task refers to it, give or take a sweep.

A blob is deleted only when it was not used (put) for ``grace`` seconds **and** the store says
no task carries its reference (``Storage.held_payload_refs``, capability ``payload_refs``:
answered from an index, in any status and any queue). Tasks that leave the store — purged,
removed by retention or by ``task_ttl`` — release their blobs at the next sweep; a blob a
submit wrote for a task that was never stored (the submit failed, or its process died) is
released once its grace has passed.

Why a reference never dangles: a submit puts (or touches) the blob *before* it stores the
task, and checks it is still there after; the sweep reads the references *after* listing the
blobs it may delete, and each store deletes a blob only if it was not put again since the
listing (:meth:`BlobStore.delete_unused`: a directory moves it aside and looks again). A blob
used again while a sweep runs is seen as used, and stays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rdq import metrics
from rdq.blobs._stores import BlobStore
from rdq.spi import Storage, bounds, require

__all__ = ["DEFAULT_GRACE", "Swept", "sweep"]

DEFAULT_GRACE = 3600.0
"""Seconds a blob is kept after its last use whatever the store says (a submit between its
blob and its task, and clocks of a fleet a little apart, are well inside it)."""


@dataclass(frozen=True)
class Swept:
    """What a sweep did: blobs looked at, old enough to go, held by a task, deleted."""

    seen: int
    old: int
    held: int
    deleted: int


async def sweep(storage: Storage, blobs: BlobStore, *, grace: float = DEFAULT_GRACE) -> Swept:
    """Delete the blobs of ``blobs`` that no task of ``storage`` refers to and that were not
    used for ``grace`` seconds (see the module docstring)."""
    require(storage, "payload_refs", "deleting unused payload blobs")
    before = time.time() - grace
    found = await blobs.used()
    old = [digest for digest, used in found if used < before]
    held = deleted = 0
    for start in range(0, len(old), bounds.MAX_LIMIT):
        chunk = old[start : start + bounds.MAX_LIMIT]
        kept = await storage.held_payload_refs([f"sha256:{d}" for d in chunk])
        for digest in chunk:
            if f"sha256:{digest}" in kept:
                held += 1
            elif await blobs.delete_unused(digest, before):
                deleted += 1
    if deleted:
        metrics.BLOBS_DELETED.inc(deleted)
    return Swept(seen=len(found), old=len(old), held=held, deleted=deleted)
