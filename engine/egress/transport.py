"""httpx and httpcore wired to the policy: a network backend that connects only to addresses it
checked (pinned, so DNS rebinding cannot swap them), a transport that caps every body, and
:func:`egress_client`, the only way signoff dials for a flow."""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
from typing import Any, AsyncIterator, Callable, Iterable

import httpcore
import httpx

from signoff.engine.egress.capped import _capped, _declared_length, _encodings
from signoff.engine.egress.errors import EgressDenied
from signoff.engine.egress.policy import EgressPolicy
from signoff.engine.egress.resolve import Resolver


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


def ssl_context(verify: Any, cert: Any) -> ssl.SSLContext:
    """One TLS context per (verify, cert) for the process: building one loads the CA bundle
    (~10 ms of CPU on the event loop), and every HTTP Request node, model call and webhook delivery
    makes a client (issue 28: 70% of a loaded signoff dev's event loop, py-spy, with outbound calls
    at their budget). A context is safe to share; the CA bundle (and SSL_CERT_FILE/SSL_CERT_DIR) is
    read once."""
    try:
        return _shared_ssl_context(verify, cert)
    except TypeError:  # unhashable (a context of the caller's, a dict): as it is
        return httpx.create_ssl_context(verify=verify, cert=cert, trust_env=True)


@functools.lru_cache(maxsize=16)
def _shared_ssl_context(verify: Any, cert: Any) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify, cert=cert, trust_env=True)


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
            ssl_context=ssl_context(verify, cert),
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
