"""Where a webhook job may send its request (issue 16): the SSRF rules of a shared host.

By default no request goes to a loopback, link-local, unspecified, multicast or reserved
address, nor to one of the host's own addresses, nor to a private range (RFC 1918,
CGNAT, unique-local IPv6): a user who may add jobs must not reach services that trust
"the call comes from this host". An admin opens networks with ``http_allow_networks``
(the tests' daemons allow 127.0.0.0/8). The daemon's own TCP listeners (the metrics
listener) stay closed whatever is allowed.

The name is resolved once and every address it resolves to must pass; the request is
then sent to the checked address (engine/webhook.py), with the name kept for the Host
header and TLS, so a second resolution (DNS rebinding) cannot move it elsewhere.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Ranges refused unless an admin allows them, with the word a refusal uses.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "shared (CGNAT)"),
    ("fc00::/7", "unique-local"),
)
_PRIVATE = tuple((ipaddress.ip_network(n), word) for n, word in PRIVATE)


def parse_networks(text: str | Iterable[str]) -> tuple[Network, ...]:
    """CIDRs from a comma-separated string or a list; ValueError names a bad one."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        if item.strip():
            out.append(ipaddress.ip_network(item.strip(), strict=False))
    return tuple(out)


@dataclass(frozen=True)
class NetGuard:
    allow: tuple[Network, ...] = ()
    #: The host's own addresses (refused unless allowed).
    own: frozenset[Address] = frozenset()
    #: The daemon's own TCP listeners: refused always.
    listeners: frozenset[tuple[Address, int]] = field(default_factory=frozenset)

    def refusal(self, ip: Address, port: int) -> str | None:
        """Why a request may not go to ``ip:port``; None when it may."""
        ip = _unmapped(ip)
        if (ip, port) in self.listeners:
            return f"{ip}:{port} is the daemon's own listener"
        if any(ip in net for net in self.allow):
            return None
        word = _kind(ip)
        if word is None and ip in self.own:
            word = "one of this host's own addresses"
        if word is None:
            return None
        return f"{ip} is {word}; an admin may allow it with http_allow_networks"


def _unmapped(ip: Address) -> Address:
    """``::ffff:127.0.0.1`` is 127.0.0.1 to the kernel: judge it as that."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _kind(ip: Address) -> str | None:
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    for net, word in _PRIVATE:
        if ip in net:
            return word
    if ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None


__all__ = ["NetGuard", "parse_networks"]
