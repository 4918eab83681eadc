"""One ``claim_due`` call (:class:`Claim`): leasing due tasks by findAndModify, honouring the
queue's control records.

**No record restricts the queue** (the common case): one lookup of the queue's control
document by ``_id`` (finding none, or records that neither pause nor limit), then what the
claim always was: one ``findAndModify`` per task, up to ``limit``, each picking the highest
priority, oldest due task and leasing it in the same atomic step.

**Pauses only**: the same loop, the filter leaving out the paused handlers (``handler_ref``
``$nin``, in the claim index) and the tasks with a paused key (``keys`` ``$nin``). A paused
queue (``*``) claims nothing, without touching a task.

**Gates, concurrency and rate limits** (``View.limited``): rounds of

1. count the live leases of each concurrency-limited key (one aggregation), leaving out
   those made under a reservation the record still holds: each lease is stamped with the
   take that reserved its slot (``reservation``), so a slot counts once, as a reservation
   until the take settles and as a lease after;
2. peek at the next due tasks (a ``find`` of their handler and keys, the ones paused or
   already held back in this call filtered out);
3. decide in Python with ``rdq.spi.ClaimGate`` which of them the records let through, in
   claim order, and how many each limited key gives: ``totals``;
4. **take** ``totals`` in one conditional update of the queue's control document: its
   filter checks that each record is unchanged (its write id), that each gate and refilled
   bucket holds enough, and that live leases plus every claim's reservations plus these
   stay within each concurrency limit, with no reservation removed since the count
   (``seq``); the update takes from the gates and buckets and adds a reservation of
   concurrency slots under a fresh id of this take. It applies whole or not at all. If it
   does not (another claimant took or settled first), wait a moment (a jittered backoff:
   racing claimants stop colliding in step), read, count and decide again;
5. lease, for each task let through, the best due task with **exactly its limited keys**
   (the same ``findAndModify`` as above, filtered by those keys): any such task takes from
   the limits what the decision counted;
6. **settle** in one update: give back to the gates and buckets what was taken and not
   leased (unless the record was written meanwhile), and remove this call's reservation,
   bumping ``seq`` (its leases are now counted as leases by whoever counts next).

A key that held a task back stays held back for the rest of the call (the call decides as
of one instant, as a single atomic claim would), so the next peek leaves its tasks out:
held-back tasks never block the others, and a deep backlog behind a limit is filtered by
the server, not handed to the client.

Why it is atomic enough: every decision is checked and applied by one single-document
update, so racing claimants never overdraw a gate or a bucket; a reservation is made before
its leases and removed only after them, and a claimant that counted leases before a
reservation was removed finds ``seq`` changed and counts again, so live leases never exceed
a concurrency limit through racing claims. A lease left out of the count because its
reservation was still held is in that reservation's slots for as long as the take's
``seq`` check passes, so the count is exact but for slots reserved and not yet used.
A claimant that dies between take and settle loses the gate units and tokens it took (it
errs on the side of the limit) and its reservation lapses after the operation timeout plus
``HOLD_MARGIN``.

**A fair or aged queue** (its own record ``*`` sets ``fair`` or ``aging``, contract version
4; ``View.order`` is not strict): the claim order is not an index order, so each round

1. counts the live leases of the concurrency-limited keys, as above (only if there are any);
2. groups the queue's live tasks grouped under another order (one ``update_many``, which
   finds none unless the order changed or a task was admitted across a change), then reads
   each group's first due tasks that no control holds back from the start of the claim (id,
   priority, due time, handler, keys; the paused and closed keys left out by the server):
   at most as many per group (with aging, per priority of a group) as the call still
   wants, more only when the controls hold back so many of them that the decision falls
   short; and arranges them with ``rdq.spi.ClaimOrder`` (``_order``, whose docstring says
   why this is exact under races and what it costs);
3. decides with ``ClaimGate`` in that order which of them the records let through (a task
   held back by a limit the tasks before it used up is skipped where it stands) and takes
   ``totals`` as in step 4 above;
4. leases them **by id**, in that order: each ``findAndModify`` matches its task only if it
   is still due as read (live, ``due`` unchanged: ``_filters.claim_one_filter``), so of
   racing claimants exactly one leases it. A task another claimant leased first is passed
   over for the next one in the order that takes the same from the limits (a task of the
   same limited keys, or of none), so the reservation holds exactly as above;
5. settles, as in step 6 above.

A second round (at most :data:`_ORDERED_ROUNDS` in all) only when tasks were lost to racing
claimants and the call is still short of its limit. A queue whose record asks for neither
setting never comes here: its claim is the strict one above, command for command.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import Counter

from pymongo import ReturnDocument
from pymongo.errors import PyMongoError

from rdq.spi import QUEUE_KEY, Claimed, ClaimGate, handler_key
from rdq_mongo import _filters as f
from rdq_mongo._claims import _view as ctl
from rdq_mongo._claims._order import Candidate, arranged, decide, read_candidates
from rdq_mongo._claims._plan import Plan
from rdq_mongo._claims._view import View
from rdq_mongo._codec import envelope_from_document, group_stamp
from rdq_mongo._connection import Connection, Document
from rdq_mongo._controls import group_tasks, live_leases
from rdq_mongo._updates import claim_update

__all__ = ["HOLD_MARGIN_US", "Claim"]

HOLD_MARGIN_US = 5_000_000
"""How long past the operation timeout a claim's reservation of concurrency slots is kept
if the claim never settles it."""
_TAKE_ATTEMPTS = 8
"""Takes one round tries before it holds its limited keys back for the call. A take fails
only when another claimant's take or settle changed the record meanwhile (each failure is
someone else's progress); between tries the claim backs off (:func:`_after_lost_take`)."""
_TAKE_PAUSE_S = 0.001
_TAKE_PAUSE_CAP_S = 0.016
_ORDERED_ROUNDS = 3
"""Rounds one claim of a fair or aged queue makes at most: a second only when a racing
claimant leased tasks it had chosen first."""


