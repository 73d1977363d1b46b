"""Name resolution for the policy: the system resolver, bounded in time."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Awaitable, Callable, Iterable

import httpcore

from signoff.engine.egress.addresses import IPAddress


# An async resolver: (host, port) -> the IP addresses (as strings) the host resolves to.
Resolver = Callable[[str, int], Awaitable[Iterable[str]]]


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
