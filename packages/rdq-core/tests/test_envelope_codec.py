"""The envelope wire format: lossless round trips (unknown fields included) and clear errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdq.errors import ValidationError
from rdq.spi import (
    Attempt,
    Envelope,
    Outcome,
    RetryOverride,
    Status,
    decode_envelope,
    encode_envelope,
    envelope_from_builtins,
    envelope_to_builtins,
)
from rdq.spi.codec import _KNOWN_FIELDS

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
aware = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
attempts = st.builds(
    Attempt,
    number=st.integers(1, 100),
    outcome=st.sampled_from(Outcome),
    error_type=st.none() | st.text(max_size=20),
    error_message=st.none() | st.text(max_size=50),
    started_at=st.none() | aware,
    finished_at=st.none() | aware,
    worker_id=st.none() | st.text(max_size=20),
    traceback=st.none() | st.text(max_size=80),
)
unknown_keys = st.text(min_size=1, max_size=12).filter(lambda k: k not in _KNOWN_FIELDS)
envelopes = st.builds(
    Envelope,
    id=st.from_regex(r"[A-Za-z0-9._:-]{1,40}", fullmatch=True),
    queue=st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True),
    handler_ref=st.from_regex(r"[a-z.]{1,20}:[a-z_]{1,20}", fullmatch=True),
    payload=json_values,
    headers=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=3),
    status=st.sampled_from(Status),
    attempt_count=st.integers(0, 50),
    redrive_count=st.integers(0, 5),
    attempts=st.lists(attempts, max_size=4),
    created_at=st.none() | aware,
    next_attempt_at=st.none() | aware,
    lease_expires_at=st.none() | aware,
    completed_at=st.none() | aware,
    dead_lettered_at=st.none() | aware,
    retry=st.none() | st.builds(RetryOverride, max_attempts=st.none() | st.integers(1, 20)),
    priority=st.integers(-10, 10),
    claimed_by=st.none() | st.text(max_size=20),
    claimed_at=st.none() | aware,
    cancelled_at=st.none() | aware,
    corrupt=st.none() | st.text(max_size=40),
    extra=st.dictionaries(unknown_keys, json_values, max_size=3),
)


@given(envelopes)
def test_json_round_trip_is_lossless_including_unknown_fields(task: Envelope) -> None:
    assert decode_envelope(encode_envelope(task)) == task


@given(envelopes)
def test_builtins_round_trip_is_lossless(task: Envelope) -> None:
    assert envelope_from_builtins(envelope_to_builtins(task)) == task


def test_unknown_fields_from_a_newer_producer_are_written_back_flat() -> None:
    wire = (
        b'{"id":"t1","queue":"q","handler_ref":"app:h","x_weight":7,'
        b'"trace":{"span":"abc"},"format_version":2}'
    )
    task = decode_envelope(wire)
    assert task.extra == {"x_weight": 7, "trace": {"span": "abc"}}
    assert task.format_version == 2
    again = msgspec.json.decode(encode_envelope(task))
    assert again["x_weight"] == 7
    assert again["trace"] == {"span": "abc"}
    assert "extra" not in again


def test_a_field_named_extra_on_the_wire_is_kept_as_an_unknown_field() -> None:
    task = decode_envelope(b'{"id":"t","queue":"q","handler_ref":"h","extra":[1]}')
    assert task.extra == {"extra": [1]}
    assert msgspec.json.decode(encode_envelope(task))["extra"] == [1]


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        (b'{"queue":"q","handler_ref":"h"}', "id"),
        (b'{"id":1,"queue":"q","handler_ref":"h"}', "id"),
        (b'{"id":"t","queue":"q","handler_ref":"h","attempt_count":"x"}', "attempt_count"),
        (b'{"id":"t","queue":"q","handler_ref":"h","status":"LOST"}', "status"),
        (
            b'{"id":"t","queue":"q","handler_ref":"h","attempts":[{"number":"1","outcome":"X"}]}',
            "attempts[0].outcome",
        ),
        (b'{"id":"t","queue":"q","handler_ref":"h","created_at":"yesterday"}', "created_at"),
        (b'{"id":"t","queue":"q","handler_ref":"h","headers":{"a":1}}', "headers[...]"),
        (
            b'{"id":"t","queue":"q","handler_ref":"h","attempts":[{"outcome":"FAILED"}]}',
            "attempts[0].number",
        ),
        (b"[1,2]", "envelope"),
        (b'{"id":"t",', "envelope"),
    ],
)
def test_malformed_or_wrong_typed_envelopes_raise_validation_error_naming_the_field(
    wire: bytes, field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        decode_envelope(wire)
    assert caught.value.field == field


def test_timestamps_are_timezone_aware_after_decoding() -> None:
    task = decode_envelope(
        b'{"id":"t","queue":"q","handler_ref":"h","created_at":"2026-01-02T03:04:05+02:00"}'
    )
    assert task.created_at is not None
    assert task.created_at.utcoffset() == timedelta(hours=2)