async def _after_lost_take(attempt: int) -> None:
    """The pause after the ``attempt``-th lost take (from 0): exponential backoff with full
    jitter, 16 ms at most, so that claimants which lost together retry apart."""
    pause = min(_TAKE_PAUSE_CAP_S, _TAKE_PAUSE_S * 2**attempt)
    await asyncio.sleep(random.uniform(0, pause))


def _keys_of(doc: Document) -> list[str]:
    """Every key of a peeked task (``rdq.spi.task_keys``, each once), from what decodes."""
    keys = [QUEUE_KEY]
    handler = doc.get("handler_ref")
    if isinstance(handler, str):
        keys.append(handler_key(handler))
    own = doc.get("keys")
    if isinstance(own, list):
        keys.extend(k for k in own if isinstance(k, str))
    return list(dict.fromkeys(keys))


def _blocking(gate: ClaimGate, keys: list[str]) -> set[str]:
    """The keys of ``keys`` whose record lets no more task through now."""
    out = set()
    for key in keys:
        control = gate.controls.get(key)
        if control is None:
            continue
        bucket = gate.buckets.get(key)
        if (
            control.paused
            or (key in gate.gates and (gate.gates[key] or 0) < 1)
            or (control.concurrency is not None and gate.in_use[key] >= control.concurrency)
            or (bucket is not None and bucket.tokens < 1)
        ):
            out.add(key)
    return out


def _decide(view: View, live: Counter[str], peeked: list[Document], held: set[str]) -> Plan:
    gate = view.gate(live)
    limited = view.limited
    plan = Plan()
    for doc in peeked:
        keys = _keys_of(doc)
        mine = frozenset(k for k in keys if k in limited)
        if mine & (held | plan.held):
            continue
        if gate.admits(keys):
            gate.take(keys)
            plan.admitted.append(mine)
            plan.totals.update(mine)
        else:
            plan.held |= _blocking(gate, keys) or set(mine)
    return plan


