"""Claims (``claim_due``): the claim of a queue without controls, the claim through its
controls, and what ``wait_due`` needs to know about tasks the controls hold back.

Every claim runs inside one write transaction: ``BEGIN IMMEDIATE`` holds the database's write
lock, so the controls read, the tasks leased and what the claim takes from gates and rate
buckets are one atomic step. :func:`claim` reads, with the clock row, whether the queue has a
control record or held tasks (two index seeks); a queue without them is claimed as it always
was (:func:`_pick_plain`: one index seek per priority that holds claimable tasks), one with
them through its controls (:func:`pick`). Both lease what they picked in the same
transaction, with a ``LEASE_EXPIRED`` record for each lapsed lease reclaimed.

Claims through controls decide in Python with :class:`rdq.spi.ClaimGate` (the rule as the
reference store applies it). :func:`pick` reads the queue's control records and, when one sets
a concurrency limit, the live leases per key (``in_use.sql``: one range of the status index
over the queue's live leases, never the tasks waiting), builds the gate and visits candidates
in claim order (priority, then due time, then id) from

- the claim index (tasks no claim has held back), one priority at a time, and
- the tasks *held* under each key whose control lets tasks through now (index ``task_held``).

A candidate that a control holds back is skipped, and held: its ``held`` column is set to the
first of its keys that held it back, which moves it from the claim index to ``task_held``. A
deep backlog behind a pause (or a full concurrency limit, an empty bucket, a closed gate) is
therefore passed over once, by the claims that meet it (after :data:`HOLD_ALL_AFTER` skips
for one key a claim holds that key's due tasks in one statement), and not by every claim
after: later claims read the held tasks of a key only while that key lets tasks through, and
stop reading them at the first one it holds back. A held task another of its keys holds back
moves to that key. Claiming, rescheduling, redriving a task or extending its lease clears
``held``; deleting a control, or lifting every limit it sets, releases the tasks held under
its key at once.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from rdq.spi import (
    MAX_PRIORITY,
    NO_GROUP,
    QUEUE_KEY,
    Attempt,
    Bucket,
    Claimed,
    ClaimGate,
    ClaimOrder,
    Control,
    OrderKey,
    Outcome,
    Status,
    handler_key,
)
from rdq_sqlite._clock import advance
from rdq_sqlite._codec import (
    at_us,
    decode_keys,
    encode_attempt,
    envelope_from_row,
    from_us,
    ids_param,
    to_us,
)
from rdq_sqlite._controls import control_from_row, live_leases
from rdq_sqlite._queries import SQL

__all__ = ["claim", "claimable_at", "pick"]

Row = tuple[Any, ...]
"""A candidate as ``claim_scan.sql`` and ``held_candidates.sql`` select it: id, status,
attempt_count, lease_expires_at, claimed_at, claimed_by, due time, handler_ref, keys."""

MAX_SKIPS = 512
"""Candidates one claim may hold back before it returns what it has: a bound on how long one
claim keeps the write lock. The tasks it held back are out of the way of the next claim."""

HOLD_ALL_AFTER = 32
"""Candidates one key may hold back in one claim before the claim holds the queue's due tasks
with that key in one statement (``hold_handler.sql``, ``hold_key.sql``) instead of one by one,
up to :data:`HOLD_CHUNK` of them: a deep backlog is passed over in a few claims."""

HOLD_CHUNK = 5000
"""Tasks one claim may hold in such statements (about 50 ms of the write lock on the
development VM): a claim stays short however deep the backlog; the next claim goes on."""

_HANDLER = handler_key("")  # "handler:", the prefix of every handler's key


def claim(
    conn: sqlite3.Connection, queue: str, limit: int, lease_us: int, worker_id: str | None
) -> list[Claimed]:
    """Claim up to ``limit`` due tasks of ``queue``, highest priority first, then oldest due.

    The clock row and whether the queue has controls (or held tasks) are one read; a queue
    without them is claimed as it always was (:func:`_pick_plain`), one with them through its
    controls (:func:`pick`), in the same transaction."""
    latest, controlled = conn.execute(SQL.claim_clock, {"queue": queue}).fetchone()
    now = advance(conn, latest)
    picked = (pick if controlled else _pick_plain)(conn, queue, limit, now)
    if not picked:
        return []
    common = {"expires": now + lease_us, "now": now, "worker_id": worker_id}
    claimed: dict[str, tuple[Any, ...]] = {}
    pending = [row[0] for row in picked if row[1] == Status.PENDING]
    if pending:
        for row in conn.execute(SQL.claim_pending, {"ids": ids_param(pending), **common}):
            claimed[row[1]] = row
    for task_id, status, attempt_count, lease_expires_at, claimed_at, claimed_by in picked:
        if status == Status.PENDING:
            continue
        lapsed = from_us(lease_expires_at)
        record = Attempt(
            number=attempt_count + 1,
            outcome=Outcome.LEASE_EXPIRED,
            error_type="LeaseExpired",
            error_message=(
                f"lease expired at {lapsed.isoformat() if lapsed else '?'} "
                "before the attempt was resolved"
            ),
            started_at=from_us(claimed_at),
            finished_at=from_us(now),
            worker_id=claimed_by,
        )
        row = conn.execute(
            SQL.claim_expired, {"id": task_id, "attempt": encode_attempt(record), **common}
        ).fetchone()
        claimed[row[1]] = row
    return [Claimed(envelope_from_row(claimed[row[0]][1:]), claimed[row[0]][0]) for row in picked]


def _pick_plain(
    conn: sqlite3.Connection, queue: str, limit: int, now: int
) -> list[tuple[Any, ...]]:
    """Up to ``limit`` due tasks of a queue without controls, in claim order.

    The priorities are visited with one index seek each (only those that hold claimable
    tasks), so tasks due later never make a claim scan."""
    picked: list[tuple[Any, ...]] = []
    below = MAX_PRIORITY + 1
    while len(picked) < limit:
        found = conn.execute(SQL.claim_next_priority, {"queue": queue, "below": below}).fetchone()
        if found is None:
            break
        below = found[0]
        picked += conn.execute(
            SQL.claim_candidates,
            {"queue": queue, "priority": below, "now": now, "limit": limit - len(picked)},
        ).fetchall()
    return picked


class _Flow:
    """The controls of one queue at one instant: the gate, and the live leases behind it."""

    def __init__(self, conn: sqlite3.Connection, queue: str, now: int) -> None:
        self.controls: dict[str, Control] = {}
        buckets: dict[str, Bucket] = {}
        for row in conn.execute(SQL.queue_controls, {"queue": queue}):
            control, bucket = control_from_row(row)
            self.controls[control.key] = control
            if bucket is not None:
                buckets[control.key] = bucket
        limited = [c.key for c in self.controls.values() if c.concurrency is not None]
        self.leases = live_leases(conn, queue, now) if limited else {}
        self.gate = ClaimGate(
            self.controls,
            buckets,
            {key: self.leases[key][0] for key in limited if key in self.leases},
            at_us(now),
        )

    def blocker(self, keys: Sequence[str]) -> str | None:
        """The first of ``keys`` whose control holds a task back now, or ``None``."""
        gate = self.gate
        for key in keys:
            if key in gate.controls and not gate.admits((key,)):
                return key
        return None

    def admits_at(self, key: str, now: int) -> int | None:
        """The earliest time (microseconds) the control of ``key`` may let a task through, as
        far as time alone can change it: ``None`` for a pause, a closed gate or a limit of 0
        (only a change of the control opens those)."""
        gate = self.gate
        control = gate.controls.get(key)
        if control is None:
            return now
        left = gate.gates.get(key)
        if control.paused or (left is not None and left < 1):
            return None
        at = now
        if control.concurrency is not None and gate.in_use[key] >= control.concurrency:
            lease = self.leases.get(key)
            if lease is None:
                return None
            at = max(at, lease[1])  # the first live lease to end frees a slot
        bucket = gate.buckets.get(key)  # refilled to now
        if bucket is not None and bucket.tokens < 1 and control.rate:
            wait = (1 - bucket.tokens) * control.per / control.rate
            at = max(at, now + math.ceil(wait * 1e6))
        return at


def _held_keys(conn: sqlite3.Connection, queue: str) -> list[str]:
    """The keys under which tasks of ``queue`` are held: one seek of ``task_held`` each."""
    keys: list[str] = []
    after = ""
    while True:
        key = conn.execute(SQL.held_keys, {"queue": queue, "after": after}).fetchone()[0]
        if key is None:
            return keys
        keys.append(key)
        after = key


class _Stream:
    """Candidates of one queue in claim order: the claim index's (``key`` None) or the tasks
    held under ``key``; :meth:`rows` reads one priority in chunks by keyset, so it never keeps
    a cursor open while the claim writes, and stops once the stream is :attr:`closed`."""

    def __init__(self, conn: sqlite3.Connection, queue: str, key: str | None, now: int) -> None:
        self.conn = conn
        self.key = key
        self.closed = False
        self.params: dict[str, Any] = {"queue": queue, "now": now}
        if key is not None:
            self.params["key"] = key
        self.top, self.scan = (
            (SQL.claim_next_priority, SQL.claim_scan)
            if key is None
            else (SQL.held_priority, SQL.held_candidates)
        )

    def is_open(self) -> bool:
        """False once the claim closed the stream (its key holds back its tasks now)."""
        return not self.closed

    def next_priority(self, below: int) -> int | None:
        found = self.conn.execute(self.top, {**self.params, "below": below}).fetchone()
        return None if found is None else int(found[0])

    def rows(self, priority: int, first: int) -> Iterator[tuple[int, str, Row, _Stream]]:
        after: tuple[int, str] = (-(2**63), "")
        size = max(1, first)
        while self.is_open():
            chunk = self.conn.execute(
                self.scan,
                {
                    **self.params,
                    "priority": priority,
                    "after_at": after[0],
                    "after_id": after[1],
                    "limit": size,
                },
            ).fetchall()
            for row in chunk:
                if not self.is_open():
                    return
                yield row[6], row[0], row, self
            if len(chunk) < size:
                return
            after = (chunk[-1][6], chunk[-1][0])
            size = min(size * 2, 256)


def pick(conn: sqlite3.Connection, queue: str, limit: int, now: int) -> list[Row]:
    """Inside the claim's write transaction: up to ``limit`` due tasks of ``queue`` that its
    controls let through, in claim order, as ``(id, status, attempt_count,
    lease_expires_at, claimed_at, claimed_by)``. Takes from the gates and rate buckets what
    the claim uses and holds the candidates it skipped (see the module docstring)."""
    flow = _Flow(conn, queue, now)
    gate = flow.gate
    if not gate.admits((QUEUE_KEY,)):
        return []
    gates = dict(gate.gates)
    tokens = {key: bucket.tokens for key, bucket in gate.buckets.items()}
    order = ClaimOrder.of(flow.controls.get(QUEUE_KEY))
    if not order.strict:
        in_order = _pick_in_order(conn, queue, limit, now, gate, order)
        _take(conn, queue, gate, gates, tokens)
        return in_order
    streams = [_Stream(conn, queue, None, now)]
    streams += [
        _Stream(conn, queue, key, now)
        for key in _held_keys(conn, queue)
        if flow.blocker((key,)) is None
    ]
    picked: list[Row] = []
    holds: dict[str, str] = {}
    skipped = 0
    by_key: Counter[str] = Counter()
    chunk = HOLD_CHUNK
    below = MAX_PRIORITY + 1
    while len(picked) < limit and skipped < MAX_SKIPS and gate.admits((QUEUE_KEY,)):
        tops = [(s.next_priority(below), s) for s in streams if not s.closed]
        live = [(p, s) for p, s in tops if p is not None]
        if not live:
            break
        streams = [s for _, s in live]
        below = max(p for p, _ in live)
        level = [s.rows(below, limit - len(picked)) for p, s in live if p == below]
        for _, task_id, row, stream in heapq.merge(*level, key=lambda c: (c[0], c[1])):
            keys = [QUEUE_KEY, handler_key(row[7]), *decode_keys(row[8])]
            held_by = flow.blocker(keys)
            if held_by is None:
                gate.take(keys)
                picked.append(row[:6])
                if len(picked) == limit or not gate.admits((QUEUE_KEY,)):
                    break
                continue
            if held_by == QUEUE_KEY:
                break
            if held_by == stream.key:
                stream.closed = True  # its key holds back the rest of its tasks too
            else:
                holds[task_id] = held_by
                by_key[held_by] += 1
                if by_key[held_by] % HOLD_ALL_AFTER == 0 and chunk > 0:
                    chunk -= _hold_all(conn, queue, held_by, now, chunk)
            skipped += 1
            if skipped >= MAX_SKIPS:
                break
    if holds:
        conn.executemany(SQL.hold, [{"id": i, "key": k} for i, k in holds.items()])
    _take(conn, queue, gate, gates, tokens)
    return picked


def _pick_in_order(
    conn: sqlite3.Connection, queue: str, limit: int, now: int, gate: ClaimGate, order: ClaimOrder
) -> list[Row]:
    """``pick`` for a queue whose own control asks for fair shares or priority aging: the due
    tasks (held or not) that no control holds back from the start, in the order
    :class:`ClaimOrder` defines, taken while the controls let each through (a task a limit
    used up by the tasks before it holds back is skipped where it stands). Holds nothing.

    The tasks are read from ``task_group`` (the group kept at admission, migration 0004): the
    groups by one seek each, each group's priorities by one seek each, and each group's tasks
    lazily in its claim order, every group's first before any group's second — at most about
    ``limit`` tasks of a group (more only past tasks held back), however deep its backlog. A
    group whose own key holds its tasks back is passed over whole."""
    fair = order.fair is not None
    # '' (the tasks without a key of the family; every task of a queue that is not fair)
    # sorts before every other group; the others by one seek each
    groups: list[str] = []
    if (
        conn.execute(
            SQL.group_priority, {"queue": queue, "grp": NO_GROUP, "below": MAX_PRIORITY + 1}
        ).fetchone()[0]
        is not None
    ):
        groups.append(NO_GROUP)
    after = NO_GROUP
    while found := conn.execute(SQL.group_next, {"queue": queue, "after": after}).fetchone()[0]:
        after = found
        if not (fair and gate.closed_from_start((found,))):  # else its own key holds all back
            groups.append(found)
    streams = [(g, _group_stream(conn, queue, g, now, order, limit, gate)) for g in groups]
    heap: list[tuple[int, OrderKey, int, Row, list[str], str]] = []
    tie = itertools.count()
    feeds: dict[str, Iterator[tuple[OrderKey, Row, list[str]]]] = {}
    for grp, stream in streams:
        head = next(stream, None)
        if head is not None:
            feeds[grp] = stream
            heap.append((0, head[0], next(tie), head[1], head[2], grp))
    heapq.heapify(heap)
    picked: list[Row] = []
    while heap and len(picked) < limit and gate.admits((QUEUE_KEY,)):
        rank, _, _, row, keys, grp = heapq.heappop(heap)
        if gate.admits(keys):
            gate.take(keys)
            picked.append(row[:6])
        elif fair and grp != NO_GROUP and not gate.admits((grp,)):
            continue  # the group's own key is used up: the rest of the group is held back
        head = next(feeds[grp], None)
        if head is not None:
            heapq.heappush(heap, (rank + 1, head[0], next(tie), head[1], head[2], grp))
    return picked


def _group_stream(
    conn: sqlite3.Connection,
    queue: str,
    grp: str,
    now: int,
    order: ClaimOrder,
    first: int,
    gate: ClaimGate,
) -> Iterator[tuple[OrderKey, Row, list[str]]]:
    """The due tasks of group ``grp`` that no control holds back from the start of the claim,
    in the group's claim order (:meth:`ClaimOrder.key`), read lazily: one priority after
    another (strict), or every priority's stream merged by aged due time (aging)."""

    def level(priority: int) -> Iterator[tuple[OrderKey, Row, list[str]]]:
        after: tuple[int, str] = (-(2**63), "")
        size = max(1, first)
        while True:
            chunk = conn.execute(
                SQL.group_scan,
                {
                    "queue": queue,
                    "grp": grp,
                    "priority": priority,
                    "now": now,
                    "after_at": after[0],
                    "after_id": after[1],
                    "limit": size,
                },
            ).fetchall()
            for row in chunk:
                keys = [QUEUE_KEY, handler_key(row[7]), *decode_keys(row[8])]
                if not gate.closed_from_start(keys):
                    yield order.key(priority, at_us(row[6])), row, keys
            if len(chunk) < size:
                return
            after = (chunk[-1][6], chunk[-1][0])
            size = min(size * 2, 256)

    def priorities() -> Iterator[int]:
        below = MAX_PRIORITY + 1
        while True:
            found = conn.execute(
                SQL.group_priority, {"queue": queue, "grp": grp, "below": below}
            ).fetchone()[0]
            if found is None:
                return
            below = int(found)
            yield below

    if order.aging is None:
        for priority in priorities():
            yield from level(priority)
    else:
        yield from heapq.merge(*(level(p) for p in priorities()), key=lambda e: e[0])


