"""Egress policy: what the server may dial on a flow's behalf.

A flow is untrusted input written by one user and run with the service's reach. Anything
that dials out for it (the HTTPRequest node, an Agent's model ``base_url``, a webhook URL,
...) goes through an :class:`EgressPolicy`, so a flow cannot read the API, the Temporal Web
UI, a database or the cloud metadata service next to the worker.

What is refused by default
--------------------------
An address is judged by what it really reaches, after name resolution. Refused unless the
allow-list names it:

- loopback (127.0.0.0/8, ::1) and unspecified (0.0.0.0/8, ::; 0.0.0.0 reaches the local host);
- private: RFC 1918 (10/8, 172.16/12, 192.168/16) and unique local IPv6 (fc00::/7);
- link-local (169.254/16, fe80::/10) and deprecated site-local (fec0::/10);
- cloud metadata: 169.254.169.254 (AWS, GCP, Azure, OCI, ...), 169.254.170.2 and
  169.254.170.23 (AWS containers), fd00:ec2::254 and fd00:ec2::23 (AWS IPv6),
  100.100.100.200 (Alibaba), 192.0.0.192 (Oracle, legacy), 168.63.129.16 (Azure
  WireServer, a public address). These stay refused even under a wider CIDR entry such as
  ``169.254.0.0/16``: only an entry naming the exact address (or a host entry naming the host)
  opens one;
- carrier-grade NAT 100.64.0.0/10, multicast (224/4, ff00::/8), reserved and special-purpose
  ranges (240/4 and broadcast, 192.0.0.0/24, documentation and benchmarking ranges, 6to4
  relay anycast, IPv6 outside 2000::/3, 2001::/23 including Teredo, 100::/64, local-use
  NAT64 64:ff9b:1::/48);
- IPv6 forms that wrap an IPv4 address are judged by that address: IPv4-mapped
  (``::ffff:127.0.0.1``), NAT64 ``64:ff9b::/96`` and 6to4 ``2002::/16`` (a public embedded
  address is allowed), IPv4-compatible ``::a.b.c.d`` (deprecated: always refused);
- odd IPv4 spellings that resolvers accept (decimal ``2130706433``, octal ``0177.0.0.1``,
  hex ``0x7f.1``, short ``127.1``) are read as the C library reads them, and the connection
  goes to the address that was judged, never to the original string.

Every other (public) address is allowed, on any port.

How to open it: ``SIGNOFF_EGRESS_ALLOW``
----------------------------------------
A comma-separated list; each entry is one of:

- ``host``: a DNS name, allowed on any port. Matched by name (case-insensitive, trailing dot
  ignored, IDNA-encoded; no wildcards, no subdomains), *before* resolution; all the addresses
  it resolves to are then allowed (the connection is still pinned to one of them);
- ``host:port``: that name on that port only;
- an address or a CIDR (``127.0.0.1``, ``10.0.0.0/8``, ``::1``, ``fd00::/8``): those
  addresses on any port;
- ``address:port`` or ``CIDR:port``: those addresses on that port only (``127.0.0.1:8123``,
  ``10.0.0.0/8:443``). IPv6 takes brackets when a port follows: ``[::1]:9000``,
  ``[fd00::/8]:443`` (``::1:9000`` is the IPv6 address ``::1:9000``, not a port).

Example: ``SIGNOFF_EGRESS_ALLOW="127.0.0.1:8123, internal.example.com, 10.0.0.0/8, [::1]:9000"``.
A CIDR must have no host bits set (``10.0.0.1/8`` is refused as a typo) and an address must
be written in dotted-quad form: :meth:`EgressPolicy.parse` raises :class:`ValueError` naming
the bad entry.

How a caller wires it
---------------------
Build one policy per process (``EgressPolicy.parse(settings.egress_allow)``) and hand the
components a client factory::

    factory = lambda: egress_client(policy, max_response_bytes=10 * 2**20)
    async with factory() as client:                       # what ctx.run.http_client() returns
        resp = await client.request("GET", url, timeout=30)   # checked, pinned, capped

- The check runs when a connection is opened: the name is resolved once (asyncio
  ``getaddrinfo``), every address it resolves to is checked (one refused address refuses the
  host), and the socket connects to a checked address (trying them in order), so DNS
  rebinding between the check and the connect cannot swap it. TLS SNI, certificate
  verification and the ``Host`` header keep the original host name. With
  ``follow_redirects=True`` every hop that opens a connection goes through the same check.
- The client ignores the environment (``trust_env=False``): no ``HTTP_PROXY``/``ALL_PROXY``
  (a proxy would dial for us, past the check) and no ``.netrc`` credentials.
  :func:`egress_client` refuses ``proxy``, ``mounts`` and ``transport`` arguments for the
  same reason. ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are still honoured for the CA bundle.
- A refusal raises :class:`EgressDenied`, a subclass of ``httpx.ConnectError`` (so an
  ``except httpx.HTTPError`` sees it) whose message names the host, the address, why, and the
  entry to add to ``SIGNOFF_EGRESS_ALLOW``. Retrying cannot fix it: callers that retry
  transport errors must check ``isinstance(e, EgressError)`` or ``getattr(e, "retryable",
  True) is False`` first, and fail at once.
- Response size: with ``max_response_bytes`` set on the client, every response body (for
  ``client.request`` and ``client.stream`` alike) is capped: a body over the cap raises
  :class:`ResponseTooLarge` while being read (at once when ``Content-Length`` already says
  so), and at most the cap plus one 64 KiB chunk is ever held. The cap counts *decoded*
  bytes: the client asks for ``gzip, deflate`` only and decodes them itself in bounded
  steps (a decompression bomb stops at the cap); such responses reach the caller already
  decoded, without ``Content-Encoding``/``Content-Length``. A body in any other encoding is
  handed over undecoded (and without the header), so nothing expands it afterwards.
- For a per-call cap, or on a client without one, stream and read with
  :func:`read_capped`::

      async with client.stream("GET", url) as resp:
          body = await read_capped(resp, 1_000_000)   # bytes; ResponseTooLarge past the cap
      text = body.decode(resp.encoding or "utf-8", errors="replace")

  ``client.request`` reads the whole body before returning, so on a client without a cap
  only ``client.stream`` + :func:`read_capped` bounds memory.
- Something that dials without httpx (a websocket, SMTP, ...) calls
  ``await policy.checked_addresses(host, port)`` and connects to one of the returned
  addresses (never to ``host`` again).

This module imports neither Temporal nor FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import socket
import time
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Union

import httpcore
import httpx

__all__ = [
    "ENV_VAR",
    "EgressDenied",
    "EgressError",
    "EgressNetworkBackend",
    "EgressPolicy",
    "EgressTransport",
    "Resolver",
    "ResponseTooLarge",
    "egress_client",
    "read_capped",
    "refusal_reason",
    "system_resolver",
]

ENV_VAR = "SIGNOFF_EGRESS_ALLOW"

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
# An async resolver: (host, port) -> the IP addresses (as strings) the host resolves to.
Resolver = Callable[[str, int], Awaitable[Iterable[str]]]

CHUNK = 64 * 1024  # the largest decoded piece handed on at once


# --------------------------------------------------------------------------- errors


class EgressError(Exception):
    """Base of the egress errors. Retrying cannot fix one: ``retryable`` is False."""

    retryable = False


class EgressDenied(EgressError, httpx.ConnectError):
    """The egress policy refused to connect to a host.

    ``host``, ``port``: what was asked; ``address``: the address it resolved to (None when no
    address was involved); ``reason``: why it is refused (``"loopback"``, ...);
    ``suggestion``: the narrowest ``SIGNOFF_EGRESS_ALLOW`` entry that would allow it.
    """

    def __init__(
        self,
        host: str,
        port: int | None,
        address: str | None,
        reason: str,
        *,
        request: httpx.Request | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.address = address
        self.reason = reason
        self.suggestion = _suggest(host, port)
        target = _hostport(host, port)
        what = reason.replace(" (", " address (", 1) if " (" in reason else f"{reason} address"
        if address is None:  # nothing an allow-list entry could open
            message = f"egress refused: {target or repr(host)} ({reason})"
        else:
            if address != _strip_brackets(host):
                where = f"{target} resolves to {address}, {_article(reason)} {what}"
            else:
                where = f"{target} is {_article(reason)} {what}"
            message = (
                f"egress refused: {where}, which flows may not reach. "
                f"If this is intended, an operator must add it to {ENV_VAR} (e.g. {self.suggestion})."
            )
        super().__init__(message, request=request)

    def __reduce__(self) -> Any:  # keep pickling (e.g. across processes) working
        return (_rebuild_denied, (self.host, self.port, self.address, self.reason))


def _rebuild_denied(host: str, port: int | None, address: str | None, reason: str) -> EgressDenied:
    return EgressDenied(host, port, address, reason)


class ResponseTooLarge(EgressError, httpx.RequestError):
    """A response body is larger than the allowed size.

    ``limit``: the cap in bytes; ``received``: the (decoded) bytes received when reading
    stopped (0 when ``Content-Length`` already said too much); ``declared``: the
    ``Content-Length``, when there was one.
    """

    def __init__(
        self,
        limit: int,
        received: int,
        *,
        declared: int | None = None,
        request: httpx.Request | None = None,
    ) -> None:
        self.limit = limit
        self.received = received
        self.declared = declared
        url = f" from {request.url}" if request is not None else ""
        size = f"declares {declared} bytes" if declared is not None and received == 0 else f"is over {limit} bytes"
        message = f"the response{url} {size}, more than the {limit}-byte limit; reading stopped"
        super().__init__(message, request=request)

    def __reduce__(self) -> Any:
        return (_rebuild_too_large, (self.limit, self.received, self.declared))


def _rebuild_too_large(limit: int, received: int, declared: int | None) -> ResponseTooLarge:
    return ResponseTooLarge(limit, received, declared=declared)


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _hostport(host: str, port: int | None) -> str:
    h = _strip_brackets(host)
    if ":" in h:
        h = f"[{h}]"
    return h if port is None else f"{h}:{port}"


def _suggest(host: str, port: int | None) -> str:
    h = _strip_brackets(host).lower().rstrip(".")
    literal = _literal_address(h)
    if literal is not None:
        h = str(_unmapped(literal))
    return _hostport(h, port)


# --------------------------------------------------------------------------- classification

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


# --------------------------------------------------------------------------- the policy


@dataclass(frozen=True)
class _NameEntry:
    name: str
    port: int | None

    def __str__(self) -> str:
        return _hostport(self.name, self.port)


@dataclass(frozen=True)
class _NetEntry:
    network: IPNetwork
    port: int | None

    def __str__(self) -> str:
        net = self.network
        text = str(net.network_address) if net.num_addresses == 1 else str(net)
        if self.port is None:
            return text
        return f"[{text}]:{self.port}" if net.version == 6 else f"{text}:{self.port}"


_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_BRACKETED = re.compile(r"\[([^\[\]]+)\](?::([^:]*))?")


def _normalize_name(name: str) -> str:
    """Lower-case, no trailing dot, IDNA-encoded (as httpx sends it)."""
    name = name.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    if not name.isascii():
        try:
            import idna  # an httpx dependency

            name = idna.encode(name, uts46=True).decode("ascii")
        except Exception:
            name = name.encode("idna").decode("ascii")
    return name


class EgressPolicy:
    """What flows may dial: the public internet plus what the allow-list names.

    ``EgressPolicy()`` is the default policy (nothing extra allowed);
    ``EgressPolicy.parse(text)`` reads a ``SIGNOFF_EGRESS_ALLOW`` value. Immutable; safe to
    share between tasks and threads.
    """

    __slots__ = ("_names", "_nets")

    def __init__(self, entries: Iterable[_NameEntry | _NetEntry] = ()) -> None:
        entries = tuple(entries)
        self._names: tuple[_NameEntry, ...] = tuple(e for e in entries if isinstance(e, _NameEntry))
        self._nets: tuple[_NetEntry, ...] = tuple(e for e in entries if isinstance(e, _NetEntry))

    # -- construction

    @classmethod
    def parse(cls, text: str | Iterable[str] | None) -> "EgressPolicy":
        """Parse a comma-separated allow-list (or a list of entries). Empty entries are
        ignored; a malformed one raises :class:`ValueError` naming it."""
        if text is None:
            return cls()
        items = text.split(",") if isinstance(text, str) else [p for t in text for p in str(t).split(",")]
        return cls(_parse_entry(item) for item in items if item.strip())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "EgressPolicy":
        """The policy ``SIGNOFF_EGRESS_ALLOW`` describes in ``environ`` (default: os.environ)."""
        return cls.parse((os.environ if environ is None else environ).get(ENV_VAR, ""))

    def allowing(self, *entries: str) -> "EgressPolicy":
        """This policy with more entries (same syntax), e.g. the operator's own model URL's
        ``host:port``, which no flow chose: ``policy.allowing("127.0.0.1:11434")``."""
        return EgressPolicy((*self._names, *self._nets, *EgressPolicy.parse(list(entries))._entries()))

    def _entries(self) -> tuple[_NameEntry | _NetEntry, ...]:
        return (*self._names, *self._nets)

    # -- introspection

    @property
    def entries(self) -> tuple[str, ...]:
        """The allow-list entries, in canonical form."""
        return tuple(str(e) for e in (*self._names, *self._nets))

    def __str__(self) -> str:
        return ", ".join(self.entries)

    def __repr__(self) -> str:
        return f"EgressPolicy.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EgressPolicy) and (self._names, self._nets) == (other._names, other._nets)

    def __hash__(self) -> int:
        return hash((self._names, self._nets))

    # -- decisions

    def allows_name(self, host: str, port: int) -> bool:
        """True if a host entry names ``host`` (on this port, or on any port). IP literals and
        odd IPv4 spellings never match by name: they are judged as addresses."""
        h = _strip_brackets(host)
        if _literal_address(h) is not None:
            return False
        name = _normalize_name(h)
        return any(e.name == name and e.port in (None, port) for e in self._names)

    def _address_listed(self, addr: IPAddress, port: int) -> bool:
        candidates = [addr]
        embedded = _embedded_v4(addr)
        if embedded is not None:
            candidates.append(embedded[0])
        for a in candidates:
            for e in self._nets:
                if e.port not in (None, port) or e.network.version != a.version or a not in e.network:
                    continue
                if a in METADATA_ADDRESSES and e.network.num_addresses != 1:
                    continue  # metadata only opens when named exactly
                return True
        return False

    def refusal(self, address: IPAddress | str, port: int) -> str | None:
        """Why connecting to ``address:port`` is refused under this policy, or None if it is
        allowed (listed, or public). Host entries are not consulted: see :meth:`allows_name`."""
        addr = _unscoped(ipaddress.ip_address(address) if isinstance(address, str) else address)
        if self._address_listed(addr, port):
            return None
        return refusal_reason(addr)

    async def checked_addresses(
        self,
        host: str,
        port: int,
        *,
        resolver: Resolver | None = None,
        timeout: float | None = None,
    ) -> list[str]:
        """Resolve ``host`` once, check every address, and return the addresses to connect to.

        Raises :class:`EgressDenied` if any address is refused (or the host is empty);
        ``httpcore.ConnectError``/``ConnectTimeout`` if it cannot be resolved. IP literals and
        odd IPv4 spellings are not resolved: they are the address. An IPv4-mapped IPv6
        address is returned as its IPv4 address. Connect only to the returned addresses.
        """
        raw = _strip_brackets(host.strip())
        if not raw:
            raise EgressDenied(host, port, None, "an empty host name")
        literal = _literal_address(raw)
        if literal is not None:
            addresses = [literal]
            by_name = False
        else:
            by_name = self.allows_name(raw, port)
            addresses = await _resolve(raw, port, resolver or system_resolver, timeout)
        # An IPv4-mapped IPv6 address is the IPv4 address: judged, reported and dialed as such.
        addresses = [_unmapped(a) for a in addresses]
        if not by_name:
            for addr in addresses:
                reason = self.refusal(addr, port)
                if reason is not None:
                    raise EgressDenied(host, port, str(addr), reason)
        out: list[str] = []
        for addr in addresses:
            if str(addr) not in out:
                out.append(str(addr))
        return out


def _parse_entry(raw: str) -> _NameEntry | _NetEntry:
    s = raw.strip()

    def bad(why: str) -> ValueError:
        return ValueError(
            f"{ENV_VAR}: {s!r} is not a host, host:port, address or CIDR: {why} "
            f"(example: '127.0.0.1:8123, internal.example.com, 10.0.0.0/8, [::1]:9000')"
        )

    if "://" in s or s.count("/") > 1:
        raise bad("write the host (and port), not a URL")
    if any(c.isspace() for c in s):
        raise bad("it contains a space (separate entries with commas)")
    if "*" in s:
        raise bad("wildcards are not supported; list each host")

    def port_of(text: str | None) -> int | None:
        if text is None:
            return None
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise bad(f"the port {text!r} is not a number from 1 to 65535")
        return int(text)

    if s.startswith("["):
        m = _BRACKETED.fullmatch(s)
        if not m:
            raise bad("an IPv6 entry is written [address], [address]:port or [cidr]:port")
        inner, port = m.group(1), port_of(m.group(2))
        if ":" not in inner:
            raise bad("brackets are for IPv6 addresses")
        return _NetEntry(_network(inner, bad), port)
    if s.count(":") >= 2:  # bare IPv6 (no port)
        return _NetEntry(_network(s, bad), None)
    host, port_text = s.rsplit(":", 1) if ":" in s else (s, None)
    port = port_of(port_text)
    if not host:
        raise bad("the host is missing")
    if "/" in host:
        return _NetEntry(_network(host, bad), port)
    try:
        return _NetEntry(_network(str(ipaddress.IPv4Address(host)), bad), port)
    except ValueError:
        pass
    literal = _literal_address(host)
    if literal is not None:
        raise bad(f"write the address as {literal}")
    if re.fullmatch(r"[0-9.]+", host):
        raise bad("it is not a valid IPv4 address")
    name = _normalize_name(host)
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise bad("it is not a valid host name")
    return _NameEntry(name, port)


def _network(text: str, bad: Callable[[str], ValueError]) -> IPNetwork:
    if "%" in text:
        raise bad("scoped addresses are not supported")
    try:
        if "/" not in text:
            addr = ipaddress.ip_address(text)
            return ipaddress.ip_network(f"{addr}/{addr.max_prefixlen}")
        return ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        hint = ""
        if "host bits set" in str(e):
            hint = f"; did you mean {ipaddress.ip_network(text, strict=False)}?"
        raise bad(f"{e}{hint}") from None


# --------------------------------------------------------------------------- resolution


async def system_resolver(host: str, port: int) -> list[str]:
    """The default resolver: asyncio ``getaddrinfo`` (TCP), IPv4 and IPv6 addresses."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


