"""Checks of whole operation arguments: filters, selectors, pages, id lists, batches,
resolutions, imported tasks, audit entries."""

from __future__ import annotations

from collections.abc import Sequence

from rdq.errors import ValidationError
from rdq.spi._flow import QUEUE_KEY, Control, Counts, WorkerInfo
from rdq.spi._models import (
    STATUS_TIME_FIELDS,
    AuditEntry,
    AuditFilter,
    Completion,
    Dedup,
    DedupMode,
    DLQFilter,
    Envelope,
    Page,
    Selector,
    Status,
    TaskFilter,
)
from rdq.spi.bounds._fields import (
    _check_text,
    _encoded,
    check_attempt,
    check_aware,
    check_control_key,
    check_depth,
    check_limit,
    check_queue,
    check_task,
    check_task_id,
    check_token,
    check_worker_id,
)
from rdq.spi.bounds._values import (
    _KEY_RE,
    MAX_AGING,
    MAX_AUDIT_REASON_LENGTH,
    MAX_AUDIT_WORD_LENGTH,
    MAX_CONTROL_STATE_BYTES,
    MAX_COUNTS,
    MAX_DEDUP_KEY_LENGTH,
    MAX_DELAY,
    MAX_DEPTH,
    MAX_ERROR_MESSAGE_LENGTH,
    MAX_LIMIT,
    MAX_PAYLOAD_REF_LENGTH,
    MAX_SELECTOR_IDS,
    MAX_TASK_KEY_LENGTH,
    MAX_WORKER_QUEUES,
)


def check_filter(value: object, field: str = "filter") -> DLQFilter:
    if not isinstance(value, DLQFilter):
        raise ValidationError("must be an rdq.spi.DLQFilter", field=field)
    for name in ("dead_lettered_after", "dead_lettered_before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


def check_selector(value: object) -> Selector:
    """A selector must carry ids or a filter (its constructor enforces exactly one)."""
    if not isinstance(value, Selector):
        raise ValidationError("must be an rdq.spi.Selector", field="selector")
    if value.ids is not None and value.filter is not None:
        raise ValidationError("give either ids or filter, not both", field="selector")
    if value.ids is None and value.filter is None:
        raise ValidationError("give either ids or filter", field="selector")
    if value.ids is not None:
        if len(value.ids) > MAX_SELECTOR_IDS:
            raise ValidationError(f"more than {MAX_SELECTOR_IDS} ids", field="selector.ids")
        for i, task_id in enumerate(value.ids):
            check_task_id(task_id, field=f"selector.ids[{i}]")
    if value.filter is not None:
        check_filter(value.filter, "selector.filter")
    return value


def check_page(value: object) -> Page:
    if not isinstance(value, Page):
        raise ValidationError("must be an rdq.spi.Page", field="page")
    check_limit(value.limit, "page.limit")
    if value.cursor is not None and not isinstance(value.cursor, str):
        raise ValidationError("must be a string", field="page.cursor")
    return value


def check_ids(ids: Sequence[str], field: str = "ids") -> list[str]:
    """A list of at most ``MAX_SELECTOR_IDS`` valid task ids (a lone string is refused, not
    read as a list of one-character ids)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ValidationError("must be a list of task ids", field=field)
    if len(ids) > MAX_SELECTOR_IDS:
        raise ValidationError(f"more than {MAX_SELECTOR_IDS} ids", field=field)
    return [check_task_id(task_id, field=f"{field}[{i}]") for i, task_id in enumerate(ids)]


def check_tasks(tasks: object, field: str = "tasks") -> list[Envelope]:
    """A list of tasks, each valid for ``enqueue`` (checked in order, so a batch is refused
    exactly as its first bad ``enqueue`` would be)."""
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a list of rdq.spi.Envelope", field=field)
    return [check_task(task) for task in tasks]


def check_resolution(task_id: object, token: object, attempt: object) -> None:
    """The arguments every resolution (``reschedule``, ``complete``, ``dead_letter``) takes."""
    check_task_id(task_id)
    check_token(token)
    check_attempt(attempt)


def check_completions(completions: object) -> list[Completion]:
    """The items of ``complete_many``, every one checked before anything changes."""
    if isinstance(completions, str | bytes) or not isinstance(completions, Sequence):
        raise ValidationError("must be a list of rdq.spi.Completion", field="completions")
    for item in completions:
        if not isinstance(item, Completion):
            raise ValidationError("must be rdq.spi.Completion items", field="completions")
        check_resolution(item.task_id, item.token, item.attempt)
        check_discard(item.discard, "completions")
    return list(completions)


def check_discard(value: object, field: str = "discard") -> None:
    """``complete``'s ``discard`` (and a ``Completion``'s): true or false."""
    if not isinstance(value, bool):
        raise ValidationError("must be true or false", field=field)


def check_wait(value: object, field: str = "timeout") -> float:
    """A ``wait_due`` timeout: a non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError("must be a non-negative number of seconds", field=field)
    return float(value)


