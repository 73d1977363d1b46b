"""The allow-list (``SIGNOFF_EGRESS_ALLOW``): its entries parsed and normalised, and
:class:`EgressPolicy`, which judges a host, a port and what they resolve to."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping


from signoff.engine.egress.addresses import (
    METADATA_ADDRESSES,
    IPAddress,
    IPNetwork,
    _embedded_v4,
    _literal_address,
    _strip_brackets,
    _unmapped,
    _unscoped,
    refusal_reason,
)
from signoff.engine.egress.errors import ENV_VAR, EgressDenied, _hostport
from signoff.engine.egress.resolve import Resolver, _resolve, system_resolver


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
