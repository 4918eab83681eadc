"""Reading ``sqlite://`` URLs: paths as SQLAlchemy spells them, options, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rdq import open_storage
from rdq.errors import ConfigError
from rdq_sqlite import SqliteStorage, parse_url


def test_three_slashes_name_a_path_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_url("sqlite:///rdq.db").path == str(tmp_path / "rdq.db")
    assert parse_url("sqlite:///./data/rdq.db").path == str(tmp_path / "data" / "rdq.db")


def test_four_slashes_name_an_absolute_path() -> None:
    assert parse_url("sqlite:////var/lib/app/rdq.db").path == "/var/lib/app/rdq.db"


def test_percent_escapes_in_the_path_are_decoded(tmp_path: Path) -> None:
    assert parse_url(f"sqlite:///{tmp_path}/my%20queue.db").path == f"{tmp_path}/my queue.db"


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://"])
def test_memory_urls_open_a_private_in_memory_database(url: str) -> None:
    config = parse_url(url)
    assert config.in_memory
    assert config.where == ":memory:"


def test_defaults_are_durable() -> None:
    config = parse_url("sqlite:////tmp/x.db")
    assert config.synchronous == "FULL"
    assert config.timeout == 10.0
    assert config.notify is True


def test_query_options_are_read_and_keywords_win() -> None:
    config = parse_url(
        "sqlite:////tmp/x.db?timeout=2.5&synchronous=extra&notify=off&watch_interval=0.5",
        timeout=4,
    )
    assert config.timeout == 4.0
    assert config.synchronous == "EXTRA"
    assert config.notify is False
    assert config.watch_interval == 0.5


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("sqlite:////tmp/x.db?timeout=0", "timeout"),
        ("sqlite:////tmp/x.db?timeout=soon", "timeout"),
        ("sqlite:////tmp/x.db?timeout=nan", "timeout"),
        ("sqlite:////tmp/x.db?synchronous=off", "synchronous"),
        ("sqlite:////tmp/x.db?notify=maybe", "notify"),
        ("sqlite:////tmp/x.db?watch_interval=-1", "watch_interval"),
        ("sqlite:////tmp/x.db?journal_mode=delete", "journal_mode"),
        ("sqlite://host/rdq.db", "storage"),
        ("postgresql:///rdq.db", "storage"),
    ],
)
def test_a_bad_url_raises_config_error_naming_the_option(url: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_url(url)
    assert caught.value.key == key


def test_open_storage_finds_the_plugin_by_scheme(tmp_path: Path) -> None:
    store = open_storage(f"sqlite:///{tmp_path}/rdq.db")
    assert isinstance(store, SqliteStorage)
    assert store.path == os.path.join(tmp_path, "rdq.db")
    assert "rdq.db" in repr(store)


def test_an_unknown_keyword_option_raises_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        open_storage("sqlite:///:memory:", pool_size=3)
    assert caught.value.key == "pool_size"
