"""The egress policy (signoff.engine.egress): what a flow may make the server dial.

Real sockets on 127.0.0.1 only: a local HTTP(S) server in a daemon thread, and a recording
network backend under the policy that dials the local server whatever address it is given
(so a policy that failed open would show as a hit, never as traffic beyond loopback)."""

from __future__ import annotations

import gzip
import pickle
import shutil
import socket
import ssl
import subprocess
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import httpx
import pytest

from signoff.engine.egress import (
    CHUNK,
    ENV_VAR,
    EgressDenied,
    EgressError,
    EgressPolicy,
    ResponseTooLarge,
    egress_client,
    read_capped,
    refusal_reason,
)

MiB = 1024 * 1024
CAP = 1 * MiB


# --------------------------------------------------------------------------- local servers


class Server:
    """A real HTTP server on 127.0.0.1 (port 0) in a daemon thread; records every request.

    Paths: ``/`` answers ``host=<Host header>``; ``/redirect?to=URL`` answers 302;
    ``/big?n=N[&cl=1]`` streams N bytes (with Content-Length when cl=1, else until close);
    ``/gzip?n=N`` and ``/deflate?n=N[&raw=1]`` send N zero bytes compressed. A request for an
    absolute URI (what a proxy receives) is recorded and answered ``proxied``."""

    _compressed: dict[tuple[str, int], bytes] = {}

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.hits: list[tuple[str, str, str | None]] = []  # (method, path, Host)
        self.sni: list[str | None] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                with outer.lock:
                    outer.hits.append((self.command, self.path, self.headers.get("Host")))
                url = urlsplit(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                try:
                    if self.path.startswith("http://"):
                        self._send(200, b"proxied")
                    elif url.path == "/redirect":
                        self.send_response(302)
                        self.send_header("Location", q["to"])
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    elif url.path == "/big":
                        self._big(int(q["n"]), q.get("cl") == "1")
                    elif url.path in ("/gzip", "/deflate"):
                        kind = "raw" if q.get("raw") == "1" else url.path[1:]
                        self._send(200, outer.compressed(kind, int(q["n"])), encoding=url.path[1:])
                    else:
                        self._send(200, f"host={self.headers.get('Host')}".encode())
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass  # the client hung up: expected when it stops reading at a cap

            def _send(self, status: int, body: bytes, encoding: str | None = None) -> None:
                self.send_response(status)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _big(self, n: int, with_length: bool) -> None:
                self.send_response(200)
                if with_length:
                    self.send_header("Content-Length", str(n))
                self.end_headers()  # HTTP/1.0: without a length the body ends at close
                if self.command == "HEAD":
                    return
                block = b"x" * CHUNK
                while n > 0:
                    self.wfile.write(block[: min(n, CHUNK)])
                    n -= CHUNK

            do_GET = do_POST = do_HEAD = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sslobj, name, ctx: self.sni.append(name)  # type: ignore[assignment]
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @classmethod
    def compressed(cls, kind: str, n: int) -> bytes:
        if (kind, n) not in cls._compressed:
            data = bytes(n)
            if kind == "gzip":
                cls._compressed[kind, n] = gzip.compress(data, compresslevel=9)
            elif kind == "deflate":
                cls._compressed[kind, n] = zlib.compress(data, 9)
            else:
                c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
                cls._compressed[kind, n] = c.compress(data) + c.flush()
        return cls._compressed[kind, n]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture(scope="module")
def other():
    """A second local server, on a port no test allows."""
    s = Server()
    yield s
    s.close()


class Dialer(httpcore.AsyncNetworkBackend):
    """The network backend under the policy: records each address it is asked to dial and
    the TLS server name, counts the bytes read from the socket, and dials 127.0.0.1:``to``
    instead of the given address when ``to`` is set (so nothing leaves the host)."""

    def __init__(self, to: int | None = None) -> None:
        self.to = to
        self.dials: list[tuple[str, int]] = []
        self.tls_names: list[str | None] = []
        self.bytes_read = 0
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.dials.append((host, port))
        target = ("127.0.0.1", self.to) if self.to is not None else (host, port)
        return _Counting(await self._inner.connect_tcp(*target, timeout=timeout), self)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Counting(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream, owner: Dialer) -> None:
        self._inner = inner
        self._owner = owner

    async def read(self, max_bytes, timeout=None):
        data = await self._inner.read(max_bytes, timeout)
        self._owner.bytes_read += len(data)
        return data

    async def write(self, buffer, timeout=None):
        await self._inner.write(buffer, timeout)

    async def aclose(self):
        await self._inner.aclose()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        self._owner.tls_names.append(server_hostname)
        return _Counting(await self._inner.start_tls(ssl_context, server_hostname, timeout), self._owner)

    def get_extra_info(self, info):
        return self._inner.get_extra_info(info)


class Resolver:
    """A fake DNS: ``names`` maps a host to its answers, or to a list of answers given one
    per call (the last one repeats). Unknown names fail like DNS does. Counts calls."""

    def __init__(self, **names: Any) -> None:
        self.names = {k.replace("_", "."): v for k, v in names.items()}
        self.calls: list[str] = []

    def add(self, host: str, answers: Any) -> "Resolver":
        self.names[host] = answers
        return self

    async def __call__(self, host: str, port: int) -> list[str]:
        host = host.lower().removesuffix(".")  # like DNS: case-insensitive, absolute names
        self.calls.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answers = self.names[host]
        if answers and isinstance(answers[0], list):  # one answer set per call
            n = sum(1 for c in self.calls if c == host) - 1
            return answers[min(n, len(answers) - 1)]
        return list(answers)


def policy(text: str = "") -> EgressPolicy:
    return EgressPolicy.parse(text)


# --------------------------------------------------------------------------- parsing


def test_parse_the_documented_example():
    p = policy("127.0.0.1:8123, internal.example.com, 10.0.0.0/8, [::1]:9000")
    assert set(p.entries) == {"127.0.0.1:8123", "internal.example.com", "10.0.0.0/8", "[::1]:9000"}
    assert EgressPolicy.parse(str(p)) == p  # canonical form round-trips


def test_parse_forms_and_normalisation():
    p = policy(" Internal.Example.COM. ,, 10.0.0.0/8:443, [fd00::/8]:443, ::1, fd00::/8, bücher.de ,")
    assert set(p.entries) == {
        "internal.example.com",
        "10.0.0.0/8:443",
        "[fd00::/8]:443",
        "::1",
        "fd00::/8",
        "xn--bcher-kva.de",
    }
    assert policy("").entries == () and EgressPolicy.parse(None) == EgressPolicy()
    assert EgressPolicy.parse(["a.test:1", "b.test, 10.0.0.0/8"]).entries == ("a.test:1", "b.test", "10.0.0.0/8")
    assert EgressPolicy.from_env({ENV_VAR: "a.test"}).entries == ("a.test",)
    more = policy("a.test").allowing("127.0.0.1:11434", "b.test:443")
    assert set(more.entries) == {"a.test", "b.test:443", "127.0.0.1:11434"} and policy("a.test").entries == ("a.test",)
    assert policy("::1:9000").entries == ("::1:9000",)  # an address: a port on IPv6 needs brackets


@pytest.mark.parametrize(
    "entry, says",
    [
        ("http://internal.example.com", "not a URL"),
        ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ("host:0", "port '0'"),
        ("host:99999", "port '99999'"),
        ("host:abc", "port 'abc'"),
        ("*.example.com", "wildcards"),
        ("[::1", "[address]:port"),
        ("[::1]9000", "[address]:port"),
        ("[127.0.0.1]:80", "brackets are for IPv6"),
        ("2130706433", "write the address as 127.0.0.1"),
        ("0177.0.0.1", "write the address as 127.0.0.1"),
        ("127.1", "write the address as 127.0.0.1"),
        ("300.1.1.1", "not a valid IPv4 address"),
        ("a b", "space"),
        ("-bad-.example", "not a valid host name"),
        (":80", "host is missing"),
        ("10.0.0.0/33", "10.0.0.0/33"),
        ("[fe80::1%eth0]", "scoped"),
    ],
)
def test_parse_errors_name_the_entry(entry: str, says: str):
    with pytest.raises(ValueError) as e:
        EgressPolicy.parse(f"ok.example.com, {entry}")
    assert ENV_VAR in str(e.value) and repr(entry) in str(e.value) and says in str(e.value)


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    "address, reason",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.170.2", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("168.63.129.16", "cloud metadata"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("192.0.2.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback (via IPv4-mapped IPv6 127.0.0.1)"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback (via NAT64 127.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:7f00:1::1", "loopback (via 6to4 127.0.0.1)"),
        ("2002:c0a8:101::1", "private (via 6to4"),
        ("::127.0.0.1", "loopback (via IPv4-compatible IPv6"),
        ("::8.8.8.8", "reserved (IPv4-compatible IPv6)"),
        ("2001:db8::1", "reserved"),
        ("2001::1", "reserved (Teredo)"),
        ("5f00::1", "reserved"),
    ],
)
def test_refused_by_default(address: str, reason: str):
    got = refusal_reason(address)
    assert got is not None and got.startswith(reason), got
    assert EgressPolicy().refusal(address, 443) == got


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_are_allowed(address: str):
    assert refusal_reason(address) is None
    assert EgressPolicy().refusal(address, 80) is None