async def _resolve(host: str, port: int, resolver: Resolver, timeout: float | None) -> list[IPAddress]:
    try:
        async with asyncio.timeout(timeout):
            answers = list(await resolver(host, port))
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
    except OSError as e:
        raise httpcore.ConnectError(f"could not resolve {host}: {e}") from None
    out: list[IPAddress] = []
    for answer in answers:
        try:
            addr = ipaddress.ip_address(str(answer))
        except ValueError:
            raise httpcore.ConnectError(f"resolving {host} gave {answer!r}, which is not an IP address") from None
        if addr not in out:
            out.append(addr)
    if not out:
        raise httpcore.ConnectError(f"could not resolve {host}: no address")
    return out


# --------------------------------------------------------------------------- httpcore / httpx


class EgressNetworkBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that resolves, checks and connects to a checked address.

    httpcore still runs TLS with the origin's host name (SNI and certificate checks), since
    it passes its own host name to ``start_tls``; only the TCP connect is pinned.
    ``resolver`` replaces DNS (tests, custom DNS); ``network_backend`` is what dials the
    checked address (default ``httpcore.AnyIOBackend()``).
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.policy = policy
        self.resolver = resolver
        self._inner = network_backend if network_backend is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        start = time.monotonic()
        addresses = await self.policy.checked_addresses(host, port, resolver=self.resolver, timeout=timeout)
        last: Exception | None = None
        for address in addresses:
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=remaining, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as e:  # try the next checked address
                last = e
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise EgressDenied(path, None, None, "a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class EgressTransport(httpx.AsyncHTTPTransport):
    """An ``httpx.AsyncHTTPTransport`` whose connections go through :class:`EgressNetworkBackend`,
    without proxies, optionally capping every response body at ``max_response_bytes``."""

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        verify: Any = True,
        cert: Any = None,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits | None = None,
        retries: int = 0,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
        max_response_bytes: int | None = None,
        resolver: Resolver | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        on_request: Callable[[httpx.Request], None] | None = None,
    ) -> None:
        # super().__init__ is deliberately not called: it would build a pool (maybe through a
        # proxy) that we replace. The parent's request handling uses ``self._pool``; should
        # httpx rename it, requests fail (AttributeError) rather than go around the policy.
        if max_response_bytes is not None and max_response_bytes < 0:
            raise ValueError("max_response_bytes must be >= 0")
        self.policy = policy if policy is not None else EgressPolicy()
        self.max_response_bytes = max_response_bytes
        self.on_request = on_request
        self.backend = EgressNetworkBackend(self.policy, resolver=resolver, network_backend=network_backend)
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, cert=cert, trust_env=True),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=http1,
            http2=http2,
            local_address=local_address,
            retries=retries,
            socket_options=socket_options,
            network_backend=self.backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.on_request is not None:  # e.g. a run's budget of calls: it may refuse the request
            self.on_request(request)
        response = await super().handle_async_request(request)
        if self.max_response_bytes is None:
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        encodings = _encodings(response.headers)
        headers = response.headers.copy()
        if "content-encoding" in headers:
            # Decoded (or handed over raw) here, in bounded steps: nothing downstream decodes.
            del headers["content-encoding"]
            if encodings:
                headers.pop("content-length", None)
        return httpx.Response(
            status_code=response.status_code,
            headers=headers,
            stream=_CappedStream(
                response.stream,
                self.max_response_bytes,
                request=request,
                encodings=encodings,
                declared=_declared_length(response, request.method),
            ),
            extensions=response.extensions,
        )


