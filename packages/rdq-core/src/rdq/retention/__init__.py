"""Retention: how long finished tasks stay in the store, and the archive they go to first.

A queue keeps its DEAD tasks for ever unless its config sets ``dead_ttl`` (seconds); SUCCEEDED
and CANCELLED ones ``task_ttl`` (7 days by default), deleted without an archive unless the
queue sets ``archive_succeeded``. Before any of them leaves the store — by retention, or by an
operator's purge — it is written to the **archive**, with every attempt: JSON Lines files
(:class:`DirectoryArchive`, rotated and gzip-compressed; the default, in ``./rdq-archive``
or where ``RDQ_ARCHIVE`` says), or a sink of the user's (any :class:`Archive`, named by
``module:attribute``). A task leaves the store only once the archive said it is durable;
``rdq dlq import`` puts archived (or ``rdq dlq export``-ed) tasks back, ids kept.

- ``_files``: the archive's files — :class:`DirectoryArchive`, :func:`read_tasks`,
  :class:`ExportFile` (an export written whole or not at all);
- ``_sinks``: the :class:`Archive` protocol and the archive a setting names
  (:func:`archive_from`, :func:`load_sink`);
- ``_step``: the step itself, archive then expire (:func:`archive_then_expire`), a queue's
  round of it (:func:`retain`) and an operator's purge that archives first;
- ``_record``: the queue's retention record — its counts, and which worker runs it now.
"""

from rdq.retention._files import (
    DEFAULT_ARCHIVE_DIR,
    DEFAULT_MAX_FILE_BYTES,
    DirectoryArchive,
    ExportFile,
    Problem,
    read_tasks,
    write_tasks,
)
from rdq.retention._record import RetentionRecord, read_record, read_records
from rdq.retention._sinks import ARCHIVE_ENV, Archive, FunctionArchive, archive_from, load_sink
from rdq.retention._step import (
    Expiry,
    RetentionRound,
    archive_then_expire,
    archive_then_purge,
    retain,
)

__all__ = [
    "ARCHIVE_ENV",
    "DEFAULT_ARCHIVE_DIR",
    "DEFAULT_MAX_FILE_BYTES",
    "Archive",
    "DirectoryArchive",
    "Expiry",
    "ExportFile",
    "FunctionArchive",
    "Problem",
    "RetentionRecord",
    "RetentionRound",
    "archive_from",
    "archive_then_expire",
    "archive_then_purge",
    "load_sink",
    "read_record",
    "read_records",
    "read_tasks",
    "retain",
    "write_tasks",
]
