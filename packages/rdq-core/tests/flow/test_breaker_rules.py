"""The breaker's rules as pure functions over a control record (``rdq.flow``), and which
attempts an outage leaves uncharged (``rdq.retry.attempts_used``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import rdq
from rdq import flow, retry
from rdq.spi import Attempt, Control, Envelope, Outcome, Status

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CONFIG = rdq.Breaker()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def tripped(started: float = 0.0, now: float = 5.0) -> Control:
    return flow.trip(
        Control(queue="q", key="handler:call"),
        at(now),
        CONFIG,
        started=at(started),
        error_types=["ConnectError"],
        error_type="ConnectError",
        error_message="refused",
        sample_task="t1",
    )


def test_a_trip_holds_every_claim_for_the_cooldown_and_remembers_when_the_outage_began() -> None:
    control = tripped(started=1.0, now=5.0)
    breaker = flow.breaker_of(control)
    assert control.gate == 0
    assert breaker.state is flow.State.OPEN
    assert breaker.until == at(5.0 + CONFIG.cooldown)
    assert [(o.start, o.end) for o in breaker.outages] == [(at(1.0), None)]


def test_probing_begins_only_once_the_cooldown_has_passed() -> None:
    control = tripped(now=0.0)
    assert flow.begin_probing(control, at(CONFIG.cooldown - 0.1), CONFIG) is None
    probing = flow.begin_probing(control, at(CONFIG.cooldown), CONFIG)
    assert probing is not None and probing.gate == CONFIG.probes
    assert flow.breaker_of(probing).state is flow.State.HALF_OPEN


def test_failed_probes_double_the_cooldown_up_to_its_cap() -> None:
    control = tripped(now=0.0)
    cooldowns = []
    for step in range(1, 8):
        probing = flow.begin_probing(control, at(1000.0 * step), CONFIG)
        assert probing is not None
        control = flow.reopen(probing, at(1000.0 * step), CONFIG, ["ConnectError"])
        cooldowns.append(flow.breaker_of(control).cooldown)
    assert cooldowns == [10.0, 20.0, 30.0, 30.0, 30.0, 30.0, 30.0]
    assert flow.breaker_of(control).trips == 8


def test_a_close_ends_the_outage_and_ramps_the_key_up_until_the_limit_is_lifted() -> None:
    control = flow.close(tripped(now=0.0), at(20.0), CONFIG)
    breaker = flow.breaker_of(control)
    assert breaker.state is flow.State.CLOSED
    assert breaker.outages[-1].end == at(20.0)
    assert control.gate is None and control.rate == CONFIG.probes
    rates = []
    for second in range(0, int(CONFIG.ramp) + 1, 4):
        stepped = flow.ramp(control, at(20.0 + second), CONFIG)
        if stepped is not None:
            control = stepped
        rates.append(control.rate)
    assert rates == [3, 6, 12, 24, 48, None]
    assert flow.breaker_of(control).ramp_from is None


def test_widening_moves_the_start_of_the_outage_in_progress_back_only() -> None:
    control = tripped(started=10.0, now=12.0)
    wider = flow.widen(control, at(4.0), ["ReadTimeout"])
    assert wider is not None
    (outage,) = flow.breaker_of(wider).outages
    assert outage.start == at(4.0)
    assert outage.error_types == ["ConnectError", "ReadTimeout"]
    assert flow.widen(wider, at(6.0), ["ConnectError"]) is None, "already covered"
    closed = flow.close(wider, at(30.0), CONFIG)
    assert flow.widen(closed, at(0.0), ["ConnectError"]) is None, "no outage in progress"


def _task(*attempts: tuple[Outcome, float, str]) -> Envelope:
    return Envelope(
        id="t1",
        queue="q",
        handler_ref="call",
        payload=b"{}",
        status=Status.PENDING,
        attempt_count=len(attempts),
        attempts=[
            Attempt(
                number=n,
                outcome=outcome,
                started_at=at(seconds - 0.1),
                finished_at=at(seconds),
                error_type=error_type,
            )
            for n, (outcome, seconds, error_type) in enumerate(attempts, start=1)
        ],
    )


@pytest.mark.parametrize(
    ("attempt", "charged"),
    [
        ((Outcome.FAILED, 8.0, "ConnectError"), False),  # inside the outage, its error
        ((Outcome.FAILED, 8.0, "KeyError"), True),  # inside, but a bug, not the outage
        ((Outcome.FAILED, 2.0, "ConnectError"), True),  # before the outage began
        ((Outcome.FAILED, 40.0, "ConnectError"), True),  # after it ended
        ((Outcome.DEFERRED, 2.0, "rdq.BreakerOpen"), False),  # held: never charged
        ((Outcome.INTERRUPTED, 2.0, "rdq.Interrupted"), False),
    ],
)
def test_only_failures_of_the_outage_inside_its_window_are_uncharged(
    attempt: tuple[Outcome, float, str], charged: bool
) -> None:
    control = flow.close(tripped(started=5.0, now=6.0), at(30.0), CONFIG)
    outages = flow.breaker_of(control).outages
    task = _task(attempt)
    assert retry.attempts_used(task, task.attempt_count + 1, outages) == (2 if charged else 1)


def test_a_failure_another_worker_saw_before_the_trip_is_uncharged_once_widened() -> None:
    control = tripped(started=5.0, now=6.0)
    task = _task((Outcome.FAILED, 3.0, "ConnectError"))
    before = flow.breaker_of(control).outages
    assert retry.attempts_used(task, 2, before) == 2
    wider = flow.widen(control, at(3.0), ["ConnectError"])
    assert wider is not None
    assert retry.attempts_used(task, 2, flow.breaker_of(wider).outages) == 1