def test_allow_list_ports_cidrs_and_mapped_forms():
    p = policy("127.0.0.1:8123, 10.0.0.0/8, 192.168.0.0/16:443, [::1]:9000, fd00::/8")
    assert p.refusal("127.0.0.1", 8123) is None
    assert p.refusal("127.0.0.1", 8124) == "loopback"
    assert p.refusal("::ffff:127.0.0.1", 8123) is None  # reaches 127.0.0.1:8123, which is listed
    assert p.refusal("10.200.0.1", 5432) is None
    assert p.refusal("192.168.1.1", 443) is None and p.refusal("192.168.1.1", 80) == "private"
    assert p.refusal("::1", 9000) is None and p.refusal("::1", 9001) == "loopback"
    assert p.refusal("fd12::1", 22) is None


def test_metadata_opens_only_when_named_exactly():
    wide = policy("169.254.0.0/16, 0.0.0.0/0, ::/0")
    assert wide.refusal("169.254.1.1", 80) is None
    assert wide.refusal("10.0.0.1", 80) is None
    assert wide.refusal("169.254.169.254", 80) == "cloud metadata"
    assert wide.refusal("168.63.129.16", 80) == "cloud metadata"
    assert wide.refusal("fd00:ec2::254", 80) == "cloud metadata"
    assert policy("169.254.169.254").refusal("169.254.169.254", 80) is None
    assert policy("169.254.169.254/32:80").refusal("169.254.169.254", 80) is None