_TIMESTAMPS = (
    "created_at",
    "next_attempt_at",
    "lease_expires_at",
    "claimed_at",
    "completed_at",
    "dead_lettered_at",
    "cancelled_at",
)


def check_imported_task(value: object) -> Envelope:
    """Validate a task offered to ``import_tasks``: everything ``check_task`` checks (a task
    read back as corrupt is refused, each attempt record valid), a known status,
    ``created_at`` and the time of its status (see :data:`rdq.spi.STATUS_TIME_FIELDS`) set,
    every timestamp timezone-aware and ``claimed_by`` a valid worker id."""
    task = check_task(value)
    if not isinstance(task.status, Status):
        raise ValidationError("must be an rdq.spi.Status", field="status")
    for name in ("created_at", STATUS_TIME_FIELDS[task.status]):
        if getattr(task, name) is None:
            raise ValidationError(f"must be set on an imported {task.status} task", field=name)
    for name in _TIMESTAMPS:
        at = getattr(task, name)
        if at is not None:
            check_aware(at, name)
    check_worker_id(task.claimed_by, "claimed_by")
    return task


def check_imported_tasks(tasks: object) -> list[Envelope]:
    """A list of at most ``MAX_LIMIT`` tasks, each valid for ``import_tasks``."""
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise ValidationError("must be a list of rdq.spi.Envelope", field="tasks")
    if len(tasks) > MAX_LIMIT:
        raise ValidationError(f"more than {MAX_LIMIT} tasks", field="tasks")
    return [check_imported_task(task) for task in tasks]


