"""The fixtures every clause relies on; a backend's test class overrides ``storage`` (and
optionally ``storage_url`` / ``peer_storage_url``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from rdq import open_storage
from rdq.spi import Capabilities, Storage
from rdq_compliance._gates import gate, missing
from rdq_compliance._support import new_queue, with_url_option

__all__ = [
    "CORRUPT_KINDS",
    "CorruptTaskWriter",
    "StorageOpener",
    "SuiteFixtures",
    "require_capability",
    "require_url",
]

StorageOpener = Callable[..., Storage]
"""``opener(**url_options)`` builds a new, not yet connected store on the same data, with
the given URL options added (``opener(timeout="2.5")``)."""

CorruptTaskWriter = Callable[..., Awaitable[None]]
"""``await corrupt_task(queue, task_id, kind="undecodable")`` writes a PENDING task of
``queue`` with id ``task_id``, due now or earlier by the storage clock, whose stored form does
not decode. ``kind`` (optional: a writer that takes only ``(queue, task_id)`` still serves the
clauses that need no other kind; those that do then skip) says how it does not decode:

- ``"undecodable"``: any way the store chooses (a value of the wrong type, malformed JSON);
- ``"deep"``: a stored JSON value (the payload, say) nested deeper than any JSON decoder
  recurses (``rdq_compliance._support.nested(5000)``);
- ``"far_time"``: a stored time (``created_at``, say) outside the years 1–9999, which no
  Python ``datetime`` holds; its status time stays valid (due now).

A store that cannot hold such a task (its schema refuses it) calls ``pytest.skip(reason)``."""

CORRUPT_KINDS = ("undecodable", "deep", "far_time")
"""The ``kind`` values a ``corrupt_task`` writer is asked for."""


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
        def storage_url(self) -> str | None:
            """A URL that another *process* can open to reach the same data (chaos test and
            cross-connection tests), or ``None`` (the default): those tests then skip, naming
            this fixture. It is ``None`` unless the backend provides it, so a ``storage``
            fixture that builds its store from it fails loudly instead of skipping."""
            return None

        @pytest.fixture
        def peer_storage_url(self, storage_url: str | None) -> str | None:
            """A URL that another store *instance in this process* can open to reach the same
            data (several connections, each in its own thread; the lifecycle clauses).
            Defaults to ``storage_url``."""
            return storage_url

        @pytest.fixture
        def open_peer_storage(self, peer_storage_url: str | None) -> StorageOpener:
            """Builds new, unconnected stores from ``peer_storage_url`` with URL options
            added (the lifecycle and operation-timeout clauses use it)."""
            url = require_url(peer_storage_url, "peer_storage_url (or storage_url)")

            def opener(**url_options: str) -> Storage:
                built = url
                for name, value in url_options.items():
                    built = with_url_option(built, name, value)
                return open_storage(built)

            return opener

        @pytest.fixture
        def expected_capabilities(
            self, storage: Storage, request: pytest.FixtureRequest
        ) -> Capabilities:
            """The ``Capabilities`` the backend promises to advertise: pin them in the
            backend's test module, so that a capability lost is a red test, not a dozen
            silently skipped clauses. Without the fixture (a test class written before it
            was asked for), what the store declares — and the kit's account says that
            nothing pinned them."""
            accounting = request.config.pluginmanager.get_plugin("rdq-kit-accounting")
            if accounting is not None:
                accounting.note_unpinned(request.node)
            return storage.capabilities()

        @pytest.fixture
        def corrupt_task(self) -> CorruptTaskWriter:
            """An async callable ``(queue, task_id, kind="undecodable") -> None`` that
            writes, through the backend's own test hook, a PENDING task of ``queue`` due now
            (or earlier) whose stored form does not decode (see the ``CorruptTaskWriter``
            type for the kinds). A store that cannot hold such a task overrides this with
            ``pytest.skip("why")``."""
            pytest.fail(
                f"{type(self).__name__} must define a `corrupt_task` fixture: an async "
                "callable (queue, task_id) -> None that writes a PENDING task, due now, whose "
                "stored form does not decode (see docs/writing-a-backend.md, 'Corrupt stored "
                "tasks'); a store that cannot hold one overrides it with pytest.skip(reason)",
                pytrace=False,
            )

    @pytest.fixture(autouse=True)
    def _contract_gate(self, request: pytest.FixtureRequest) -> None:
        """Skip a clause of a capability or contract version the store lacks (see
        :mod:`rdq_compliance._gates`)."""
        gate(request)

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


def require_url(url: str | None, fixture: str) -> str:
    """``url``, or skip the calling test naming the fixture that would provide it."""
    if url is None:
        pytest.skip(f"needs the {fixture} fixture")
    return url


def require_capability(capabilities: Capabilities, name: str) -> None:
    """Skip the calling test, naming the missing capability, unless the store offers it."""
    reason = missing(capabilities, {name}, 1)
    if reason is not None:
        pytest.skip(reason)