class _CappedStream(httpx.AsyncByteStream):
    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        limit: int,
        *,
        request: httpx.Request,
        encodings: list[str],
        declared: int | None,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._request = request
        self._encodings = encodings
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces = _capped(self._inner, self._limit, self._encodings, self._declared, self._request)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()


def egress_client(
    policy: EgressPolicy | None = None,
    *,
    timeout: float | httpx.Timeout | None = 30.0,
    max_response_bytes: int | None = None,
    follow_redirects: bool = False,
    resolver: Resolver | None = None,
    verify: Any = True,
    cert: Any = None,
    http2: bool = False,
    limits: httpx.Limits | None = None,
    retries: int = 0,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
    on_request: Callable[[httpx.Request], None] | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` that only connects where ``policy`` allows (default: the
    default policy), ignores environment proxies, and caps response bodies at
    ``max_response_bytes`` (decoded bytes; None: no cap). Use it as
    ``async with egress_client(policy) as client``. Other keyword arguments go to
    ``httpx.AsyncClient`` (``headers``, ``auth``, ``base_url``, ``event_hooks``, ...);
    ``proxy``, ``mounts``, ``transport`` and ``trust_env=True`` are refused (they would
    bypass the policy). ``resolver``/``network_backend``: see :class:`EgressNetworkBackend`.
    ``on_request``: called with every request before it is sent (each redirect too); what it
    raises fails the request (a run's budget of calls).
    """
    bypass = sorted(k for k in ("proxy", "proxies", "mounts", "transport", "app") if kwargs.get(k) is not None)
    if bypass:
        raise TypeError(f"egress_client() does not take {', '.join(bypass)}: it would bypass the egress policy")
    if kwargs.pop("trust_env", False):
        raise TypeError(
            "egress_client() does not take trust_env=True: environment proxies would bypass the egress policy"
        )
    for k in ("proxy", "proxies", "mounts", "transport", "app"):
        kwargs.pop(k, None)
    if max_response_bytes is not None:
        headers = httpx.Headers(kwargs.pop("headers", None))
        headers.setdefault("Accept-Encoding", "gzip, deflate")  # the encodings decoded within the cap
        kwargs["headers"] = headers
    transport = EgressTransport(
        policy,
        verify=verify,
        cert=cert,
        http2=http2,
        limits=limits,
        retries=retries,
        max_response_bytes=max_response_bytes,
        resolver=resolver,
        network_backend=network_backend,
        on_request=on_request,
    )
    return httpx.AsyncClient(
        transport=transport, trust_env=False, timeout=timeout, follow_redirects=follow_redirects, **kwargs
    )


# --------------------------------------------------------------------------- size cap


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """Read a streamed response's body (``async with client.stream(...) as response``), at
    most ``max_bytes`` (decoded) bytes of it.

    Raises :class:`ResponseTooLarge` as soon as the body is known to be longer (its
    ``Content-Length`` or the bytes read so far) and closes the response; never holds more
    than ``max_bytes`` plus one chunk (64 KiB). gzip and deflate are decoded here in bounded
    steps, so a compressed body cannot expand past the cap; a body in another encoding is
    returned undecoded. A response already read (``client.request``) is only measured.
    Returns the body; decode text with ``body.decode(response.encoding or "utf-8")``.
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    try:
        request: httpx.Request | None = response.request
    except RuntimeError:  # a hand-built response
        request = None
    try:
        content = response.content
    except httpx.ResponseNotRead:
        pass
    else:
        if len(content) > max_bytes:
            raise ResponseTooLarge(max_bytes, len(content), request=request)
        return content
    body = bytearray()
    method = request.method if request is not None else "GET"
    declared = _declared_length(response, method)
    try:
        async with contextlib.aclosing(response.aiter_raw()) as raw:
            pieces = _capped(raw, max_bytes, _encodings(response.headers), declared, request)
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    body += piece
    except BaseException:
        await response.aclose()
        raise
    return bytes(body)


def _encodings(headers: httpx.Headers) -> list[str]:
    """The content codings in the order they were applied, without ``identity``."""
    values = ",".join(headers.get_list("content-encoding"))
    return [v.strip().lower() for v in values.split(",") if v.strip() and v.strip().lower() != "identity"]


def _declared_length(response: httpx.Response, method: str) -> int | None:
    if method.upper() == "HEAD" or response.status_code in (204, 304) or response.status_code < 200:
        return None
    if _encodings(response.headers):
        return None  # Content-Length counts encoded bytes; the cap counts decoded ones
    value = response.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


async def _capped(
    raw: Any,
    limit: int,
    encodings: list[str],
    declared: int | None,
    request: httpx.Request | None,
) -> AsyncIterator[bytes]:
    """Decoded pieces of ``raw`` (an async iterable of wire bytes); ResponseTooLarge past
    ``limit``: the piece that crosses it is never handed on."""
    if declared is not None and declared > limit:
        raise ResponseTooLarge(limit, 0, declared=declared, request=request)
    decoders = _decoders(encodings, request)
    total = 0

    def take(piece: bytes) -> bytes:
        nonlocal total
        total += len(piece)
        if total > limit:
            raise ResponseTooLarge(limit, total, declared=declared, request=request)
        return piece

    async for chunk in raw:
        for piece in _run(decoders, 0, chunk):
            yield take(piece)
    for piece in _flush(decoders):
        yield take(piece)


class _Inflate:
    """gzip / deflate decoding that yields at most CHUNK bytes at a time."""

    def __init__(self, encoding: str, request: httpx.Request | None) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._obj = zlib.decompressobj(zlib.MAX_WBITS | 16 if self._gzip else zlib.MAX_WBITS)
        self._first = True
        self._request = request
        self._encoding = encoding

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            if self._first and data and not self._gzip:
                self._first = False
                try:  # deflate: zlib-wrapped, or (as some servers send it) raw
                    probe = zlib.decompressobj(zlib.MAX_WBITS)
                    probe.decompress(data[:2])
                except zlib.error:
                    self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            buf = data
            while buf:
                out = self._obj.decompress(buf, CHUNK)
                buf = self._obj.unconsumed_tail
                if out:
                    yield out
                elif buf:  # pragma: no cover - zlib keeps input back only when output is full
                    break
        except zlib.error as e:
            raise httpx.DecodingError(f"the {self._encoding} body is invalid: {e}", request=self._request) from None

    def flush(self) -> Iterator[bytes]:
        # All input went through decompress(), so what is left is at most one pending match.
        try:
            out = self._obj.flush()
            if out:
                yield out
        except zlib.error as e:
            raise httpx.DecodingError(f"the {self._encoding} body is invalid: {e}", request=self._request) from None


_MAX_ENCODINGS = 4


def _decoders(encodings: list[str], request: httpx.Request | None) -> list[_Inflate]:
    if len(encodings) > _MAX_ENCODINGS:
        raise httpx.DecodingError(f"too many content encodings: {', '.join(encodings)}", request=request)
    if any(e not in ("gzip", "x-gzip", "deflate") for e in encodings):
        return []  # an encoding we cannot bound: hand the body over as it came
    return [_Inflate(e, request) for e in reversed(encodings)]  # undo the last one first


def _run(decoders: list[_Inflate], i: int, data: bytes) -> Iterator[bytes]:
    if i == len(decoders):
        if data:
            yield data
        return
    for out in decoders[i].feed(data):
        yield from _run(decoders, i + 1, out)


def _flush(decoders: list[_Inflate]) -> Iterator[bytes]:
    for i, decoder in enumerate(decoders):
        for out in decoder.flush():
            yield from _run(decoders, i + 1, out)
