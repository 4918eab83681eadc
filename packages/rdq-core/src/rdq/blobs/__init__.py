"""Payloads by reference: a payload too big for a row lives in a blob store, keyed by the
SHA-256 of its bytes, and the task carries the reference.

Above the **inline limit** (1 MiB by default — the limit every payload had — or less, as
configured) the client puts the payload's JSON in the blob store and stores the task with
``rdq-payload-ref: sha256:<digest>`` in its headers and a ``null`` payload; a worker reads it
back before its handler runs, and the console, ``GET /v1/tasks/{id}``, exports, the archive
and ``rdq copy`` read it back too: a handler sees the payload as ever. A payload may take up
to 256 MiB (``max_bytes``). The store keeps the task small (a claim, an attempt record, a
listing move no payload) and indexes the references (capability ``payload_refs``); without
it payloads stay inline, and one above the inline limit is refused, as before.

A blob lives exactly as long as a task refers to it: the **sweep** of every worker's upkeep
deletes the blobs no task carries any more (see :mod:`rdq.blobs._sweep` for why a reference
never dangles and a blob never leaks).

- ``_stores``: :class:`BlobStore`, :class:`DirectoryBlobStore` (the default, ``./rdq-blobs``
  or ``RDQ_BLOBS``), :class:`FsspecBlobStore` (``s3://…`` and every fsspec filesystem);
- ``_codec``: the codec step, :func:`offload` and :func:`resolve` (after encryption, and why);
- ``_sweep``: :func:`sweep`;
- ``_settings``: :class:`Blobs`, the blob store and limits an application uses
  (:func:`blobs_from`).
"""

from rdq.blobs._codec import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    PAYLOAD_SIZE_HEADER,
    Offloaded,
    digest_of,
    offload,
    reference_of,
    resolve,
)
from rdq.blobs._settings import BLOBS_ENV, Blobs, blobs_from
from rdq.blobs._stores import BlobStore, DirectoryBlobStore, FsspecBlobStore
from rdq.blobs._sweep import DEFAULT_GRACE, Swept, sweep

__all__ = [
    "BLOBS_ENV",
    "DEFAULT_GRACE",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "PAYLOAD_SIZE_HEADER",
    "BlobStore",
    "Blobs",
    "DirectoryBlobStore",
    "FsspecBlobStore",
    "Offloaded",
    "Swept",
    "blobs_from",
    "digest_of",
    "offload",
    "reference_of",
    "resolve",
    "sweep",
]
