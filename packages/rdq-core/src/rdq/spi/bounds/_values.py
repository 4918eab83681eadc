"""The numbers of the contract's limits (documented in :mod:`rdq.spi.bounds`)."""

from __future__ import annotations

import re
from datetime import timedelta

import msgspec

MAX_ID_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_HANDLER_REF_LENGTH = 1024
MAX_HEADERS = 64
MAX_HEADER_NAME_LENGTH = 128
MAX_HEADER_VALUE_LENGTH = 4096
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_DEPTH = 64
"""How deeply a payload (or an unknown field's value) may nest arrays and objects."""
MAX_LIMIT = 1000
MAX_LEASE = timedelta(hours=24)
MAX_DELAY = timedelta(days=36_500)
"""About 100 years: a task's first due time stays far inside the years every store holds."""
MAX_SELECTOR_IDS = 10_000
MAX_WORKER_ID_LENGTH = 200
MAX_ERROR_TYPE_LENGTH = 1024
MAX_ERROR_MESSAGE_LENGTH = 8192
MAX_TRACEBACK_LENGTH = 32768
MAX_AUDIT_WORD_LENGTH = 200
MAX_AUDIT_REASON_LENGTH = 2000
MAX_TASK_KEYS = 8
MAX_TASK_KEY_LENGTH = 200
MAX_DEDUP_KEY_LENGTH = 200
MAX_PAYLOAD_REF_LENGTH = 200
MAX_CONTROL_KEY_LENGTH = 1100
"""A control's key: ``*``, ``handler:<handler_ref>`` or a task key."""
MAX_CONTROL_STATE_BYTES = 64 * 1024
MAX_AGING = 86_400.0
"""The most seconds of waiting one step of priority may be worth (a day: twenty steps, the
whole range of priorities, in twenty days)."""
MAX_WORKER_QUEUES = 1000
MAX_COUNTS = 1000
DEFAULT_OPERATION_TIMEOUT = 10.0
"""Seconds a store waits on its backend for one operation before raising StorageUnavailable."""
EXACT_COUNT_THRESHOLD = 10_000
"""Counts at or below this are exact in ``stats``/``list_queues``; above it they may be
estimates (named in ``Stats.estimated``)."""
_ID_RE = re.compile(r"[A-Za-z0-9._\-:@+=~]+")
_QUEUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-:]*")
_KEY_RE = re.compile(r"[^\s\x00-\x1f\x7f]+")
_HANDLER_RE = re.compile(r"[^\s\x00-\x1f\x7f]+")
_JSON_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_encode_json = msgspec.json.Encoder().encode
