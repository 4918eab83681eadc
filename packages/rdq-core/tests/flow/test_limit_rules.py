"""The rules of declared limits as pure functions over a control record (``rdq.flow``): which
declaration a record keeps, how a RetryAfter lowers an adaptive rate and when it comes back,
and how a declared rate and a breaker's ramp after an outage make one rate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import rdq
from rdq import flow
from rdq.flow import KeyedLimit
from rdq.spi import Control

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BREAKER = rdq.Breaker(probes=3, ramp=20.0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def spec(**fields: object) -> KeyedLimit:
    values: dict[str, object] = {"name": "psp", "key": "limit:psp", "sources": ("queue",)}
    values.update(fields)
    return KeyedLimit(**values)  # type: ignore[arg-type]


def declared(rate: int = 20, **fields: object) -> Control:
    control = flow.declare(
        Control(queue="q", key="limit:psp"),
        spec(rate=rate, adaptive=True, **fields),
        at(0),
        "w1",
    )
    assert control is not None
    return control


def test_a_declaration_sets_the_fields_the_store_enforces() -> None:
    control = flow.declare(
        Control(queue="q", key="limit:psp", paused=True),
        spec(concurrency=20, rate=50, per=2.0, burst=5),
        at(0),
        "w1",
    )
    assert control is not None
    assert (control.concurrency, control.rate, control.per, control.burst) == (20, 50, 2.0, 5)
    assert control.paused, "a declaration leaves a pause alone"
    state = flow.limit_of(control)
    assert state is not None and (state.by, state.declared_at) == ("w1", at(0))


def test_the_same_declaration_or_an_older_one_changes_nothing() -> None:
    control = flow.declare(Control(queue="q", key="limit:psp"), spec(concurrency=5), at(10), "w2")
    assert control is not None
    assert flow.declare(control, spec(concurrency=5), at(20), "w3") is None, "the same"
    assert flow.declare(control, spec(concurrency=3), at(5), "w1") is None, "read earlier"
    later = flow.declare(control, spec(concurrency=3), at(30), "w4")
    assert later is not None and later.concurrency == 3
    submitted = flow.declare(Control(queue="q", key="limit:psp"), spec(concurrency=1), None, "c")
    assert submitted is not None
    assert flow.declare(submitted, spec(concurrency=2), at(0), "w1") is not None, (
        "a worker's declaration wins over a submitter's"
    )


def test_undeclaring_lifts_the_limits_but_not_a_later_declaration() -> None:
    control = flow.declare(Control(queue="q", key="limit:psp"), spec(concurrency=5), at(10), "w")
    assert control is not None
    assert flow.undeclare(control, at(5)) is None
    lifted = flow.undeclare(control, at(20))
    assert lifted is not None and lifted.concurrency is None and lifted.state == {}


def test_a_retry_after_halves_the_rate_until_its_delay_has_passed() -> None:
    control = declared(rate=20)
    lowered = flow.lower(control, at(1), 30.0, at(0.5), "429")
    assert lowered is not None and (lowered.rate, lowered.per) == (10, 1.0)
    assert flow.restore(lowered, at(30)) is None, "not yet"
    restored = flow.restore(lowered, at(31))
    assert restored is not None and restored.rate == 20
    assert flow.lowered_of(restored) is None


def test_only_a_task_claimed_after_the_halving_halves_again() -> None:
    lowered = flow.lower(declared(rate=20), at(1), 10.0, at(0.5), "429")
    assert lowered is not None
    claimed_before = flow.lower(lowered, at(2), 5.0, at(0.9), "429")
    assert claimed_before is None, "in flight before the halving: nothing new"
    extended = flow.lower(lowered, at(2), 30.0, at(0.9), "429")
    assert extended is not None and extended.rate == 10
    assert flow.lowered_of(extended).until == at(32)  # type: ignore[union-attr]
    again = flow.lower(lowered, at(3), 10.0, at(2), "429")
    assert again is not None and again.rate == 5
    assert flow.lowered_of(again).halvings == 2  # type: ignore[union-attr]


def test_a_rate_of_one_is_halved_by_doubling_its_period() -> None:
    lowered = flow.lower(declared(rate=1), at(1), 10.0, at(0.5), None)
    assert lowered is not None and (lowered.rate, lowered.per) == (1, 2.0)


def test_a_rate_not_adaptive_is_never_lowered() -> None:
    control = flow.declare(
        Control(queue="q", key="limit:psp"), spec(rate=20, adaptive=False), at(0), "w"
    )
    assert control is not None
    assert flow.lower(control, at(1), 10.0, at(0.5), None) is None
    assert flow.lower(declared(), at(1), 0.0, at(0.5), None) is None, "no delay, no lowering"


def test_a_breakers_ramp_and_a_declared_rate_make_the_slower_one() -> None:
    control = flow.declare(
        Control(queue="q", key="handler:call"),
        spec(name="handler:call", key="handler:call", rate=5),
        at(0),
        "w",
    )
    assert control is not None
    tripped = flow.trip(
        control,
        at(1),
        BREAKER,
        started=at(0),
        error_types=["ConnectError"],
        error_type="ConnectError",
        error_message="refused",
        sample_task="t",
    )
    assert (tripped.gate, tripped.rate) == (0, 5), "open: held, and the declared rate kept"
    closed = flow.close(tripped, at(10), BREAKER)
    assert (closed.gate, closed.rate) == (None, 3), "the ramp starts below the declared rate"
    stepped = flow.ramp(closed, at(14), BREAKER)
    assert stepped is not None and stepped.rate == 5, "ramp at 6/s: the declared 5 holds"
    assert flow.ramp(stepped, at(15), BREAKER) is None, "nothing new within one step"
    done = flow.ramp(stepped, at(30), BREAKER)
    assert done is not None and done.rate == 5, "the ramp over: the declared rate, not none"
    assert flow.ramp_rate_of(done) is None


def test_without_a_declared_rate_the_ramp_is_lifted_as_before() -> None:
    control = flow.close(
        flow.force_open(Control(queue="q", key="handler:call"), at(0), "ops", None),
        at(1),
        BREAKER,
    )
    assert control.rate == 3
    done = flow.ramp(control, at(30), BREAKER)
    assert done is not None and done.rate is None