@pytest.mark.parametrize(
    "spelling", ["2130706433", "0177.0.0.1", "127.1", "0x7f.1", "0177.1", "0x7f000001", "[::ffff:127.0.0.1]"]
)
async def test_odd_spellings_are_judged_by_the_address_they_reach(spelling: str):
    dns = Resolver()  # a literal never goes to DNS
    with pytest.raises(EgressDenied) as e:
        await EgressPolicy().checked_addresses(spelling, 80, resolver=dns)
    assert (e.value.address, e.value.reason) == ("127.0.0.1", "loopback")
    assert "127.0.0.1:80" in e.value.suggestion
    assert dns.calls == []
    # once allowed, the connection goes to the address that was judged, not to the spelling
    assert await policy("127.0.0.1:80").checked_addresses(spelling, 80, resolver=dns) == ["127.0.0.1"]


async def test_a_name_entry_is_checked_by_name_before_resolution():
    dns = Resolver(internal_test=["10.1.2.3", "fd00::5"], other_test=["10.1.2.3"])
    got = await policy("internal.test").checked_addresses("INTERNAL.test.", 5432, resolver=dns)
    assert got == ["10.1.2.3", "fd00::5"]
    only443 = policy("internal.test:443")
    assert await only443.checked_addresses("internal.test", 443, resolver=dns) == ["10.1.2.3", "fd00::5"]
    with pytest.raises(EgressDenied) as e:
        await only443.checked_addresses("internal.test", 80, resolver=dns)
    assert e.value.address == "10.1.2.3" and e.value.reason == "private"
    with pytest.raises(EgressDenied):  # the same address under another name is not listed
        await policy("internal.test").checked_addresses("other.test", 443, resolver=dns)


