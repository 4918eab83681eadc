"""How a store's command goes out: packed in C, its send bounded without a task.

Two parts of redis-py's asyncio connection cost a short script call much of its client CPU
(Python 3.11, redis-py 8):

- It packs every command in Python, one ``encode`` per argument: ~130 µs for a command of
  130 arguments, where ``hiredis.pack_command`` (redis-py's own choice for its
  synchronous client) takes ~25 µs and writes the same bytes.
- It bounds the send with ``asyncio.wait_for``, which on Python 3.11 runs the send as a task
  of its own and resumes the caller a turn of the event loop later.

:class:`CheapSend` changes only those two: what hiredis cannot pack (a ``bytearray``, a
``bool``, another encoding than UTF-8) goes to redis-py's packer and its errors, and the send
keeps its ``socket_timeout`` through ``asyncio.timeout``. Reading the reply is redis-py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from hiredis import pack_command as hiredis_pack
from redis import exceptions as rx
from redis.asyncio.connection import AbstractConnection

__all__ = ["CheapSend", "cheap_send"]


class CheapSend(AbstractConnection):
    """A redis-py connection that packs commands with hiredis and bounds a send by
    ``socket_timeout`` through ``asyncio.timeout`` (no task per command). Connecting and the
    health check keep their own bounds; a send that runs out of time drops the connection and
    raises redis-py's ``TimeoutError``, as redis-py's own send does."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder  # hiredis writes text as UTF-8, as redis-py's default does
        if (encoder.encoding, encoder.encoding_errors) != ("utf-8", "strict"):
            return super().pack_command(*args)
        name = args[0]
        if isinstance(name, str):  # a name of two words ("SCRIPT LOAD") is two arguments
            args = (*name.encode().split(), *args[1:])
        elif isinstance(name, bytes) and b" " in name:
            args = (*name.split(), *args[1:])
        try:
            return [hiredis_pack(args)]
        except TypeError:
            return super().pack_command(*args)  # redis-py's packing, or its DataError

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        timeout = self.socket_timeout
        if not timeout:
            return await super().send_packed_command(command, check_health)
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        # redis-py's send, without its wait_for: only this send runs on the connection now
        # (a command's reply is read after it), so nothing reads the cleared socket_timeout
        self.socket_timeout = None
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health=False)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise rx.TimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


_CHEAP: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def cheap_send(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` with :class:`CheapSend`'s packing and send (one class per driver
    class: plain, TLS, Sentinel-managed)."""
    if issubclass(connection_class, CheapSend):
        return connection_class
    if connection_class not in _CHEAP:
        name = f"CheapSend{connection_class.__name__}"
        _CHEAP[connection_class] = type(name, (CheapSend, connection_class), {})
    return _CHEAP[connection_class]
