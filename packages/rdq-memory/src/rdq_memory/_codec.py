"""Envelopes in and out of a memory store: independent copies made through the wire codec
(as a real backend's round trip would), and corrupt records read back with ``corrupt`` set."""

from __future__ import annotations

from datetime import datetime

from rdq.errors import ValidationError
from rdq.spi import Envelope, Status, decode_envelope, encode_envelope
from rdq_memory._state import Record

__all__ = ["RAW_PREVIEW", "copy_in", "corrupt_raw", "corrupt_record", "read"]

RAW_PREVIEW = 500
"""How much of a corrupt record's raw stored value ``Envelope.corrupt`` shows."""


def copy_in(task: Envelope) -> Envelope:
    """An independent copy of a caller's envelope (the caller's is never modified)."""
    return decode_envelope(encode_envelope(task))


def read(record: Record, *, include_attempts: bool = True) -> Envelope:
    """The task of ``record`` as a read returns it: a copy, ``corrupt`` set on a corrupt
    record, attempts left out unless asked."""
    task = decode_envelope(encode_envelope(record.task))
    if record.raw is not None:
        shown = record.raw if len(record.raw) <= RAW_PREVIEW else record.raw[:RAW_PREVIEW] + "…"
        task.corrupt = f"{record.problem}; stored value: {shown!r}"
    if not include_attempts:
        task.attempts = []
    return task


def corrupt_raw(queue: str, task_id: str, kind: str) -> str:
    """A stored form that does not decode, of the ``kind`` the compliance kit asks for:
    malformed JSON, a payload nested deeper than any decoder recurses, or a ``created_at``
    past the year 9999."""
    head = f'{{"id": "{task_id}", "queue": "{queue}", "handler_ref": "corrupt:task"'
    if kind == "undecodable":
        return '{"id": '
    if kind == "deep":
        return f'{head}, "payload": {"[" * 5000}{"]" * 5000}}}'
    if kind == "far_time":
        return f'{head}, "created_at": "12000-01-01T00:00:00Z"}}'
    raise ValueError(f"unknown kind of corrupt task: {kind!r}")


def corrupt_record(queue: str, task_id: str, raw: str, now: datetime) -> Record:
    """A PENDING record, due ``now``, whose stored form is ``raw``, which must not decode."""
    try:
        decode_envelope(raw)
    except ValidationError as exc:
        problem = f"the stored task does not decode: {exc}"
    else:
        raise ValueError("raw decodes as an envelope; a corrupt record needs one that does not")
    task = Envelope(
        id=task_id,
        queue=queue,
        handler_ref="",
        status=Status.PENDING,
        created_at=now,
        next_attempt_at=now,
    )
    return Record(task, raw=raw, problem=problem)