async def test_one_refused_address_refuses_the_host():
    dns = Resolver(mixed_test=["93.184.216.34", "127.0.0.1"])
    with pytest.raises(EgressDenied) as e:
        await EgressPolicy().checked_addresses("mixed.test", 80, resolver=dns)
    assert e.value.address == "127.0.0.1"


def test_egress_denied_is_an_http_error_that_is_not_retryable():
    e = EgressDenied("db.internal", 5432, "10.0.0.7", "private")
    assert isinstance(e, httpx.ConnectError) and isinstance(e, httpx.HTTPError) and isinstance(e, EgressError)
    assert e.retryable is False and getattr(e, "retryable", True) is False
    assert str(e) == (
        "egress refused: db.internal:5432 resolves to 10.0.0.7, a private address, which flows may not reach. "
        f"If this is intended, an operator must add it to {ENV_VAR} (e.g. db.internal:5432)."
    )
    back = pickle.loads(pickle.dumps(e))
    assert (back.host, back.port, back.address, back.reason, str(back)) == (e.host, e.port, e.address, e.reason, str(e))
    v6 = EgressDenied("::1", 9000, "::1", "loopback")
    assert "[::1]:9000 is a loopback address" in str(v6) and "(e.g. [::1]:9000)" in str(v6)
    unix = EgressDenied("/run/x.sock", None, None, "a Unix socket")
    assert str(unix) == "egress refused: /run/x.sock (a Unix socket)"
    big = ResponseTooLarge(10, 11)
    assert isinstance(big, httpx.HTTPError) and big.retryable is False


# --------------------------------------------------------------------------- the client: refused


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/",
        "http://[::1]:{port}/",
        "http://localhost:{port}/",
        "http://2130706433:{port}/",
        "http://127.1:{port}/",
        "http://0x7f.0.0.1:{port}/",
        "http://0177.1:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://[::ffff:7f00:1]:{port}/",
        "http://[64:ff9b::7f00:1]:{port}/",
        "http://0.0.0.0:{port}/",
        "http://[::]:{port}/",
        "http://10.0.0.1/",
        "http://192.168.1.1:8080/",
        "http://100.64.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "https://127.0.0.1:{port}/",
    ],
)
async def test_client_refuses_by_default(server: Server, url: str):
    dialer = Dialer(to=server.port)  # if the check failed open, this would reach the local server
    before = len(server.hits)
    async with egress_client(network_backend=dialer) as client:
        with pytest.raises(EgressDenied) as e:
            await client.get(url.format(port=server.port))
    assert dialer.dials == [] and len(server.hits) == before
    assert ENV_VAR in str(e.value) and e.value.request.url.host  # httpx attached the request


async def test_octal_dotted_quad_is_an_invalid_url_for_httpx():
    # httpx refuses '0177.0.0.1' itself; the policy still reads it as 127.0.0.1 (see above)
    async with egress_client() as client:
        with pytest.raises(httpx.InvalidURL):
            await client.get("http://0177.0.0.1/")


