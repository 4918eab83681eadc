"""The fixtures every clause relies on; a backend's test class overrides ``storage`` (and
optionally ``storage_url`` / ``peer_storage_url``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rdq.spi import Capabilities, Storage
from rdq_compliance._support import new_queue

__all__ = ["SuiteFixtures", "require_capability"]


class SuiteFixtures:
    """Fixture slots of :class:`~rdq_compliance.StorageSuite`."""

    # The slots a backend overrides are hidden from type checkers: pytest turns a fixture into
    # an object whose type an override (sync or async, other parameters) never matches.
    if not TYPE_CHECKING:

        @pytest.fixture
        def storage(self) -> Storage:
            """A connected, migrated store (override with an async fixture that yields one).

            It may hold data of other tests: every test uses its own queue names and ids."""
            raise NotImplementedError(
                f"{type(self).__name__} must define a `storage` fixture yielding a connected, "
                "migrated rdq.spi.Storage (see rdq_compliance.StorageSuite)"
            )

        @pytest.fixture
        def storage_url(self) -> str:
            """A URL that another *process* can open to reach the same data (chaos test and
            cross-connection tests). Without it those tests are skipped."""
            pytest.skip("cross-process tests need storage_url")

        @pytest.fixture
        def peer_storage_url(self, storage_url: str) -> str:
            """A URL that another store *instance in this process* can open to reach the same
            data (several connections, each in its own thread). Defaults to ``storage_url``."""
            return storage_url

    @pytest.fixture
    def queue(self) -> str:
        """A queue name that no other test uses."""
        return new_queue()

    @pytest.fixture
    def other_queue(self) -> str:
        """A second queue name that no other test uses."""
        return new_queue("kit-other")

    @pytest.fixture
    def capabilities(self, storage: Storage) -> Capabilities:
        """What the store under test advertises."""
        return storage.capabilities()


def require_capability(capabilities: Capabilities, name: str) -> None:
    """Skip the calling test, naming the missing capability, unless the store offers it."""
    if not getattr(capabilities, name):
        pytest.skip(f"the store does not advertise the {name!r} capability")