class Claim:
    """One ``claim_due`` call. :meth:`run` claims; when it ends with a take not yet settled
    (an error part-way), :attr:`owed` is set and :meth:`settle` should be called in a fresh
    operation timeout."""

    def __init__(
        self,
        connection: Connection,
        queue: str,
        limit: int,
        lease_us: int,
        worker_id: str | None,
        hold_us: int,
    ) -> None:
        self.connection = connection
        self.queue = queue
        self.limit = limit
        self.lease_us = lease_us
        self.worker_id = worker_id
        self.hold_us = hold_us
        self.claimed: list[Claimed] = []
        self.owed: tuple[View, Plan, str] | None = None

    async def run(self) -> list[Claimed]:
        view = await ctl.read_view(self.connection, self.queue)
        if view is not None and not view.order.strict:
            await self._ordered(view)
        else:
            await self._strict(view)
        return self.claimed

    async def _strict(self, view: View | None) -> None:
        """The claim in strict order (priority, then due time), by what ``view`` says."""
        if view is None or not view.restricting:
            await self._plain(None)
        elif view.blocks_queue:
            pass
        elif not view.limited:
            await self._plain(view.pause_scope())
        else:
            await self._limited(view)

    # --- leasing --------------------------------------------------------------------------

    async def _lease(self, scope: f.Scope | None, task: Candidate | None = None) -> bool:
        """Lease the best due task of ``scope`` (with ``task``, that task if it is still due
        as read); False when there is none."""
        token = secrets.token_hex(16)
        found = (
            f.claim_filter(self.queue, [c.task.id for c in self.claimed], scope)
            if task is None
            else f.claim_one_filter(self.queue, task.id, task.stored_due, scope)
        )
        reservation = self.owed[2] if self.owed is not None else None
        doc = await self.connection.tasks.find_one_and_update(
            found,
            claim_update(token, self.lease_us, self.worker_id, reservation),
            sort=f.CLAIM_SORT,
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return False
        self.claimed.append(Claimed(envelope_from_document(doc), token))
        return True

    async def _plain(self, scope: f.Scope | None) -> None:
        """One task per findAndModify, up to ``limit``. A failure part-way (the timeout
        running out on a slow server, a lost connection) ends the batch with the tasks
        claimed so far; it raises only when nothing was claimed."""
        while len(self.claimed) < self.limit:
            try:
                if not await self._lease(scope):
                    return
            except PyMongoError:
                if not self.claimed:
                    raise
                # The tasks claimed so far are leased to the caller already: hand them
                # over rather than strand them until their leases lapse (and cost each
                # an attempt). The next call meets the error, if it lasts.
                return

    # --- under limits ---------------------------------------------------------------------

    async def _fresh_view(self) -> View | None:
        view = await ctl.read_view(self.connection, self.queue)
        if view is not None and view.has_expired_reservations:
            await self.connection.controls.update_one({"_id": self.queue}, ctl.expire_update())
            view = await ctl.read_view(self.connection, self.queue)
        return view

    async def _limited(self, view: View) -> None:
        held: set[str] = set()
        current: View | None = view
        # Each round but the last holds a new key back or leases a task: this bound is only
        # a safety net.
        for _ in range(len(view.controls) + self.limit + 2):
            if current is None or not current.restricting:
                await self._plain(None)
                return
            if current.blocks_queue:
                return
            if not current.limited:
                await self._plain(current.pause_scope(held))
                return
            try:
                if not await self._round(current, held):
                    return
                if len(self.claimed) >= self.limit or QUEUE_KEY in held:
                    return
                current = await self._fresh_view()
            except PyMongoError:
                if not self.claimed:
                    raise
                return

    async def _round(self, view: View, held: set[str]) -> bool:
        """One round (see the module docstring); True when another may claim more: this one
        held new keys back (the next peek leaves their tasks out), or leased from a full
        peek."""
        if view.has_expired_reservations:
            fresh = await self._fresh_view()
            if fresh is None or not fresh.limited:
                return True  # the caller starts over with what it reads now
            view = fresh
        live = await self._live(view)
        need = self.limit - len(self.claimed)
        cursor = self.connection.tasks.find(
            f.claim_filter(self.queue, [c.task.id for c in self.claimed], view.pause_scope(held)),
            projection={"handler_ref": 1, "keys": 1},
            sort=f.CLAIM_SORT,
            limit=need,
        )
        peeked = [doc async for doc in cursor]
        if not peeked:
            return False
        for attempt in range(_TAKE_ATTEMPTS):
            plan = _decide(view, live, peeked, held)
            if not plan.totals or await self._take(view, plan, live):
                break
            await _after_lost_take(attempt)
            fresh = await self._fresh_view()
            if fresh is None or not fresh.limited:
                return True
            view = fresh
            live = await self._live(view)
        else:
            # Contended past reason: hold these keys back for this call, lease the rest.
            held |= set(plan.totals)
            plan = Plan(admitted=[s for s in plan.admitted if not s], held=plan.held)
        held |= plan.held
        leased = 0
        drained: set[frozenset[str]] = set()  # kinds of task none of which is due any more
        try:
            for keys in plan.admitted:
                if keys in drained:
                    continue
                if await self._lease(view.class_scope(keys)):
                    plan.used.update(keys)
                    leased += 1
                else:
                    drained.add(keys)
        finally:
            if plan.totals:
                await self.settle()
        return bool(plan.held) or (leased > 0 and len(peeked) == need)

    # --- in the order of a fair or aged queue ----------------------------------------------

    async def _ordered(self, view: View) -> None:
        """Rounds of :meth:`_ordered_round` while leases were lost to racing claimants and
        more are wanted; a queue whose record no longer asks for an order is claimed
        strictly."""
        current: View | None = view
        try:
            for round_ in range(_ORDERED_ROUNDS):
                if round_ or (current is not None and current.has_expired_reservations):
                    current = await self._fresh_view()
                if current is None or current.order.strict:
                    await self._strict(current)
                    return
                if current.blocks_queue or not await self._ordered_round(current):
                    return
        except PyMongoError:
            if not self.claimed:
                raise

    async def _in_order(self, view: View, live: Counter[str], need: int) -> list[Candidate]:
        """The due tasks no control holds back from the start, as far as the first ``need``
        ranks that the controls let through need them, in the queue's order: each group's
        first ``need`` (``_order.read_candidates``), read again four times deeper while the
        controls hold back so many that the decision falls short and more are unread."""
        stamp = group_stamp(view.order)
        assert stamp is not None  # an ordered claim
        await group_tasks(self.connection, self.queue, stamp)
        scope = view.pause_scope(view.gate(live).closed)
        claimed = [c.task.id for c in self.claimed]
        first = need
        while True:
            read = await read_candidates(
                self.connection, self.queue, view.order, view.now_us, claimed, scope, first
            )
            in_order = arranged(view.order, read.candidates)
            if read.complete:
                return in_order
            gate = view.gate(live)
            if len(decide(gate, view.limited, in_order, need).admitted) >= need or not (
                gate.admits((QUEUE_KEY,))
            ):
                return in_order
            first *= 4

    async def _ordered_round(self, view: View) -> bool:
        """Read the due tasks no control holds back from the start, each group's first as
        far as this call needs them, arrange them in the queue's order, decide and take
        what the limits let through as in :meth:`_round`, then lease by id in that order.
        A task a racing claimant leased first is passed over for the next one in order that
        takes the same from the limits (or none). True when such a loss left this call
        short of its limit (another round may make up for it)."""
        live = await self._live(view)
        gate = view.gate(live)
        if not gate.admits((QUEUE_KEY,)):
            return False
        need = self.limit - len(self.claimed)
        in_order = await self._in_order(view, live, need)
        for attempt in range(_TAKE_ATTEMPTS):
            plan = decide(view.gate(live), view.limited, in_order, need)
            if not plan.totals or await self._take(view, plan, live):
                break
            await _after_lost_take(attempt)
            fresh = await self._fresh_view()
            if fresh is None or fresh.order.strict or not fresh.limited:
                return True  # the caller starts over with what it reads now
            view = fresh
            live = await self._live(view)
        else:
            # Contended past reason: lease only tasks that no limit counts.
            plan = Plan(admitted=[kind for kind in plan.admitted if not kind])
        room = Counter(kind for kind in plan.admitted if kind)
        scope, limited = view.pause_scope(), view.limited
        lost = False
        try:
            for candidate in in_order:
                if len(self.claimed) >= self.limit:
                    break
                kind = candidate.kind(limited)
                if kind and room[kind] < 1:
                    continue
                if not await self._lease(scope, candidate):
                    lost = True
                elif kind:
                    room[kind] -= 1
                    plan.used.update(kind)
        finally:
            if plan.totals:
                await self.settle()
        return lost and len(self.claimed) < self.limit

    # --- the limits' reservations -----------------------------------------------------------

    async def _live(self, view: View) -> Counter[str]:
        """The live leases of ``view``'s concurrency keys, less those that a reservation
        ``view`` counts holds already."""
        keys = view.concurrency_keys
        covered = {key: view.reservations(key) for key in keys}
        return await live_leases(self.connection, self.queue, keys, covered)

    async def _take(self, view: View, plan: Plan, live: Counter[str]) -> bool:
        """Take ``plan.totals`` under a reservation of its own id (a fresh one per take:
        the leases made under it are stamped with it until it is settled)."""
        reservation = secrets.token_hex(8)
        result = await self.connection.controls.update_one(
            ctl.take_filter(view, plan.totals, live),
            ctl.take_update(view, plan.totals, reservation, self.hold_us),
        )
        if result.matched_count:
            self.owed = (view, plan, reservation)
            return True
        return False

    async def settle(self) -> None:
        """Give back what the last take did not use and remove this call's reservation."""
        if self.owed is None:
            return
        view, plan, reservation = self.owed
        update = ctl.settle_update(view, plan.unused, reservation)
        if update:
            await self.connection.controls.update_one({"_id": self.queue}, update)
        self.owed = None
