"""The canonical JSON of the oversight record (docs/audit.md, "Canonical form"): keys sorted (by
code point), no whitespace, UTF-8, non-ASCII as is, i.e. ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)``. RFC 8785 in style; it differs from RFC 8785 only
in how floats are written and how keys outside the BMP sort, which a verifier reproduces
exactly by using this same function (``signoff audit verify``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical", "canonical_text", "sha256_hex"]

# one encoder each, made once: json.dumps with these arguments builds the same encoder on every
# call, and its output is the same
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_STRICT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(value: Any) -> bytes:
    """The canonical JSON of ``value``, as UTF-8 bytes."""
    return _CANONICAL.encode(value).encode("utf-8", "surrogatepass")


def canonical_text(value: Any) -> str:
    """The canonical JSON of ``value`` as text (``canonical`` before its UTF-8 encoding), for a
    value that is stored too: NaN and ±Infinity, which JSON has no words for (and the store
    refuses), raise ValueError rather than being written as ``NaN``."""
    return _STRICT.encode(value)


def sha256_hex(value: Any) -> str:
    """sha256 (hex) of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical(value)).hexdigest()
