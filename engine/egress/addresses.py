"""What an address really reaches: the tables of refused ranges (loopback, private, link-local,
cloud metadata, special purpose), IPv6 forms that wrap an IPv4 address, odd IPv4 spellings."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Union


IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure IMDS, OCI, DigitalOcean, OpenStack, ...
        "169.254.169.253",  # AWS DNS resolver
        "169.254.170.2",  # AWS ECS task metadata / credentials
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "168.63.129.16",  # Azure WireServer (a public address)
    )
)

_REFUSED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved (IETF protocol assignment)"),
    (_V4("192.0.2.0/24"), "reserved (documentation)"),
    (_V4("192.88.99.0/24"), "reserved (6to4 relay anycast)"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "reserved (benchmarking)"),
    (_V4("198.51.100.0/24"), "reserved (documentation)"),
    (_V4("203.0.113.0/24"), "reserved (documentation)"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

_REFUSED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("64:ff9b:1::/48"), "reserved (local-use NAT64)"),
    (_V6("100::/64"), "reserved (discard-only)"),
    (_V6("fc00::/7"), "private (unique local)"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),
    (_V6("ff00::/8"), "multicast"),
    (_V6("2001::/32"), "reserved (Teredo)"),
    (_V6("2001:db8::/32"), "reserved (documentation)"),
    (_V6("2001::/23"), "reserved (IETF protocol assignment)"),
    (_V6("3fff::/20"), "reserved (documentation)"),
)
_GLOBAL_UNICAST_V6 = _V6("2000::/3")
_NAT64 = _V6("64:ff9b::/96")
_SIXTOFOUR = _V6("2002::/16")
_V4_COMPATIBLE = _V6("::/96")


def _strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _unscoped(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id:
        return ipaddress.IPv6Address(int(addr))
    return addr


def _unmapped(addr: IPAddress) -> IPAddress:
    mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
    return mapped if mapped is not None else addr


def _embedded_v4(addr: IPAddress) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address reaches through (mapped, NAT64, 6to4), if any."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped, "IPv4-mapped IPv6"
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF), "NAT64"
    if addr.sixtofour is not None:
        return addr.sixtofour, "6to4"
    return None


def refusal_reason(address: IPAddress | str) -> str | None:
    """Why the default policy refuses ``address`` (``"loopback"``, ``"private"``, ``"cloud
    metadata"``, ...), or None for a public address. Ignores any allow-list."""
    addr = _unscoped(ipaddress.ip_address(address) if isinstance(address, str) else address)
    if addr in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(addr, ipaddress.IPv4Address):
        for net, label in _REFUSED_V4:
            if addr in net:
                return label
        return None
    embedded = _embedded_v4(addr)
    if embedded is not None:
        v4, via = embedded
        reason = refusal_reason(v4)
        return f"{reason} (via {via} {v4})" if reason else None
    if addr == ipaddress.IPv6Address("::"):
        return "unspecified"
    if addr == ipaddress.IPv6Address("::1"):
        return "loopback"
    if addr in _V4_COMPATIBLE:
        v4 = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        reason = refusal_reason(v4)
        return f"{reason} (via IPv4-compatible IPv6 {v4})" if reason else "reserved (IPv4-compatible IPv6)"
    for net6, label in _REFUSED_V6:
        if addr in net6:
            return label
    if addr not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return None


_NUMERIC_V4 = re.compile(r"[0-9a-fA-FxX.]+")


def _literal_address(host: str) -> IPAddress | None:
    """The address a host string denotes without DNS: an IP literal, or an IPv4 spelling the C
    library's ``inet_aton`` accepts (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``)."""
    h = _strip_brackets(host)
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    if _NUMERIC_V4.fullmatch(h) and any(c.isdigit() for c in h):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None