async def test_names_are_refused_by_what_they_resolve_to(server: Server):
    dns = Resolver(loopback_test=["127.0.0.1"], private_test=["10.9.8.7"], mapped_test=["::ffff:127.0.0.1"])
    dialer = Dialer(to=server.port)
    async with egress_client(resolver=dns, network_backend=dialer) as client:
        for url in ("http://LOOPBACK.test./", f"http://private.test:{server.port}/", "https://mapped.test/"):
            with pytest.raises(EgressDenied):
                await client.get(url)
    assert dialer.dials == [] and dns.calls == ["loopback.test", "private.test", "mapped.test"]


async def test_metadata_by_name_is_refused(server: Server):
    dns = Resolver(metadata_google_internal=["169.254.169.254"])
    dialer = Dialer(to=server.port)
    async with egress_client(resolver=dns, network_backend=dialer) as client:
        with pytest.raises(EgressDenied) as e:
            await client.get("http://metadata.google.internal/computeMetadata/v1/")
    assert (e.value.host, e.value.address) == ("metadata.google.internal", "169.254.169.254")
    assert e.value.reason == "cloud metadata"
    assert dialer.dials == []


async def test_resolution_failure_is_a_plain_connect_error():
    async with egress_client(resolver=Resolver()) as client:
        with pytest.raises(httpx.ConnectError) as e:
            await client.get("http://nowhere.test/")
    assert not isinstance(e.value, EgressDenied) and "could not resolve nowhere.test" in str(e.value)


async def test_a_refusal_is_not_retried_by_the_transport():
    dns = Resolver(loop_test=["127.0.0.1"])
    async with egress_client(resolver=dns, retries=3) as client:
        with pytest.raises(EgressDenied):
            await client.get("http://loop.test/")
    assert dns.calls == ["loop.test"]


def test_client_refuses_what_would_bypass_the_policy():
    for kwargs in ({"proxy": "http://127.0.0.1:3128"}, {"mounts": {}}, {"transport": object()}, {"trust_env": True}):
        with pytest.raises(TypeError, match="bypass"):
            egress_client(**kwargs)


# --------------------------------------------------------------------------- the client: allowed


async def test_exact_host_port_entry(server: Server, other: Server):
    before = len(other.hits)
    async with egress_client(policy(f"127.0.0.1:{server.port}")) as client:
        r = await client.get(f"{server.url}/")
        assert r.status_code == 200 and r.text == f"host=127.0.0.1:{server.port}"
        with pytest.raises(EgressDenied) as e:
            await client.get(f"{other.url}/")  # same host, another port
    assert e.value.suggestion == f"127.0.0.1:{other.port}"
    assert len(other.hits) == before


async def test_cidr_entries(server: Server, other: Server):
    async with egress_client(policy("127.0.0.0/8")) as client:
        assert (await client.get(f"{server.url}/")).status_code == 200
        assert (await client.get(f"{other.url}/")).status_code == 200
        assert (await client.get(f"http://2130706433:{server.port}/")).status_code == 200  # it is 127.0.0.1
    async with egress_client(policy(f"127.0.0.0/8:{server.port}")) as client:
        assert (await client.get(f"{server.url}/")).status_code == 200
        with pytest.raises(EgressDenied):
            await client.get(f"{other.url}/")


async def test_host_name_entry_keeps_the_name_for_the_host_header(server: Server):
    dns = Resolver(egress_test=["127.0.0.1"], alias_test=["127.0.0.1"])
    async with egress_client(policy("egress.test"), resolver=dns) as client:
        r = await client.get(f"http://egress.test:{server.port}/")
        assert r.text == f"host=egress.test:{server.port}"
        with pytest.raises(EgressDenied):  # another name for the same address is not listed
            await client.get(f"http://alias.test:{server.port}/")


