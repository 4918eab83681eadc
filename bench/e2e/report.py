"""Results: raw measurements, medians over repetitions, the side-by-side table and JSON lines."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["METRICS", "Metric", "Results", "durability_line", "percentile", "rows_lines"]


@dataclass(frozen=True)
class Metric:
    """One figure of the table."""

    key: str
    label: str
    unit: str
    higher_is_better: bool


METRICS = [
    Metric("enqueue_single", "enqueue, one at a time", "tasks/s", True),
    Metric("enqueue_batch", "enqueue, batches", "tasks/s", True),
    Metric("drain_1", "drain, 1 worker process", "tasks/s", True),
    Metric("drain_8", "drain, 8 worker processes", "tasks/s", True),
    Metric("latency_notify_p50", "idle submit→start p50, notify", "ms", False),
    Metric("latency_notify_p99", "idle submit→start p99, notify", "ms", False),
    Metric("latency_poll_p50", "idle submit→start p50, polling", "ms", False),
    Metric("latency_poll_p99", "idle submit→start p99, polling", "ms", False),
    Metric("worker_rss", "worker peak RSS (drain, 1 process)", "MiB", False),
    Metric("memory_drain", "drain of the memory phase, 1 process", "tasks/s", True),
    Metric("memory_rss", "worker peak RSS, memory phase", "MiB", False),
]
_BY_KEY = {m.key: m for m in METRICS}


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def metric(key: str) -> Metric:
    """The metric named ``key`` (a key with a suffix, like ``drain_4``, gets a label)."""
    if key in _BY_KEY:
        return _BY_KEY[key]
    if key.startswith("drain_"):
        return Metric(key, f"drain, {key[6:]} worker processes", "tasks/s", True)
    if key.startswith("cpu_worker_"):
        n = key.rsplit("_", 1)[1]
        return Metric(key, f"worker CPU per task, drain with {n}", "µs", False)
    if key.startswith("cpu_db_"):
        n = key.rsplit("_", 1)[1]
        return Metric(key, f"server CPU per task, drain with {n}", "µs", False)
    if key.startswith("wal_per_task_"):
        n = key.rsplit("_", 1)[1]
        return Metric(key, f"WAL per task, drain with {n}", "B", False)
    if key.startswith("commits_per_task_"):
        n = key.rsplit("_", 1)[1]
        return Metric(key, f"commits per task, drain with {n}", "commits", False)
    raise KeyError(key)


@dataclass
class Results:
    """Every measurement of one run, by system and metric, in repetition order."""

    systems: list[str]
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, system: str, key: str, value: float) -> dict[str, Any]:
        """Record one measurement; return its JSON record."""
        self.values.setdefault((system, key), []).append(value)
        m = metric(key)
        return {
            "kind": "measurement",
            "system": system,
            "metric": key,
            "unit": m.unit,
            "repetition": len(self.values[(system, key)]),
            "value": round(value, 3),
        }

    def median(self, system: str, key: str) -> float | None:
        values = self.values.get((system, key))
        return statistics.median(values) if values else None

    def keys(self) -> list[str]:
        """The metrics measured, in table order."""
        seen = {key for _, key in self.values}
        ordered = [m.key for m in METRICS if m.key in seen]
        extra = sorted(k for k in seen if k not in _BY_KEY)
        drains = sorted((k for k in extra if k.startswith("drain_")), key=_count)
        cpu = sorted((k for k in extra if k.startswith("cpu_")), key=lambda k: (_count(k), k))
        costs = sorted(
            (k for k in extra if k.startswith(("wal_per_task_", "commits_per_task_"))),
            key=lambda k: (_count(k), not k.startswith("wal")),
        )
        return ordered[:2] + drains + ordered[2:] + cpu + costs

    def summary(self) -> list[dict[str, Any]]:
        """One JSON record per (system, metric): the median and the values, plus rdq/peer."""
        records = []
        for key in self.keys():
            m = metric(key)
            for system in self.systems:
                med = self.median(system, key)
                if med is None:
                    continue
                record: dict[str, Any] = {
                    "kind": "summary",
                    "system": system,
                    "metric": key,
                    "unit": m.unit,
                    "higher_is_better": m.higher_is_better,
                    "median": round(med, 3),
                    "values": [round(v, 3) for v in self.values[(system, key)]],
                }
                base = self.median("rdq", key)
                if system != "rdq" and base is not None and med:
                    record["rdq_ratio"] = round(base / med, 3)
                records.append(record)
        return records

    def table(self) -> str:
        """The side-by-side table: each system's median and rdq/peer for each peer."""
        peers = [s for s in self.systems if s != "rdq"]
        header = ["metric", "unit", *self.systems, *(f"rdq/{p}" for p in peers)]
        rows = [header]
        for key in self.keys():
            m = metric(key)
            label = m.label + ("" if m.higher_is_better else " (lower is better)")
            row = [label, m.unit]
            for system in self.systems:
                med = self.median(system, key)
                row.append("—" if med is None else _fmt(med))
            base = self.median("rdq", key)
            for peer in peers:
                med = self.median(peer, key)
                row.append("—" if base is None or not med else f"{base / med:.2f}×")
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = []
        for n, row in enumerate(rows):
            cells = [
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("| " + " | ".join(cells) + " |")
            if n == 0:
                lines.append(
                    "|"
                    + "|".join(
                        ("-" * (w + 1) + ":") if i else "-" * (w + 2) for i, w in enumerate(widths)
                    )
                    + "|"
                )
        return "\n".join(lines)


def durability_line(settings: dict[str, str]) -> str:
    """The server's durability settings as the run found them, one line (those not read are
    left out)."""
    names = ("fsync", "synchronous_commit", "full_page_writes", "wal_level")
    shown = [f"{n}={settings[n]}" for n in names if n in settings]
    return "PostgreSQL durability: " + (", ".join(shown) if shown else "not read")


def rows_lines(rows: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """The rows each system left after each drain of the last repetition: one line per
    system and drain (``rows`` maps system → drain → table → count)."""
    lines = []
    for system, drains in rows.items():
        for drain, counts in drains.items():
            shown = ", ".join(f"{t} {n:,}" for t, n in counts.items()) or "none"
            lines.append(f"rows left, {system} after {drain}: {shown}")
    return lines


def _count(key: str) -> int:
    return int(key.rsplit("_", 1)[1])


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def emit(record: dict[str, Any], *streams: TextIO | None) -> None:
    """Write ``record`` as one JSON line to each stream given."""
    line = json.dumps(record, default=str)
    for stream in streams:
        if stream is not None:
            stream.write(line + "\n")
            stream.flush()
