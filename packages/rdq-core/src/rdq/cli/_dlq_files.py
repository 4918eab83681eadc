"""``rdq dlq export`` and ``rdq dlq import``: a queue's DLQ to a JSON Lines file (every attempt
included) and dead tasks back from one — an export, or the archive retention and purges write
(:mod:`rdq.retention`). Both work on a store or through a node, like the other DLQ commands.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from rdq.cli._common import EXIT_NOTHING, EXIT_PARTLY, echo_json, exit_code, json_option, run_async
from rdq.cli._options import actor_options, dlq_filter, filter_options, open_target, target_options

__all__ = ["export_dlq", "import_dlq"]

_PAGE = 500
_IMPORT_BATCH_BYTES = 512 * 1024
"""What one import request carries at most (a node refuses bodies past its limit)."""


@click.command()
@click.argument("queue")
@filter_options("Dead-lettered")
@click.option(
    "--to",
    "to_file",
    required=True,
    metavar="FILE",
    help="Write here (gzip-compressed when FILE ends in .gz; - for standard output). The file "
    "appears only once it is complete.",
)
@target_options
@json_option
@run_async
async def export_dlq(
    queue: str,
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | None,
    before: datetime | None,
    to_file: str,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Write the dead-lettered tasks of QUEUE (those a filter selects) to FILE, one JSON task
    per line with every attempt, oldest first; rdq dlq import puts them back."""
    from rdq.retention import ExportFile
    from rdq.spi import envelope_from_builtins

    selected = dlq_filter(error_type, handler_ref, after, before)
    out = ExportFile(to_file)
    try:
        async with open_target(storage_url, server_url, token) as target:
            async for part in target.export(queue, selected):
                out.add(envelope_from_builtins(task) for task in part)
    except BaseException:
        out.abort()
        raise
    count = out.finish()
    if as_json:
        echo_json({"queue": queue, "exported": count, "to": to_file})
    elif to_file != "-":
        click.echo(f"{count} dead task(s) of queue {queue} written to {to_file}")
    if count == 0:
        exit_code(EXIT_NOTHING)


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="FILE|DIR...")
@click.option("--queue", help="Only the tasks of this queue.")
@click.option("--reason", help="Why (kept in the audit record).")
@actor_options
@target_options
@json_option
@run_async
async def import_dlq(
    sources: tuple[str, ...],
    queue: str | None,
    reason: str | None,
    actor: str | None,
    audit_log: str | None,
    storage_url: str | None,
    server_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Put the dead tasks of exports or archives (files, gzip-compressed or not, or
    directories of them; - for standard input) back into their queue's DLQ: ids, attempts
    and times kept. Idempotent: a task the store already holds is left as it is. Tasks that
    are not DEAD, or whose id another queue holds, are skipped and named."""
    from rdq.retention import Problem, read_tasks
    from rdq.spi import envelope_to_builtins

    problems: list[Problem] = []
    total: dict[str, Any] = {"imported": 0, "existing": 0, "skipped": [], "queues": {}}
    target = open_target(storage_url, server_url, token, actor=actor, audit_log=audit_log)
    async with target:
        batches: dict[str, tuple[list[dict[str, Any]], int]] = {}

        async def flush(name: str) -> None:
            tasks, _ = batches.pop(name, ([], 0))
            if tasks:
                _add(total, name, await target.import_dead(name, tasks, reason))

        for source in sources:
            for task in read_tasks(source, problems):
                if queue is not None and task.queue != queue:
                    continue
                body = envelope_to_builtins(task)
                tasks, size = batches.get(task.queue, ([], 0))
                tasks.append(body)
                size += len(str(body))
                batches[task.queue] = (tasks, size)
                if size >= _IMPORT_BATCH_BYTES or len(tasks) >= _PAGE:
                    await flush(task.queue)
        for name in list(batches):
            await flush(name)
    total["problems"] = [p.text for p in problems]
    if as_json:
        echo_json(total)
    else:
        click.echo(
            f"{total['imported']} dead task(s) imported, {total['existing']} already there, "
            f"{len(total['skipped'])} skipped"
        )
        for skipped in total["skipped"][:20]:
            click.echo(f"  {skipped['id']}: {skipped['why']}", err=True)
        if len(total["skipped"]) > 20:
            click.echo(f"  … and {len(total['skipped']) - 20} more (--json lists them)", err=True)
        for problem in problems:
            click.echo(f"  {problem.text}", err=True)
    if total["imported"] == 0 and total["existing"] == 0:
        exit_code(EXIT_NOTHING)
    elif total["skipped"] or problems:
        exit_code(EXIT_PARTLY)


def _add(total: dict[str, Any], queue: str, answer: dict[str, Any]) -> None:
    total["imported"] += answer.get("imported", 0)
    total["existing"] += answer.get("existing", 0)
    total["skipped"] += answer.get("skipped", [])
    if answer.get("imported"):
        total["queues"][queue] = total["queues"].get(queue, 0) + answer["imported"]
