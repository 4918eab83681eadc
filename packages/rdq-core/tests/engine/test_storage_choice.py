"""Which store a program uses when its code names none (``rdq.storage_url``): the URL given,
then ``RDQ_STORAGE``, then ``RDQ_STORAGE_URL``; else ``./rdq.db``; and without rdq-sqlite,
``memory://`` only where asked for and said loudly, or an error saying what to set — never a
task reported stored in a store that is gone when the process exits."""

from __future__ import annotations

import pytest

import rdq
from rdq.plugins import Plugins


@pytest.fixture
def no_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    """rdq-sqlite as if it were not installed."""
    installed = Plugins.schemes

    def without_sqlite(self: Plugins) -> list[str]:
        return [scheme for scheme in installed(self) if scheme != "sqlite"]

    monkeypatch.setattr(Plugins, "schemes", without_sqlite)
    for name in ("RDQ_STORAGE", "RDQ_STORAGE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_the_url_given_then_rdq_storage_then_the_older_name() -> None:
    both = {"RDQ_STORAGE": "memory://new", "RDQ_STORAGE_URL": "memory://old"}
    assert rdq.storage_url("memory://given", env=both) == "memory://given"
    assert rdq.storage_url(env=both) == "memory://new"
    assert rdq.storage_url(env={"RDQ_STORAGE_URL": "memory://old"}) == "memory://old"
    assert rdq.storage_url(env={"RDQ_STORAGE": "", "RDQ_STORAGE_URL": "memory://old"}) == (
        "memory://old"
    )


def test_with_nothing_named_the_sqlite_file_and_it_is_said() -> None:
    said: list[str] = []
    assert rdq.storage_url(env={}, say=said.append) == "sqlite:///./rdq.db"
    assert len(said) == 1 and "using sqlite:///./rdq.db" in said[0] and "RDQ_STORAGE" in said[0]


@pytest.mark.usefixtures("no_sqlite")
def test_a_fallback_to_memory_is_asked_for_and_said_loudly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert rdq.storage_url(or_memory=True) == "memory://"
    said = capsys.readouterr().err
    assert "memory://" in said and "GONE when this process exits" in said
    assert "set RDQ_STORAGE" in said


@pytest.mark.usefixtures("no_sqlite")
def test_a_client_without_a_store_refuses_instead_of_storing_in_memory() -> None:
    with pytest.raises(rdq.ConfigError) as refused:
        rdq.SyncClient()
    message = str(refused.value)
    assert "RDQ_STORAGE" in message
    assert "pip install rdq-sqlite" in message and "./packages/rdq-sqlite" in message


@pytest.mark.usefixtures("no_sqlite")
@pytest.mark.asyncio
async def test_the_async_client_refuses_too() -> None:
    with pytest.raises(rdq.ConfigError, match="RDQ_STORAGE"):
        async with rdq.Client.open():
            pass


@pytest.mark.asyncio
async def test_the_clients_open_the_store_rdq_storage_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RDQ_STORAGE_URL", raising=False)
    monkeypatch.setenv("RDQ_STORAGE", "memory://named-by-env")
    async with rdq.Client.open() as client:
        await client.submit("work", {"n": 1}, id="a")
        with rdq.SyncClient() as sync:
            sync.submit("work", {"n": 2}, id="b")
        async with rdq.open_storage("memory://named-by-env") as store:
            assert (await store.stats("default")).pending == 2