def check_task_filter(value: object, field: str = "filter") -> TaskFilter:
    if not isinstance(value, TaskFilter):
        raise ValidationError("must be an rdq.spi.TaskFilter", field=field)
    if not isinstance(value.status, Status):
        raise ValidationError("must be an rdq.spi.Status", field=f"{field}.status")
    for name in ("after", "before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


def check_audit_entry(value: object, field: str = "entry") -> AuditEntry:
    if not isinstance(value, AuditEntry):
        raise ValidationError("must be an rdq.spi.AuditEntry", field=field)
    for name in ("actor", "action"):
        word = getattr(value, name)
        if not isinstance(word, str) or not word:
            raise ValidationError("must be a non-empty string", field=f"{field}.{name}")
        _check_text(word, MAX_AUDIT_WORD_LENGTH, f"{field}.{name}")
    check_queue(value.queue, f"{field}.queue")
    _check_text(value.reason, MAX_AUDIT_REASON_LENGTH, f"{field}.reason")
    _check_text(value.error, MAX_ERROR_MESSAGE_LENGTH, f"{field}.error")
    if not isinstance(value.count, int) or isinstance(value.count, bool) or value.count < 0:
        raise ValidationError("must be a non-negative integer", field=f"{field}.count")
    if not isinstance(value.selector, dict):
        raise ValidationError("must be an object", field=f"{field}.selector")
    return value


def check_audit_filter(value: object, field: str = "filter") -> AuditFilter:
    if not isinstance(value, AuditFilter):
        raise ValidationError("must be an rdq.spi.AuditFilter", field=field)
    for name in ("after", "before"):
        at = getattr(value, name)
        if at is not None:
            check_aware(at, f"{field}.{name}")
    return value


def check_control(value: object, field: str = "control") -> Control:
    """A control to store: its queue and key, the limits it sets (each ``None`` or within
    range), and state that encodes as JSON within ``MAX_CONTROL_STATE_BYTES``."""
    if not isinstance(value, Control):
        raise ValidationError("must be an rdq.spi.Control", field=field)
    check_queue(value.queue, f"{field}.queue")
    check_control_key(value.key, f"{field}.key")
    if not isinstance(value.paused, bool):
        raise ValidationError("must be a boolean", field=f"{field}.paused")
    for name, low in (("gate", 0), ("concurrency", 0), ("rate", 1), ("burst", 1)):
        number = getattr(value, name)
        if number is not None and (
            isinstance(number, bool) or not isinstance(number, int) or number < low
        ):
            raise ValidationError(
                f"must be an integer of at least {low}, or None", f"{field}.{name}"
            )
    per = value.per
    if isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per <= 86_400:
        raise ValidationError("must be a number of seconds in (0, 86400]", field=f"{field}.per")
    _check_order(value, field)
    if not isinstance(value.state, dict):
        raise ValidationError("must be an object", field=f"{field}.state")
    encoded = _encoded(value.state, f"{field}.state", MAX_DEPTH)
    if len(encoded) > MAX_CONTROL_STATE_BYTES:
        raise ValidationError(
            f"is {len(encoded)} bytes encoded; the limit is {MAX_CONTROL_STATE_BYTES}",
            field=f"{field}.state",
        )
    return value


def _check_order(value: Control, field: str) -> None:
    """``fair`` and ``aging``: settings of the queue's own control (key ``*``) only; ``fair``
    a key prefix (1–200 characters without whitespace), ``aging`` seconds in (0, 86400]."""
    fair, aging = value.fair, value.aging
    if (fair is not None or aging is not None) and value.key != QUEUE_KEY:
        name = "fair" if fair is not None else "aging"
        raise ValidationError(
            f"is a setting of the queue's own control (key {QUEUE_KEY!r}), not of a key's",
            field=f"{field}.{name}",
        )
    if fair is not None and (
        not isinstance(fair, str)
        or not 1 <= len(fair) <= MAX_TASK_KEY_LENGTH
        or not _KEY_RE.fullmatch(fair)
    ):
        raise ValidationError(
            f"must be a key prefix of 1-{MAX_TASK_KEY_LENGTH} characters without whitespace, "
            "or None",
            field=f"{field}.fair",
        )
    if aging is not None and (
        isinstance(aging, bool) or not isinstance(aging, int | float) or not 0 < aging <= MAX_AGING
    ):
        raise ValidationError(
            f"must be a number of seconds in (0, {MAX_AGING:g}], or None", field=f"{field}.aging"
        )


def check_version(value: object, field: str = "expected_version") -> int:
    """A control version a caller expects: 0 (none yet) or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("must be a non-negative integer", field=field)
    return value


def check_worker_info(value: object, field: str = "info") -> WorkerInfo:
    """A worker's registration: a valid id, texts and numbers in range, its queues valid."""
    if not isinstance(value, WorkerInfo):
        raise ValidationError("must be an rdq.spi.WorkerInfo", field=field)
    worker_id = check_worker_id(value.id, f"{field}.id")
    if worker_id is None:
        raise ValidationError("must be a worker id", field=f"{field}.id")
    for name in ("host", "version", "state"):
        _check_text(getattr(value, name), MAX_AUDIT_WORD_LENGTH, f"{field}.{name}")
    for name in ("pid", "concurrency", "held"):
        number = getattr(value, name)
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValidationError("must be a non-negative integer", field=f"{field}.{name}")
    beat = value.heartbeat
    if isinstance(beat, bool) or not isinstance(beat, int | float) or not 0 < beat <= 3600:
        raise ValidationError("must be a number of seconds in (0, 3600]", f"{field}.heartbeat")
    if not isinstance(value.queues, list) or len(value.queues) > MAX_WORKER_QUEUES:
        raise ValidationError(f"must be a list of at most {MAX_WORKER_QUEUES}", f"{field}.queues")
    for i, queue in enumerate(value.queues):
        check_queue(queue, f"{field}.queues[{i}]")
    if not isinstance(value.extra, dict):
        raise ValidationError("must be an object", field=f"{field}.extra")
    check_depth(value.extra, f"{field}.extra")
    return value


def check_counts(value: object, field: str = "counts") -> list[Counts]:
    """Counts to add: at most ``MAX_COUNTS`` entries, each of a valid queue, a whole minute
    (timezone-aware) and non-negative numbers."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError("must be a list of rdq.spi.Counts", field=field)
    if len(value) > MAX_COUNTS:
        raise ValidationError(f"more than {MAX_COUNTS} entries", field=field)
    for i, entry in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(entry, Counts):
            raise ValidationError("must be rdq.spi.Counts", field=where)
        check_queue(entry.queue, f"{where}.queue")
        minute = check_aware(entry.minute, f"{where}.minute")
        if minute.second or minute.microsecond:
            raise ValidationError("must be a whole minute", field=f"{where}.minute")
        for name in ("succeeded", "failed", "dead", "deferred"):
            number = getattr(entry, name)
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValidationError("must be a non-negative integer", f"{where}.{name}")
    return list(value)


def check_dedup(value: object, field: str = "dedup") -> Dedup:
    """A :class:`~rdq.spi.Dedup`: a key of 1–200 characters without whitespace or control
    characters, a known mode, a ``window`` and a ``max_age`` each ``None`` or more than 0 and
    at most ``MAX_DELAY`` seconds; ``extend`` needs a window, ``debounce`` a ``max_age``."""
    if not isinstance(value, Dedup):
        raise ValidationError("must be an rdq.spi.Dedup", field=field)
    key = value.key
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_DEDUP_KEY_LENGTH:
        raise ValidationError(f"must be 1-{MAX_DEDUP_KEY_LENGTH} characters", f"{field}.key")
    if not _KEY_RE.fullmatch(key):
        raise ValidationError("must not contain whitespace or control characters", f"{field}.key")
    mode: object = value.mode  # a Dedup built without its constructor's checks may hold anything
    if not isinstance(mode, DedupMode):
        modes = ", ".join(m.value for m in DedupMode)
        raise ValidationError(f"must be one of {modes}", field=f"{field}.mode")
    longest = MAX_DELAY.total_seconds()
    for name in ("window", "max_age"):
        seconds = getattr(value, name)
        if seconds is None:
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValidationError("must be a number of seconds", field=f"{field}.{name}")
        if not 0 < seconds <= longest:
            raise ValidationError(
                f"must be more than 0 and at most {longest:g} seconds", field=f"{field}.{name}"
            )
    if value.mode == DedupMode.EXTEND and value.window is None:
        raise ValidationError("extend starts the window again: give one", f"{field}.window")
    if value.mode == DedupMode.DEBOUNCE and value.max_age is None:
        raise ValidationError(
            "debounce needs a max_age, so that a stream of submissions cannot put its task off "
            "for ever",
            field=f"{field}.max_age",
        )
    return value


def check_payload_refs(refs: object, field: str = "refs") -> list[str]:
    """A list of at most ``MAX_LIMIT`` payload references, each 1–200 characters without
    whitespace or control characters (a lone string is refused)."""
    if isinstance(refs, str | bytes) or not isinstance(refs, Sequence):
        raise ValidationError("must be a list of payload references", field=field)
    if len(refs) > MAX_LIMIT:
        raise ValidationError(f"more than {MAX_LIMIT} references", field=field)
    for i, ref in enumerate(refs):
        if not isinstance(ref, str) or not 1 <= len(ref) <= MAX_PAYLOAD_REF_LENGTH:
            raise ValidationError(
                f"must be 1-{MAX_PAYLOAD_REF_LENGTH} characters", field=f"{field}[{i}]"
            )
        if not _KEY_RE.fullmatch(ref):
            raise ValidationError("must not contain whitespace", field=f"{field}[{i}]")
    return list(refs)
