"""The store's connections pack commands with hiredis: byte for byte what redis-py's own
packer writes, and redis-py's errors for what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import DataError

from rdq_redis._sending import CheapSend, cheap_send

ARGUMENT = st.one_of(
    st.text(),
    st.binary(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)


def both(*args: object) -> tuple[bytes, bytes]:
    """(the store's connection, redis-py's) packing of one command, as sent."""
    ours = cheap_send(Connection)().pack_command(*args)
    theirs = Connection().pack_command(*args)
    return b"".join(ours), b"".join(theirs)


@given(
    st.sampled_from(["EVALSHA", b"EVALSHA", "SCRIPT LOAD", b"CLIENT SETINFO"]), st.lists(ARGUMENT)
)
def test_a_command_is_packed_to_the_same_bytes_as_redis_py_packs_it(
    name: str | bytes, args: list[object]
) -> None:
    ours, theirs = both(name, *args)
    assert ours == theirs


def test_a_completion_batch_as_the_scripts_get_it_is_packed_the_same() -> None:
    args = ["EVALSHA", "0" * 40, 3, "rdq:{q}:levels", "rdq:{q}:wake", "rdq:{q}:done"]
    for i in range(20):
        args += [f"task-{i}", f"q/5f2c.{i}", 1_733_170_000_000_000 + i, b'{"n":1}', "ünï", -i, 0.5]
    ours, theirs = both(*args)
    assert ours == theirs


def test_what_hiredis_cannot_pack_goes_to_redis_py() -> None:
    # redis-py packs these itself (hiredis refuses them) ...
    for value in (bytearray(b"abc"), memoryview(b"abc")):
        ours, theirs = both("SET", "k", value)
        assert ours == theirs
    # ... and refuses a bool with its own error
    with pytest.raises(DataError):
        cheap_send(Connection)().pack_command("SET", "k", True)


def test_another_encoding_is_packed_by_redis_py() -> None:
    connection = cheap_send(Connection)(encoding="latin-1")
    assert (
        b"".join(connection.pack_command("SET", "k", "é"))
        == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n\xe9\r\n"
    )


def test_each_driver_class_gets_one_subclass_that_keeps_what_it_is() -> None:
    plain, tls = cheap_send(Connection), cheap_send(SSLConnection)
    assert cheap_send(Connection) is plain and cheap_send(plain) is plain
    assert issubclass(tls, SSLConnection) and issubclass(tls, CheapSend)
    assert not issubclass(plain, SSLConnection)
