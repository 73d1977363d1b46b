"""Bodies read within a byte cap, decoded (gzip, deflate) in bounded steps so that a
decompression bomb stops at the cap."""

from __future__ import annotations

import contextlib
import zlib
from typing import Any, AsyncIterator, Iterator

import httpx

from signoff.engine.egress.errors import ResponseTooLarge


CHUNK = 64 * 1024  # the largest decoded piece handed on at once


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
