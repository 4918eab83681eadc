"""The payload-by-reference step of the envelope codec: a payload whose JSON is larger than
the inline limit goes to the blob store, keyed by the SHA-256 of those bytes, and the task
carries the reference (header ``rdq-payload-ref: sha256:<digest>``, ``rdq-payload-size``, its
``payload`` null); a worker, the console, the API and ``rdq copy`` read it back.

**After encryption** (``rdq.keys``, where a keyring seals payloads): the client seals first,
then references what it sealed; a worker resolves the reference first, then opens the seal.
So the blob store — often a bucket more people and services can list than the database —
never holds a plaintext payload, and its digests say nothing about what payloads hold (a
digest of plaintext is a fingerprint: anyone who can list the bucket could confirm a guessed
payload by hashing it). The price: identical sealed payloads are stored twice (each seal has
its own nonce), where identical plain ones share one blob.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

import msgspec

from rdq.blobs._stores import BlobStore
from rdq.errors import PayloadMissing, ValidationError
from rdq.spi import PAYLOAD_REF_HEADER, Envelope, bounds

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "PAYLOAD_SIZE_HEADER",
    "Offloaded",
    "digest_of",
    "offload",
    "reference_of",
    "resolve",
]

PAYLOAD_SIZE_HEADER = "rdq-payload-size"
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
"""The largest payload a submit takes by reference (bytes of its JSON)."""
_PREFIX = "sha256:"
_MISSING_TRIES = 3
"""Reads of a blob not found before it counts as missing (a sweep may hold it aside for an
instant while it sees that a submit just used it again)."""


@dataclass(frozen=True)
class Offloaded:
    """A blob a submit wrote: its digest and bytes (written again after the task is stored
    should a sweep have taken it meanwhile)."""

    digest: str
    data: bytes


def reference_of(task: Envelope) -> str | None:
    """The task's payload reference (``sha256:<digest>``), or ``None`` for an inline one. A
    task whose payload was read back (the API's, an export's, the archive's) keeps the header
    beside its payload: it is inline."""
    if task.payload is not None:
        return None
    return task.headers.get(PAYLOAD_REF_HEADER)


def digest_of(reference: str) -> str:
    """The hex digest of a reference; ``ValidationError`` for anything else."""
    digest = reference.removeprefix(_PREFIX)
    if not reference.startswith(_PREFIX) or len(digest) != 64 or not _is_hex(digest):
        raise ValidationError("must be sha256:<64 hex digits>", field=PAYLOAD_REF_HEADER)
    return digest


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


async def offload(
    task: Envelope, blobs: BlobStore, *, inline_limit: int, max_bytes: int
) -> tuple[Envelope, Offloaded | None]:
    """``task`` as stored: unchanged when its payload's JSON takes at most ``inline_limit``
    bytes, else with the payload in ``blobs`` and the reference in its headers.
    ``ValidationError`` (field ``payload``) past ``max_bytes``."""
    if reference_of(task) is not None:
        return task, None  # already a reference (rdq copy)
    if PAYLOAD_REF_HEADER in task.headers:  # read back (an export, the archive): anew
        headers = {
            k: v
            for k, v in task.headers.items()
            if k not in (PAYLOAD_REF_HEADER, PAYLOAD_SIZE_HEADER)
        }
        task = msgspec.structs.replace(task, headers=headers)
    try:
        data = msgspec.json.encode(task.payload)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        bounds.check_task(task)  # says what is wrong with it, naming the field
        raise ValidationError("must be JSON-encodable", field="payload") from None
    if len(data) <= inline_limit:
        return task, None
    if len(data) > max_bytes:
        raise ValidationError(
            f"its JSON takes {len(data)} bytes, more than the {max_bytes} a payload may",
            field="payload",
        )
    bounds.check_depth(task.payload, "payload")
    digest = hashlib.sha256(data).hexdigest()
    await blobs.put(digest, data)
    headers = {
        **task.headers,
        PAYLOAD_REF_HEADER: _PREFIX + digest,
        PAYLOAD_SIZE_HEADER: str(len(data)),
    }
    stored = msgspec.structs.replace(task, payload=None, headers=headers)
    return stored, Offloaded(digest, data)


async def resolve(task: Envelope, blobs: BlobStore) -> Envelope:
    """``task`` with its payload read back from ``blobs`` (the task unchanged when its payload
    is inline). :class:`~rdq.errors.PayloadMissing` when the blob is not there, or its bytes
    are not what the digest says."""
    reference = reference_of(task)
    if reference is None:
        return task
    digest = digest_of(reference)
    for attempt in range(_MISSING_TRIES):
        try:
            data = await blobs.get(digest)
            break
        except PayloadMissing:
            if attempt == _MISSING_TRIES - 1:
                raise
            await asyncio.sleep(0.05)
    if hashlib.sha256(data).hexdigest() != digest:
        raise PayloadMissing(digest, blobs.where, "not what its digest says (corrupt)")
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise PayloadMissing(digest, blobs.where, "not JSON (corrupt)") from None
    return msgspec.structs.replace(task, payload=payload)