async def test_localhost_entry_with_the_system_resolver(server: Server):
    # whatever order localhost resolves in (::1 first has nothing listening), a checked address answers
    async with egress_client(policy("localhost")) as client:
        r = await client.get(f"http://localhost:{server.port}/")
    assert r.text == f"host=localhost:{server.port}"


# --------------------------------------------------------------------------- redirects, rebinding, TLS, proxies


async def test_each_redirect_hop_is_checked(server: Server, other: Server):
    before = len(other.hits)
    target = f"{other.url}/"
    async with egress_client(policy(f"127.0.0.1:{server.port}"), follow_redirects=True) as client:
        with pytest.raises(EgressDenied) as e:
            await client.get(f"{server.url}/redirect", params={"to": target})
        assert e.value.port == other.port
        ok = await client.get(f"{server.url}/redirect", params={"to": f"{server.url}/"})  # an allowed hop
        assert ok.status_code == 200 and len(ok.history) == 1
    async with egress_client(policy(f"127.0.0.1:{server.port}")) as client:  # not following: the 302 itself
        r = await client.get(f"{server.url}/redirect", params={"to": target})
        assert r.status_code == 302
    assert len(other.hits) == before


async def test_dns_rebinding_cannot_swap_the_checked_address(server: Server):
    # a public answer first, loopback on every later lookup
    dns = Resolver(rebind_test=[["93.184.216.34"], ["127.0.0.1"]])
    dialer = Dialer(to=server.port)  # stands in for the public host
    async with egress_client(resolver=dns, network_backend=dialer) as client:
        r = await client.get(f"http://rebind.test:{server.port}/")
        assert r.status_code == 200 and r.text == f"host=rebind.test:{server.port}"
        assert dialer.dials == [("93.184.216.34", server.port)]  # the checked address, resolved once
        assert dns.calls == ["rebind.test"]
        # the server closed that connection (HTTP/1.0): a new one resolves again, and is checked again
        with pytest.raises(EgressDenied) as e:
            await client.get(f"http://rebind.test:{server.port}/")
    assert e.value.address == "127.0.0.1"
    assert dialer.dials == [("93.184.216.34", server.port)]


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "2", "-subj", "/CN=egress.test",
         "-addext", "subjectAltName=DNS:egress.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    s = Server(tls=ctx)
    s.cafile = str(d / "cert.pem")  # type: ignore[attr-defined]
    yield s
    s.close()


async def test_tls_verifies_the_original_name_on_the_pinned_address(tls_server: Server):
    dns = Resolver(egress_test=["127.0.0.1"])
    dialer = Dialer()
    verify = ssl.create_default_context(cafile=tls_server.cafile)  # type: ignore[attr-defined]
    allow = policy(f"127.0.0.1:{tls_server.port}")
    async with egress_client(allow, resolver=dns, network_backend=dialer, verify=verify) as client:
        r = await client.get(f"https://egress.test:{tls_server.port}/")
        assert r.status_code == 200 and r.text == f"host=egress.test:{tls_server.port}"
        assert dialer.dials == [("127.0.0.1", tls_server.port)]  # connected to the checked address
        assert dialer.tls_names == ["egress.test"] and "egress.test" in tls_server.sni  # SNI: the name
        # the certificate is checked against the name: by address, the same server fails verification
        with pytest.raises(httpx.ConnectError) as e:
            await client.get(f"https://127.0.0.1:{tls_server.port}/")
        assert not isinstance(e.value, EgressDenied) and "CERTIFICATE_VERIFY_FAILED" in str(e.value)


