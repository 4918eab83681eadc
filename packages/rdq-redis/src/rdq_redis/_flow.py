"""Control records, the worker registry and per-minute counts (contract version 3): the
script arguments built from the contract's types and the replies read back.

Control records live with their queue (``<prefix>:{<queue>}:ctl:<key>``, see
:mod:`rdq_redis._keys`), so the claim reads them in its own script. The worker registry and
the counts are not per queue: each lives under a hash tag of its own (``{_workers}``,
``{_counts}``), one slot on Redis Cluster, so each of their operations is one script there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from rdq.errors import StorageError
from rdq.spi import Control, Counts, WorkerInfo
from rdq_redis._codec import from_us, hash_pairs, score_us, to_us

__all__ = [
    "control_args",
    "control_from_hash",
    "controls_listed",
    "counts_args",
    "counts_read",
    "minute_at",
    "minute_from",
    "worker_json",
    "workers_listed",
]

_US_PER_MINUTE = 60_000_000

_state_decoder = msgspec.json.Decoder(dict[str, Any])
_worker_decoder = msgspec.json.Decoder(WorkerInfo)
_encoder = msgspec.json.Encoder()


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def control_args(control: Control, expected_version: int) -> list[Any]:
    """What ``put_control.lua`` takes after (key base, key, expected version, registry, queue):
    paused, gate, concurrency, rate, per, burst, bucket, the state's JSON, then the claim
    order of the queue's own control: fair (the key prefix) and aging (seconds), '' for
    none."""
    return [
        "1" if control.paused else "0",
        _opt(control.gate),
        _opt(control.concurrency),
        _opt(control.rate),
        repr(float(control.per)),
        _opt(control.burst),
        _opt(control.bucket) if control.rate is not None else "",
        _encoder.encode(control.state),
        control.fair or "",
        "" if control.aging is None else repr(float(control.aging)),
    ]


def control_from_hash(
    queue: str, key: str, fields: dict[bytes, bytes], in_use: int | None = None
) -> Control:
    """A stored control record (``StorageError`` if it was edited into something else)."""

    def number(name: bytes) -> int | None:
        raw = fields.get(name)
        return None if raw is None else int(raw)

    try:
        return Control(
            queue=queue,
            key=key,
            paused=fields.get(b"paused") == b"1",
            gate=number(b"gate"),
            concurrency=number(b"concurrency"),
            rate=number(b"rate"),
            per=float(fields.get(b"per", b"1.0")),
            burst=number(b"burst"),
            fair=fair.decode() if (fair := fields.get(b"fair")) is not None else None,
            aging=float(aging) if (aging := fields.get(b"aging")) is not None else None,
            state=_state_decoder.decode(fields.get(b"state", b"{}")),
            version=int(fields[b"version"]),
            updated_at=from_us(int(fields[b"updated_at"])),
            in_use=in_use,
        )
    except (KeyError, ValueError, OverflowError, msgspec.DecodeError) as exc:
        raise StorageError(
            f"the control record of key {key!r} of queue {queue!r} does not decode ({exc})"
        ) from None


def controls_listed(queue: str, reply: Any) -> list[Control]:
    """``list_controls.lua``'s reply, by key."""
    controls = [
        control_from_hash(queue, key.decode(), hash_pairs(fields), int(in_use))
        for key, fields, in_use in reply
    ]
    controls.sort(key=lambda c: c.key)
    return controls


def worker_json(info: WorkerInfo) -> bytes:
    """A worker's registration as the registry stores it (the store's times left out)."""
    return _encoder.encode(msgspec.structs.replace(info, started_at=None, seen_at=None))


def workers_listed(reply: Any) -> list[WorkerInfo]:
    """``list_workers.lua``'s reply, by id. An entry that does not decode (edited by hand) is
    left out."""
    infos, started, seen = hash_pairs(reply[0]), hash_pairs(reply[1]), hash_pairs(reply[2])
    workers = []
    for raw_id, raw in sorted(infos.items()):
        try:
            info = _worker_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        first, last = started.get(raw_id), seen.get(raw_id)
        workers.append(
            msgspec.structs.replace(
                info,
                id=raw_id.decode(),
                started_at=from_us(int(first)) if first is not None else None,
                seen_at=from_us(score_us(last)) if last is not None else None,
            )
        )
    workers.sort(key=lambda w: w.id)
    return workers


def minute_at(minute: datetime) -> int:
    """A whole minute as the counts keys name it: minutes since 1970."""
    return to_us(minute) // _US_PER_MINUTE


def minute_from(at: datetime) -> int:
    """The first whole minute at or after ``at``, as :func:`minute_at` names it."""
    return -(-to_us(at) // _US_PER_MINUTE)


def counts_args(counts: Sequence[Counts]) -> list[Any]:
    """The entries ``add_counts.lua`` takes after (key base, n)."""
    args: list[Any] = []
    for entry in counts:
        args += [
            entry.queue,
            minute_at(entry.minute),
            entry.succeeded,
            entry.failed,
            entry.dead,
            entry.deferred,
        ]
    return args


def counts_read(reply: Any) -> list[Counts]:
    """``read_counts.lua``'s reply, by queue then minute."""
    out = [
        Counts(
            queue=queue.decode(),
            minute=from_us(int(minute) * _US_PER_MINUTE),
            succeeded=int(succeeded),
            failed=int(failed),
            dead=int(dead),
            deferred=int(deferred),
        )
        for queue, minute, succeeded, failed, dead, deferred in reply
    ]
    out.sort(key=lambda c: (c.queue, c.minute))
    return out
