"""Why egress was refused: :class:`EgressDenied` (a connection the policy does not allow, with the
entry that would open it) and :class:`ResponseTooLarge` (a body over its cap)."""

from __future__ import annotations

from typing import Any

import httpx

from signoff.engine.egress.addresses import _literal_address, _strip_brackets, _unmapped


ENV_VAR = "SIGNOFF_EGRESS_ALLOW"


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