async def test_environment_proxies_are_ignored(server: Server, other: Server, monkeypatch):
    proxy = other.url  # the "proxy": it would record absolute-URI requests
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with httpx.AsyncClient() as plain:  # the environment is live: a plain client uses it
        r = await plain.get("http://proxy-check.invalid/")
        assert r.text == "proxied"
    proxied = [h for h in other.hits if h[1].startswith("http://")]
    assert proxied and proxied[-1][1] == "http://proxy-check.invalid/"
    before = len(other.hits)
    dialer = Dialer(to=server.port)
    async with egress_client(policy(f"127.0.0.1:{server.port}")) as client:
        assert client.trust_env is False  # also: no .netrc credentials sent to a flow's hosts
        r = await client.get(f"{server.url}/")
        assert r.text == f"host=127.0.0.1:{server.port}"  # directly, not through the proxy
    async with egress_client(network_backend=dialer) as client:
        with pytest.raises(EgressDenied):
            await client.get("http://10.0.0.1/")
    assert len(other.hits) == before and dialer.dials == []


# --------------------------------------------------------------------------- size cap


async def test_read_capped_stops_reading_a_long_stream(server: Server):
    dialer = Dialer()
    async with egress_client(policy(f"127.0.0.1:{server.port}"), network_backend=dialer) as client:
        async with client.stream("GET", f"{server.url}/big", params={"n": 32 * MiB}) as resp:
            with pytest.raises(ResponseTooLarge) as e:
                await read_capped(resp, CAP)
            assert resp.is_closed
    assert e.value.limit == CAP and CAP < e.value.received <= CAP + CHUNK
    assert e.value.retryable is False and isinstance(e.value, httpx.HTTPError)
    assert dialer.bytes_read <= CAP + 2 * CHUNK  # read off the socket: the cap and a chunk, not 32 MiB
    assert str(server.port) in str(e.value) and f"{CAP}-byte limit" in str(e.value)


async def test_client_cap_applies_to_request(server: Server):
    dialer = Dialer()
    allow = policy(f"127.0.0.1:{server.port}")
    async with egress_client(allow, max_response_bytes=CAP, network_backend=dialer) as client:
        with pytest.raises(ResponseTooLarge) as e:
            await client.get(f"{server.url}/big", params={"n": 32 * MiB})
        assert CAP < e.value.received <= CAP + CHUNK
        assert dialer.bytes_read <= CAP + 2 * CHUNK
        small = await client.get(f"{server.url}/big", params={"n": 1000})
        assert small.content == b"x" * 1000
        exact = await client.get(f"{server.url}/big", params={"n": CAP, "cl": 1})  # the cap itself is fine
        assert len(exact.content) == CAP


async def test_declared_length_over_the_cap_is_refused_before_reading(server: Server):
    dialer = Dialer()
    allow = policy(f"127.0.0.1:{server.port}")
    async with egress_client(allow, max_response_bytes=CAP, network_backend=dialer) as client:
        with pytest.raises(ResponseTooLarge) as e:
            await client.get(f"{server.url}/big", params={"n": 32 * MiB, "cl": 1})
        assert (e.value.received, e.value.declared) == (0, 32 * MiB) and "declares" in str(e.value)
        assert dialer.bytes_read <= 2 * CHUNK
        head = await client.head(f"{server.url}/big", params={"n": 32 * MiB, "cl": 1})  # no body: fine
        assert head.status_code == 200
    async with egress_client(policy(f"127.0.0.1:{server.port}")) as client:
        async with client.stream("GET", f"{server.url}/big", params={"n": 32 * MiB, "cl": 1}) as resp:
            with pytest.raises(ResponseTooLarge) as e:
                await read_capped(resp, CAP)
            assert e.value.received == 0


async def test_a_compression_bomb_stops_at_the_cap(server: Server):
    allow = policy(f"127.0.0.1:{server.port}")
    assert len(Server.compressed("gzip", 64 * MiB)) < CAP  # small on the wire, 64 MiB decoded
    async with egress_client(allow, max_response_bytes=CAP) as client:
        with pytest.raises(ResponseTooLarge) as e:
            await client.get(f"{server.url}/gzip", params={"n": 64 * MiB})
        assert CAP < e.value.received <= CAP + CHUNK
    async with egress_client(allow) as client:  # no client cap: read_capped decodes within its own
        async with client.stream("GET", f"{server.url}/gzip", params={"n": 64 * MiB}) as resp:
            with pytest.raises(ResponseTooLarge) as e:
                await read_capped(resp, CAP)
        assert CAP < e.value.received <= CAP + CHUNK


