"""``JavaBridgeStorage``: every operation of the contract forwarded to the Java binding."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from rdq.errors import NotFound, StaleClaim, StorageError
from rdq.spi import (
    Admitted,
    Attempt,
    AuditEntry,
    AuditFilter,
    Capabilities,
    Claimed,
    Completion,
    Control,
    Counts,
    Dedup,
    DLQFilter,
    DLQGroup,
    Envelope,
    Page,
    Selector,
    Stats,
    StorageBase,
    TaskFilter,
    WorkerInfo,
)
from rdq_java_bridge import _wire
from rdq_java_bridge._process import java_command
from rdq_java_bridge._url import parse_url

__all__ = ["JavaBridgeStorage"]

_LINE_LIMIT = 64 * 1024 * 1024
"""Longest answer line accepted (a page of 1000 tasks with 1 MiB payloads is far below)."""


class JavaBridgeStorage(StorageBase):
    """The storage contract served by ``io.rdq.postgres.PostgresStorage`` in Java.

    Each instance is one Java store: its own process (``--stdio``) or its own session on a
    shared bridge server (``bridge`` set). Calls may run concurrently; each is one request line
    and one answer line."""

    def __init__(self, target_url: str, bridge: str | None = None) -> None:
        self.target_url = target_url
        self.bridge = bridge
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._listening: asyncio.Task[None] | None = None
        self._capabilities = Capabilities()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> JavaBridgeStorage:
        return cls(*parse_url(url, **options))

    def __repr__(self) -> str:
        where = f"bridge={self.bridge}" if self.bridge else "own process"
        return f"JavaBridgeStorage({where})"

    # --- the wire ------------------------------------------------------------------------

    async def _open(self) -> None:
        if self.bridge is not None:
            self._reader, self._writer = await asyncio.open_unix_connection(
                self.bridge, limit=_LINE_LIMIT
            )
        else:
            self._process = await asyncio.create_subprocess_exec(
                *java_command("io.rdq.bridge.Main", "--stdio"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
            )
            if self._process.stdout is None or self._process.stdin is None:
                raise StorageError("the Java bridge process has no pipes")
            self._reader, self._writer = self._process.stdout, self._process.stdin
        self._listening = asyncio.create_task(self._listen())
        try:
            await self._send("open", url=self.target_url)
            await self._send("connect")
            caps = await self._send("capabilities")
        except BaseException:
            await self._hang_up()
            raise
        self._capabilities = Capabilities(**caps, reopen=True)  # a second bridge process

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self._send("close")
        await self._hang_up()

    async def _hang_up(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        listening, self._listening = self._listening, None
        if listening is not None:
            listening.cancel()
            with contextlib.suppress(BaseException):
                await listening
        process, self._process = self._process, None
        if process is not None:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        self._fail_pending(StorageError("the Java bridge connection was closed"))

    def _fail_pending(self, error: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    async def _listen(self) -> None:
        reader = self._reader
        if reader is None:
            return
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                answer = msgspec.json.decode(line)
                future = self._pending.pop(answer["id"], None)
                if future is None or future.done():
                    continue  # its caller was cancelled
                if "error" in answer:
                    future.set_exception(_wire.error_of(answer["error"]))
                else:
                    future.set_result(answer["ok"])
        finally:
            self._fail_pending(StorageError("the Java bridge ended the connection"))

    async def _send(self, op: str, **args: Any) -> Any:
        writer = self._writer
        if writer is None:
            raise StorageError("the Java bridge is not connected")
        request_id = next(self._ids)
        encoded = {name: _wire.encode_arg(name, value) for name, value in args.items()}
        line = msgspec.json.encode({"id": request_id, "op": op, "args": encoded}) + b"\n"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            writer.write(line)
            await writer.drain()
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def _call(self, op: str, **args: Any) -> Any:
        self._check_open()
        return await self._send(op, **args)

    # --- the contract ----------------------------------------------------------------------

    def reopen(self) -> JavaBridgeStorage:
        """A second store on the same data, with connections of its own."""
        return JavaBridgeStorage(self.target_url, self.bridge)

    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def migrate(self) -> list[str]:
        """The migrations the Java binding applied (``["0003_second_revision"]``; ``[]`` when
        the schema was up to date)."""
        return [str(step) for step in await self._call("migrate")]

    async def enqueue(self, task: Envelope, *, delay: timedelta | None = None) -> bool:
        return bool(await self._call("enqueue", task=task, delay=delay))

    async def enqueue_batch(
        self, tasks: Sequence[Envelope], *, delay: timedelta | None = None
    ) -> list[bool]:
        return list(await self._call("enqueue_batch", tasks=list(tasks), delay=delay))

    async def claim_due(
        self, queue: str, limit: int, lease: timedelta, *, worker_id: str | None = None
    ) -> list[Claimed]:
        answer = await self._call(
            "claim_due", queue=queue, limit=limit, lease=lease, worker_id=worker_id
        )
        return [_wire.claimed(item) for item in answer]

    async def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        answer = await self._call("extend_lease", task_id=task_id, token=token, lease=lease)
        return _wire.datetime_of(answer)

    async def reschedule(
        self, task_id: str, token: str, attempt: Attempt, next_at: datetime
    ) -> None:
        await self._call(
            "reschedule", task_id=task_id, token=token, attempt=attempt, next_at=next_at
        )

    async def complete(
        self, task_id: str, token: str, attempt: Attempt, *, discard: bool = False
    ) -> None:
        await self._call("complete", task_id=task_id, token=token, attempt=attempt, discard=discard)

    async def dead_letter(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._call("dead_letter", task_id=task_id, token=token, attempt=attempt)

    async def complete_many(
        self, completions: Sequence[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        answer = await self._call("complete_many", completions=list(completions))
        results: list[StaleClaim | NotFound | None] = []
        for item in answer:
            error = None if item is None else _wire.error_of(item)
            if error is not None and not isinstance(error, StaleClaim | NotFound):
                raise error
            results.append(error)
        return results

    async def dlq_list(
        self, queue: str, dlq_filter: DLQFilter | None, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return _wire.page_of(
            await self._call("dlq_list", queue=queue, filter=dlq_filter, page=page)
        )

    async def get(self, task_id: str) -> Envelope:
        return _wire.envelope(await self._call("get", task_id=task_id))

    async def redrive(self, queue: str, selector: Selector) -> int:
        return int(await self._call("redrive", queue=queue, selector=selector))

    async def purge(self, queue: str, selector: Selector) -> int:
        return int(await self._call("purge", queue=queue, selector=selector))

    async def dlq_groups(self, queue: str) -> list[DLQGroup]:
        return _wire.groups_of(await self._call("dlq_groups", queue=queue))

    async def list_tasks(
        self, queue: str, task_filter: TaskFilter, page: Page
    ) -> tuple[list[Envelope], str | None]:
        return _wire.page_of(
            await self._call("list_tasks", queue=queue, filter=task_filter, page=page)
        )

    async def cancel(self, queue: str, task_ids: Sequence[str]) -> int:
        return int(await self._call("cancel", queue=queue, task_ids=list(task_ids)))

    async def list_queues(self) -> list[Stats]:
        return [_wire.stats_of(item) for item in await self._call("list_queues")]

    async def import_tasks(self, tasks: Sequence[Envelope]) -> list[bool]:
        return list(await self._call("import_tasks", tasks=list(tasks)))

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        return _wire.audit_of(await self._call("append_audit", entry=entry))

    async def list_audit(
        self, audit_filter: AuditFilter | None, page: Page
    ) -> tuple[list[AuditEntry], str | None]:
        answer = await self._call("list_audit", filter=audit_filter, page=page)
        return [_wire.audit_of(item) for item in answer["items"]], answer["cursor"]

    async def now(self) -> datetime:
        return _wire.datetime_of(await self._call("now"))

    async def stats(self, queue: str) -> Stats:
        return _wire.stats_of(await self._call("stats", queue=queue))

    async def purge_succeeded(self, queue: str, older_than: datetime) -> int:
        return int(await self._call("purge_succeeded", queue=queue, older_than=older_than))

    async def wait_due(self, queue: str, timeout: float) -> bool:
        return bool(await self._call("wait_due", queue=queue, timeout=timeout))

    # --- contract version 5: retention, dedup keys, payload references --------------------------

    async def admit(
        self, task: Envelope, dedup: Dedup, *, delay: timedelta | None = None
    ) -> Admitted:
        answer = await self._call("admit", task=task, dedup=dedup, delay=delay)
        return msgspec.convert(answer, Admitted)

    async def expire_tasks(self, queue: str, task_ids: Sequence[str], before: datetime) -> int:
        return int(await self._call("expire_tasks", queue=queue, ids=list(task_ids), before=before))

    async def _held_payload_refs(self, refs: Sequence[str]) -> set[str]:
        return set(await self._call("held_payload_refs", refs=list(refs)))

    # --- contract version 3: flow control, the fleet, counts ----------------------------------

    async def list_controls(self, queue: str | None = None) -> list[Control]:
        return [_wire.control_of(item) for item in await self._call("list_controls", queue=queue)]

    async def put_control(self, control: Control, *, expected_version: int) -> Control:
        answer = await self._call("put_control", control=control, expected_version=expected_version)
        return _wire.control_of(answer)

    async def delete_control(self, queue: str, key: str, *, expected_version: int) -> bool:
        answer = await self._call(
            "delete_control", queue=queue, key=key, expected_version=expected_version
        )
        return bool(answer)

    async def retry_now(self, queue: str, task_ids: Sequence[str]) -> int:
        return int(await self._call("retry_now", queue=queue, task_ids=list(task_ids)))

    async def heartbeat_worker(self, info: WorkerInfo) -> WorkerInfo:
        return _wire.worker_of(await self._call("heartbeat_worker", info=info))

    async def list_workers(self) -> list[WorkerInfo]:
        return [_wire.worker_of(item) for item in await self._call("list_workers")]

    async def remove_worker(self, worker_id: str) -> bool:
        return bool(await self._call("remove_worker", worker_id=worker_id))

    async def purge_workers(self, seen_before: datetime) -> int:
        return int(await self._call("purge_workers", seen_before=seen_before))

    async def add_counts(self, counts: Sequence[Counts]) -> None:
        await self._call("add_counts", counts=list(counts))

    async def read_counts(self, queue: str | None, since: datetime) -> list[Counts]:
        return _wire.counts_of(await self._call("read_counts", queue=queue, since=since))

    async def purge_counts(self, before: datetime) -> int:
        return int(await self._call("purge_counts", before=before))
