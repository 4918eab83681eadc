"""The workers' own record of the tasks they ran, for systems whose store keeps no record of a
completed task (graphile-worker deletes a job, rdq with ``keep_succeeded=False`` a task).

Each worker process appends the number of every task whose handler it ran and writes the
list, as a JSON array, to a file of its own in the system's ledger directory when it stops;
``problems`` then tells whether each of the phase's tasks ran exactly once."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

__all__ = ["ledger_dir", "problems", "runs", "write"]


def ledger_dir(url: str) -> Path:
    """Where the worker processes of the system on ``url`` record the tasks they ran."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"rdq-bench-ledger-{digest}"


def write(directory: Path, ran: list[int]) -> None:
    """Write one worker process's record (the task numbers it ran, in order)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{os.getpid()}.json").write_text(json.dumps(ran))


def runs(directory: Path) -> Counter[int]:
    """How often each task number ran, over every worker process's record."""
    counted: Counter[int] = Counter()
    for path in directory.glob("*.json"):
        counted.update(json.loads(path.read_text()))
    return counted


def problems(counted: Counter[int], expected: int) -> list[str]:
    """What is wrong with ``counted`` for tasks ``0 .. expected - 1``: tasks that ran twice or
    more, that never ran, unknown numbers ([] when each ran exactly once)."""
    found = []
    twice = sorted(i for i, n in counted.items() if n > 1)
    never = [i for i in range(expected) if i not in counted]
    strange = sorted(i for i in counted if not 0 <= i < expected)
    if twice:
        found.append(f"{len(twice)} tasks ran more than once (first: {twice[:5]})")
    if never:
        found.append(f"{len(never)} tasks never ran (first: {never[:5]})")
    if strange:
        found.append(f"{len(strange)} unknown task numbers ran (first: {strange[:5]})")
    return found