@pytest.mark.parametrize("path, params", [("/gzip", {}), ("/deflate", {}), ("/deflate", {"raw": 1})])
async def test_compressed_bodies_under_the_cap_are_decoded(server: Server, path: str, params: dict):
    allow = policy(f"127.0.0.1:{server.port}")
    url = f"{server.url}{path}"
    async with egress_client(allow, max_response_bytes=CAP) as client:
        r = await client.get(url, params={"n": 300_000, **params})
        assert r.content == bytes(300_000) and "content-encoding" not in r.headers
        assert r.request.headers["accept-encoding"] == "gzip, deflate"
    async with egress_client(allow) as client:
        async with client.stream("GET", url, params={"n": 300_000, **params}) as resp:
            assert await read_capped(resp, CAP) == bytes(300_000)


async def test_read_capped_on_a_response_already_read(server: Server):
    async with egress_client(policy(f"127.0.0.1:{server.port}")) as client:
        r = await client.get(f"{server.url}/big", params={"n": 5000, "cl": 1})
    assert await read_capped(r, 5000) == b"x" * 5000
    with pytest.raises(ResponseTooLarge):
        await read_capped(r, 4999)
    with pytest.raises(ValueError):
        await read_capped(r, -1)


async def test_every_request_counts_against_a_runs_budget_of_calls_before_it_is_sent(server: Server):
    """``on_request`` (a run's RunBudget.call) sees each request, each redirect hop too, and what
    it raises stops the request before it dials: the third request never reaches the server."""
    from signoff.engine.context import RunBudget
    from signoff.engine.errors import RunBudgetExceeded

    budget = RunBudget(max_calls=2)
    before = len(server.hits)
    async with egress_client(policy(f"127.0.0.1:{server.port}"), follow_redirects=True,
                             on_request=budget.call) as client:
        ok = await client.get(f"{server.url}/redirect", params={"to": f"{server.url}/"})  # two requests
        assert ok.status_code == 200 and budget.calls == 2
        with pytest.raises(RunBudgetExceeded) as e:
            await client.get(f"{server.url}/")
    assert len(server.hits) - before == 2
    assert e.value.details["budget"] == "calls" and "SIGNOFF_RUN_MAX_CALLS=2" in e.value.message
    # the budget keeps its error: a caller that swallowed it cannot make the next call go out
    assert budget.exceeded is e.value
    with pytest.raises(RunBudgetExceeded):
        budget.call()


def test_clients_share_one_tls_context_per_verify_and_cert(monkeypatch):
    """Building a TLS context loads the CA bundle (~10 ms of CPU on the event loop); every HTTP
    Request node, model call and webhook delivery makes a client, so they share one per
    (verify, cert) instead of building one each (issue 28)."""
    import httpx as _httpx

    from signoff.engine.egress import transport
    from signoff.engine.egress.policy import EgressPolicy

    built = []
    real = _httpx.create_ssl_context
    monkeypatch.setattr(transport.httpx, "create_ssl_context", lambda **kw: built.append(kw) or real(**kw))
    transport._shared_ssl_context.cache_clear()
    clients = [transport.egress_client(EgressPolicy()) for _ in range(5)]
    insecure = [transport.egress_client(EgressPolicy(), verify=False) for _ in range(2)]
    assert len(built) == 2  # one for verify=True, one for verify=False
    contexts = {id(c._transport._pool._ssl_context) for c in clients}
    assert len(contexts) == 1
    assert insecure[0]._transport._pool._ssl_context.verify_mode == ssl.CERT_NONE
    assert clients[0]._transport._pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
