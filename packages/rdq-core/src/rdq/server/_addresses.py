"""Which addresses a callback may be sent to (the SSRF guard's judgement of one address).

An address is allowed when it is public (globally routable, not multicast) or lies in a network
the operator listed in ``allow_networks``. An IPv6 address that carries an IPv4 address, and
that a translator or tunnel on the node's path turns into a packet to that IPv4 address, is
judged as the IPv4 address it carries — otherwise ``[64:ff9b::a9fe:a9fe]`` (NAT64 for
169.254.169.254) would pass as a public IPv6 address:

* IPv4-mapped ``::ffff:0:0/96`` and IPv4-translated ``::ffff:0:0:0/96`` (SIIT);
* IPv4-compatible ``::/96`` (deprecated; ``::`` and ``::1`` are themselves, not IPv4);
* NAT64: the well-known prefix ``64:ff9b::/96`` (the IPv4 address in the last 32 bits) and the
  local-use ``64:ff9b:1::/48``, where the IPv4 address sits where the deployment's prefix length
  (/48, /56, /64 or /96, RFC 6052) puts it; the node cannot know which, so every placement
  is judged and all must pass;
* 6to4 ``2002::/16`` (the IPv4 address in bits 16-47).

Teredo (``2001::/32``) is refused outright unless its network is listed: IANA marks it not
globally reachable, its client address is obfuscated and sits behind a NAT whose far side the
node cannot judge, and public services do not use it.

A listed IPv6 network that contains the address allows it whatever it carries (the operator
said so explicitly); an embedded IPv4 address in a listed IPv4 network is allowed too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from rdq.callbacks import IPAddress, IPNetwork

__all__ = ["address_allowed", "embedded_ipv4"]

_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")

_LAST_32_BITS = (12, 13, 14, 15)
# RFC 6052 section 2.2: the bytes of the IPv6 address that hold the IPv4 address for each
# prefix length a local-use /48 allows (byte 8, bits 64-71, is always skipped).
_RFC6052_PLACEMENTS = ((6, 7, 9, 10), (7, 9, 10, 11), (9, 10, 11, 12), _LAST_32_BITS)


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a packet to the IPv6 ``address`` may be delivered to, for the forms
    in the module docstring; empty for an IPv4 address and any other IPv6 address."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    packed = address.packed
    if address in _IPV4_MAPPED or address in _IPV4_TRANSLATED or address in _NAT64_WELL_KNOWN:
        return [_take(packed, _LAST_32_BITS)]
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return [_take(packed, _LAST_32_BITS)]
    if address in _NAT64_LOCAL_USE:
        return list(dict.fromkeys(_take(packed, octets) for octets in _RFC6052_PLACEMENTS))
    if address in _SIX_TO_FOUR:
        return [_take(packed, (2, 3, 4, 5))]
    return []


def address_allowed(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    """True if a callback may connect to ``address`` (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address):
        if _listed(address, networks):
            return True
        if address in _TEREDO:
            return False
        embedded = embedded_ipv4(address)
        if embedded:
            return all(_public(v4) or _listed(v4, networks) for v4 in embedded)
    return _public(address) or _listed(address, networks)


def _public(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast


def _listed(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def _take(packed: bytes, octets: tuple[int, int, int, int]) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bytes(packed[i] for i in octets))