def _take(
    conn: sqlite3.Connection,
    queue: str,
    gate: ClaimGate,
    gates: dict[str, int],
    tokens: dict[str, float],
) -> None:
    """Write back what the claim took from the gates and rate buckets."""
    for key, left in gate.gates.items():
        if left != gates[key]:
            conn.execute(SQL.take_gate, {"queue": queue, "key": key, "gate": left})
    for key, bucket in gate.buckets.items():
        if bucket.tokens != tokens[key]:
            conn.execute(
                SQL.take_tokens,
                {"queue": queue, "key": key, "tokens": bucket.tokens, "at": to_us(bucket.at)},
            )


def _hold_all(conn: sqlite3.Connection, queue: str, key: str, now: int, chunk: int) -> int:
    """Hold up to ``chunk`` due tasks of ``queue`` in the claim index that have ``key``; how
    many. Within one claim a key that held a task back holds back every later one (gates,
    slots and tokens only go down); tasks this claim picked are released when leased."""
    params = {"queue": queue, "key": key, "now": now, "chunk": chunk}
    if key.startswith(_HANDLER):
        params["handler_ref"] = key.removeprefix(_HANDLER)
        return conn.execute(SQL.hold_handler, params).rowcount
    return conn.execute(SQL.hold_key, params).rowcount


def claimable_at(conn: sqlite3.Connection, queue: str, now: int, due: int | None) -> int | None:
    """For ``wait_due``: the earliest time a task of ``queue`` may be claimable, given ``due``,
    the earliest due time in the claim index. With controls, a paused (or closed, or full, or
    rate-limited) queue is not due before its control lets tasks through, and tasks held under
    a key count from when that key may let them through: so a worker does not spin on tasks
    its claims would skip."""
    if not conn.execute(SQL.queue_controlled, {"queue": queue}).fetchone()[0]:
        return due
    flow = _Flow(conn, queue, now)
    opens = flow.admits_at(QUEUE_KEY, now)
    if opens is None:
        return None
    times = [due] + [flow.admits_at(key, now) for key in _held_keys(conn, queue)]
    known = [t for t in times if t is not None]
    return max(min(known), opens) if known else None
