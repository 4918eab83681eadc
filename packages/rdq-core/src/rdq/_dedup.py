"""Submitting under a dedup key: the settings a submit takes (:func:`dedup_of`), and the
admission itself (:func:`admit`) — the store's ``admit`` when it has ``dedup``, else the
engine's fallback — with the audit entry of every submission that did not add a task.

The fallback, for a store without ``dedup``: mode ``skip`` only, served by ``enqueue`` with a
task id derived from the key (``dedup-<sha256 of the key>``, and with a window the number of
the window-long period the store's clock is in), so the store's idempotence by id does the
folding. Its cost: a key is held while that task exists at all (until ``task_ttl`` or a purge
removes it, not only while it is live), or for the fixed period of the window it falls in
rather than a window that starts at the submission; the submission's own id is not used; and
one more round trip (the store's clock) with a window. ``replace``, ``extend`` and
``debounce`` need the store: ``Unsupported`` naming ``dedup``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta

import msgspec

from rdq.audit import AuditSink, record_action
from rdq.errors import DedupConflict, IDConflict, Unsupported, ValidationError
from rdq.spi import AdmitOutcome, Admitted, Dedup, DedupMode, Envelope, Storage, bounds

__all__ = ["DEDUP_HEADER", "DEFAULT_DEBOUNCE_MAX_AGE", "FALLBACK_PREFIX", "admit", "dedup_of"]

DEDUP_HEADER = "rdq-dedup-key"
"""The header a task submitted under a dedup key carries it in (shown wherever headers are:
``rdq tasks show``, the console's task page, ``GET /v1/tasks/{id}``)."""

DEFAULT_DEBOUNCE_MAX_AGE = 3600.0
"""Seconds a debounced task may be put off at most, counted from its first submission, when
the submit names no ``dedup_max_age``."""
FALLBACK_PREFIX = "dedup-"
"""The start of the task ids the fallback derives from a key."""


def dedup_of(
    key: str | None,
    window: float | timedelta | None,
    mode: str | DedupMode,
    max_age: float | timedelta | None,
) -> Dedup | None:
    """The :class:`~rdq.spi.Dedup` of a submit's ``dedup_*`` arguments (``None`` without a
    key); ``ValidationError`` naming the argument otherwise."""
    if key is None:
        if window is not None or max_age is not None or mode not in ("skip", DedupMode.SKIP):
            raise ValidationError("the other dedup settings need a dedup_key", field="dedup_key")
        return None
    try:
        chosen = DedupMode(mode)
    except ValueError:
        modes = ", ".join(m.value for m in DedupMode)
        raise ValidationError(f"must be one of {modes}", field="dedup_mode") from None
    seconds = {"dedup_window": window, "dedup_max_age": max_age}
    for name, value in seconds.items():
        if isinstance(value, timedelta):
            seconds[name] = value.total_seconds()
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValidationError("must be seconds or a timedelta", field=name)
    if chosen == DedupMode.DEBOUNCE and seconds["dedup_max_age"] is None:
        seconds["dedup_max_age"] = DEFAULT_DEBOUNCE_MAX_AGE
    window_s, max_age_s = seconds["dedup_window"], seconds["dedup_max_age"]
    dedup = Dedup(
        key=key,
        mode=chosen,
        window=None if window_s is None else float(window_s),  # type: ignore[arg-type]
        max_age=None if max_age_s is None else float(max_age_s),  # type: ignore[arg-type]
    )
    try:
        return bounds.check_dedup(dedup)
    except ValidationError as exc:  # dedup.window -> dedup_window: the submit's own names
        raise ValidationError(exc.message, field=(exc.field or "dedup").replace(".", "_")) from None


async def admit(
    storage: Storage,
    task: Envelope,
    dedup: Dedup,
    delay: timedelta | None,
    *,
    actor: str,
    sinks: Sequence[AuditSink] = (),
    id_given: bool = True,
) -> Admitted:
    """Admit ``task`` under ``dedup`` (see the module docstring for a store without
    ``dedup``; ``id_given``: the caller chose the task's id, which the fallback cannot keep).
    A submission that did not add a task is an audit entry (``dedup``, by ``actor``)."""
    task = msgspec.structs.replace(task, headers={**task.headers, DEDUP_HEADER: dedup.key})
    if storage.capabilities().dedup:
        admitted = await storage.admit(task, dedup, delay=delay)
    else:
        admitted = await _fallback(storage, task, dedup, delay, id_given)
    if admitted.outcome != AdmitOutcome.ADDED:
        selector = {
            "key": dedup.key,
            "mode": dedup.mode.value,
            "outcome": admitted.outcome.value,
            "task": admitted.task_id,
            "submitted": task.id,
        }
        changed = admitted.outcome in (AdmitOutcome.REPLACED, AdmitOutcome.EXTENDED)
        await record_action(
            storage,
            list(sinks),
            "dedup",
            admitted.queue,
            selector,
            actor,
            None,
            1 if changed else 0,
            None,
        )
    return admitted


async def _fallback(
    storage: Storage, task: Envelope, dedup: Dedup, delay: timedelta | None, id_given: bool
) -> Admitted:
    if dedup.mode != DedupMode.SKIP:
        raise Unsupported(type(storage).__name__, "dedup", f"dedup_mode {dedup.mode.value!r}")
    if id_given:
        raise ValidationError(
            "this store has no dedup keys of its own: the task's id is derived from the key, "
            "so give no id",
            field="id",
        )
    digest = hashlib.sha256(dedup.key.encode()).hexdigest()[:40]
    derived = f"{FALLBACK_PREFIX}{digest}"
    if dedup.window is not None:
        period = int((await storage.now()).timestamp() // dedup.window)
        derived = f"{derived}-{period}"
    keyed = msgspec.structs.replace(task, id=derived)
    try:
        stored = await storage.enqueue(keyed, delay=delay)
    except IDConflict as conflict:
        raise DedupConflict(dedup.key, conflict.existing_queue, derived) from None
    outcome = AdmitOutcome.ADDED if stored else AdmitOutcome.SKIPPED
    return Admitted(outcome=outcome, task_id=derived, queue=task.queue)
