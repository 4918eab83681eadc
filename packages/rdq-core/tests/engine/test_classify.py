"""Outcome classification (rdq.retry)."""

from __future__ import annotations

import random

import rdq
from rdq.config import QueueConfig
from rdq.retry._classify import Action, classify_error, error_type_name, truncate_message
from rdq.spi import Outcome, bounds

CONFIG = QueueConfig(max_attempts=3, backoff=rdq.Backoff.fixed(5), non_retryable=(KeyError,))


class AppError(Exception):
    pass


def test_other_exception_is_a_retryable_failure_with_backoff():
    d = classify_error(AppError("db down"), 1, CONFIG)
    assert d.action is Action.RESCHEDULE
    assert d.outcome is Outcome.FAILED
    assert d.delay == 5
    assert d.error_type == f"{__name__}.AppError"
    assert d.error_message == "db down"


def test_exhaustion_dead_letters_keeping_the_outcome():
    d = classify_error(AppError("still down"), 3, CONFIG)
    assert d.action is Action.DEAD_LETTER
    assert d.outcome is Outcome.FAILED


def test_permanent_and_non_retryable_dead_letter_at_once():
    d = classify_error(rdq.Permanent("bad customer"), 1, CONFIG)
    assert (d.action, d.outcome, d.error_type) == (
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        "rdq.Permanent",
    )
    d = classify_error(KeyError("x"), 1, CONFIG)
    assert (d.action, d.outcome, d.error_type) == (
        Action.DEAD_LETTER,
        Outcome.PERMANENT,
        "KeyError",
    )


def test_permanent_from_a_cause_records_the_cause_type():
    try:
        try:
            raise ValueError("not a number")
        except ValueError as exc:
            raise rdq.Permanent("bad input") from exc
    except rdq.Permanent as exc:
        d = classify_error(exc, 1, CONFIG)
    assert d.error_type == "ValueError"
    assert d.error_message == "bad input"


def test_retry_after_uses_its_delay_but_counts_the_attempt():
    d = classify_error(rdq.RetryAfter(42), 1, CONFIG)
    assert (d.action, d.delay) == (Action.RESCHEDULE, 42)
    assert classify_error(rdq.RetryAfter(42), 3, CONFIG).action is Action.DEAD_LETTER


def test_timeout_is_retryable():
    d = classify_error(TimeoutError(), 1, CONFIG, timed_out=True, rng=random.Random(0))
    assert (d.action, d.outcome, d.error_type) == (
        Action.RESCHEDULE,
        Outcome.TIMEOUT,
        "rdq.Timeout",
    )


def test_messages_are_bounded():
    d = classify_error(AppError("x" * 10_000), 1, CONFIG)
    assert d.error_message is not None
    assert len(d.error_message) == bounds.MAX_ERROR_MESSAGE_LENGTH
    assert truncate_message("short") == "short"


def test_unprintable_exception_still_classifies():
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    d = classify_error(Weird(), 1, CONFIG)
    assert d.action is Action.RESCHEDULE
    assert d.error_message is not None
    assert "Weird" in d.error_message
    assert error_type_name(Weird).endswith("Weird")


def test_retry_delays_are_capped_at_a_year():
    huge = QueueConfig(max_attempts=3, backoff=rdq.Backoff.fixed(1e12))
    assert classify_error(AppError("x"), 1, huge).delay == 366 * 86400
    assert classify_error(rdq.RetryAfter(1e15), 1, CONFIG).delay == 366 * 86400
