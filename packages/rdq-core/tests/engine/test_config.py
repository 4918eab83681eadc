"""Queue config: validation names the key and queue, TOML loading, claim-time resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

import rdq
from rdq.config import BackoffKind, QueueConfig, load_toml, parse_config
from rdq.retry import resolve
from rdq.spi import RetryOverride


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"max_attempts": 0}, "queues.emails.max_attempts"),
        ({"timeout": -1.0}, "queues.emails.timeout"),
        ({"lease": 0}, "queues.emails.lease"),
        ({"lease": 90000.0}, "queues.emails.lease"),
        ({"concurrency": 0}, "queues.emails.concurrency"),
        ({"task_ttl": -5}, "queues.emails.task_ttl"),
        ({"backoff": rdq.Backoff.exponential(base=5, cap=1)}, "queues.emails.cap"),
        ({"backoff": rdq.Backoff.exponential(base=-1, cap=1)}, "queues.emails.base"),
        ({"non_retryable": (int,)}, "queues.emails.non_retryable"),
    ],
)
def test_invalid_queue_config_raises_config_error_naming_key_and_queue(settings, key):
    app = rdq.App()
    with pytest.raises(rdq.ConfigError) as info:
        app.queue("emails", **settings)
    assert info.value.key == key
    assert "emails" in str(info.value)


def test_unknown_backoff_kind_in_toml_names_key_and_queue():
    with pytest.raises(rdq.ConfigError) as info:
        parse_config({"queues": {"emails": {"backoff": "fibonacci"}}})
    assert info.value.key == "queues.emails.backoff"
    assert "fibonacci" in str(info.value)


def test_unknown_key_and_wrong_type_in_toml_are_rejected():
    with pytest.raises(rdq.ConfigError) as info:
        parse_config({"queues": {"emails": {"max_attempt": 3}}})
    assert info.value.key == "queues.emails.max_attempt"
    with pytest.raises(rdq.ConfigError) as info:
        parse_config({"queues": {"emails": {"timeout": "30s"}}})
    assert info.value.key == "queues.emails.timeout"
    with pytest.raises(rdq.ConfigError) as info:
        parse_config({"queue": {}})
    assert info.value.key == "queue"


def test_toml_file_sets_defaults_and_queues(tmp_path: Path):
    path = tmp_path / "rdq.toml"
    path.write_text(
        """
[defaults]
max_attempts = 7
timeout = 12

[queues.emails]
backoff = "linear"
base = 2
cap = 20
concurrency = 3
non_retryable = ["ValueError", "rdq.errors:ValidationError"]

[queues.reports]
backoff = "fixed"
base = 4
"""
    )
    app = rdq.App()
    app.load_config(path)
    emails = app.queue_config("emails")
    assert emails.max_attempts == 7  # inherited from [defaults]
    assert emails.timeout == 12
    assert emails.backoff == rdq.Backoff(BackoffKind.LINEAR, 2.0, 20.0)
    assert emails.concurrency == 3
    assert emails.non_retryable == (ValueError, rdq.ValidationError)
    assert app.queue_config("reports").backoff == rdq.Backoff.fixed(4)
    assert app.queue_config("undeclared").max_attempts == 7
    assert app.queues == ["emails", "reports"]


def test_toml_file_errors(tmp_path: Path):
    with pytest.raises(rdq.ConfigError, match="cannot read"):
        load_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[queues.emails\n")
    with pytest.raises(rdq.ConfigError, match="not valid TOML"):
        load_toml(bad)
    unknown_type = tmp_path / "types.toml"
    unknown_type.write_text('[queues.q]\nnon_retryable = ["nosuch.module:Error"]\n')
    with pytest.raises(rdq.ConfigError) as info:
        load_toml(unknown_type)
    assert info.value.key == "queues.q.non_retryable"


def test_task_override_wins_over_queue_config():
    config = QueueConfig(max_attempts=3, backoff=rdq.Backoff.exponential(1, 60), timeout=10)
    resolved = resolve(
        config, RetryOverride(max_attempts=9, backoff="fixed", base=2.0, timeout=1.5)
    )
    assert resolved.max_attempts == 9
    assert resolved.timeout == 1.5
    assert resolved.backoff == rdq.Backoff.fixed(2.0)
    assert resolve(config, None) is config


def test_invalid_task_override_values_are_ignored():
    config = QueueConfig(max_attempts=3)
    resolved = resolve(config, RetryOverride(max_attempts=0, backoff="nope", timeout=-1))
    assert resolved.max_attempts == 3
    assert resolved.backoff == config.backoff
    assert resolved.timeout == config.timeout


def test_redeclaring_a_queue_keeps_unspecified_settings():
    app = rdq.App()
    app.queue("q", max_attempts=4, timeout=5)
    app.queue("q", timeout=9)
    assert app.queue_config("q").max_attempts == 4
    assert app.queue_config("q").timeout == 9


def test_handler_registration_errors():
    app = rdq.App()

    @app.handler("job")
    def job(payload: object) -> None: ...

    def other(payload: object) -> None: ...

    with pytest.raises(rdq.ConfigError):
        app.register("job", other)
    with pytest.raises(rdq.ConfigError):
        app.register("has space", other)
    with pytest.raises(rdq.ConfigError):
        app.register_scheme("", lambda task, ctx: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(rdq.ConfigError):
        app.queue("bad queue!")


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"grace_period": -1}, "grace_period"),
        ({"poll_min": 0}, "poll_min"),
        ({"poll_min": 3, "poll_max": 1}, "poll_min"),
        ({"stats_interval": 0}, "stats_interval"),
    ],
)
def test_invalid_worker_settings_raise_config_error(kwargs, key):
    from rdq_memory import MemoryStorage

    with pytest.raises(rdq.ConfigError) as info:
        rdq.Worker(rdq.App(), MemoryStorage(), **kwargs)
    assert info.value.key == key
    with pytest.raises(rdq.ValidationError):
        rdq.Worker(rdq.App(), MemoryStorage(), queues=["bad queue"])
